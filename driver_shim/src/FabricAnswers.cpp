#include "FabricAnswers.h"

#include <exception>
#include <utility>

namespace cardsim::shim::simbackend {

void FabricAnswers::add(Pending p) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back(std::move(p));
  any_.store(true, std::memory_order_release);
}

void FabricAnswers::settleAll(sim::FabricClient& client, const Apply& apply) {
  std::lock_guard<std::mutex> settling(settle_mutex_);
  for (;;) {
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_.empty()) {
        any_.store(false, std::memory_order_release);
        return;
      }
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    try {
      apply(p, client.await(p.ticket, p.collective));
    } catch (const std::exception& e) {
      p.end->end_ps.store(p.collective.arrival_ps);
      std::lock_guard<std::mutex> lock(mutex_);
      failed_.emplace(p.owner, e.what());   // the first failure stays
    }
  }
}

std::string FabricAnswers::takeFailure() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = failed_.find(std::this_thread::get_id());
  if (it == failed_.end()) return {};
  std::string why = std::move(it->second);
  failed_.erase(it);
  return why;
}

}  // namespace cardsim::shim::simbackend
