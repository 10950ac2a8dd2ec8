// Streams, events and graphs are handed to callers as pointers. A destroyed object goes back
// to its pool and the next create reuses it, so a program that creates and destroys handles
// in a loop keeps its memory flat, and a stale handle still points at a valid object: it
// reports "destroyed" until the object is reused (real runtimes reuse handle values too).
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace cardsim::shim {

template <typename T>
class HandlePool {
 public:
  // A fresh object, or a released one after T::reset().
  T* acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      T* t = free_.back();
      free_.pop_back();
      t->reset();
      return t;
    }
    all_.push_back(std::make_unique<T>());
    return all_.back().get();
  }
  void release(T* t) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(t);
  }
  // Objects ever allocated (live + pooled): bounded by the peak number alive at once.
  std::size_t allocated() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return all_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::deque<std::unique_ptr<T>> all_;
  std::vector<T*> free_;
};

}  // namespace cardsim::shim
