#include "simulator/FabricClient.h"

#include <boost/asio.hpp>

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "simulator/FabricWire.h"
#include "simulator/FrameQueue.h"
#include "simulator/proto/fabric.pb.h"

namespace cardsim::sim {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
namespace rpc = cardsim::fabric_rpc;

struct FabricClient::Impl : std::enable_shared_from_this<Impl> {
  asio::io_context io;
  tcp::socket socket{io};
  std::thread thread;
  std::string address;

  // Serving thread only.
  unsigned char header[4] = {};
  std::string body;
  // What is sent; ends by shutting the socket down once what was sent before close() is out.
  FrameQueue out{socket, [this](const boost::system::error_code& ec) {
                   if (ec) lost(ec);
                   if (!ec || out.closing()) shutDown();
                 }};
  std::promise<void> shut;         // set when the socket is shut down

  struct Result {
    bool ok = false;
    Completion completion;
    std::string error;
  };
  std::mutex mutex;   // everything below
  std::map<uint64_t, std::promise<Result>> waiting;
  uint64_t next_id = 1;
  std::string fatal;   // set once the connection is unusable
  bool closed_by_us = false;
  std::promise<std::string> welcome;   // "" when welcomed, else why not
  bool welcomed = false;
  std::map<std::string, uint64_t> seqs;
  // Eager sends are never answered; an error about one (its receiver left, the two sides
  // disagree) is kept here and raised by this rank's next call. Their ids have the top bit set.
  std::string deferred;
  static constexpr uint64_t kEagerBit = uint64_t{1} << 63;

  void failAll(const std::string& why) {
    std::map<uint64_t, std::promise<Result>> doomed;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (fatal.empty()) fatal = why;
      doomed.swap(waiting);
      if (!welcomed) {
        welcomed = true;
        welcome.set_value(fatal);
      }
    }
    for (auto& [id, p] : doomed) p.set_value(Result{false, {}, fatal});
  }

  void readHeader() {
    auto self = shared_from_this();
    asio::async_read(socket, asio::buffer(header, 4), [self](boost::system::error_code ec, size_t) {
      if (ec) return self->lost(ec);
      const uint32_t n = wire::frameLength(self->header);
      if (n == 0 || n > wire::kMaxFrameBytes)
        return self->failAll("the fabric server at " + self->address + " sent a frame of " + std::to_string(n) +
                             " bytes: is that address a cardsim fabric server?");
      self->body.resize(n);
      asio::async_read(self->socket, asio::buffer(self->body), [self](boost::system::error_code ec2, size_t) {
        if (ec2) return self->lost(ec2);
        rpc::ToClient m;
        if (!m.ParseFromString(self->body))
          return self->failAll("the fabric server at " + self->address + " sent a malformed message");
        self->onMessage(m);
        self->readHeader();
      });
    });
  }

  void lost(const boost::system::error_code& ec) {
    bool ours;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ours = closed_by_us;
    }
    failAll(ours ? "the connection to the fabric server was closed"
                 : "the fabric server at " + address + " closed the connection (" + ec.message() +
                       "): the server, or the rank hosting it (rank 0, when the job started it), has stopped "
                       "(exited or was killed)");
  }

  void onMessage(const rpc::ToClient& m) {
    if (m.has_welcome()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!welcomed) {
        welcomed = true;
        welcome.set_value("");
      }
      return;
    }
    uint64_t id = 0;
    Result r;
    if (m.has_complete()) {
      id = m.complete().id();
      r.ok = true;
      r.completion.end_ps = m.complete().end_ps();
      r.completion.algorithm = m.complete().algorithm();
      r.completion.alone_s = m.complete().alone_s();
    } else if (m.has_error()) {
      id = m.error().id();
      r.error = m.error().message();
      if (id == 0) return failAll(r.error);
      if (id & kEagerBit) {
        std::lock_guard<std::mutex> lock(mutex);
        if (deferred.empty()) deferred = "an earlier send failed: " + r.error;
        return;
      }
    } else {
      return;
    }
    std::promise<Result> p;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = waiting.find(id);
      if (it == waiting.end()) return;   // gave up on it already
      p = std::move(it->second);
      waiting.erase(it);
    }
    p.set_value(std::move(r));
  }

  void send(std::string frame) {
    auto self = shared_from_this();
    asio::post(io, [self, f = std::move(frame)]() mutable { self->out.push(std::move(f), self); });
  }

  // Serving thread. What was sent before close() (an eager send, say: its receiver may
  // still need it after this process is gone) goes out first.
  void startClosing() { out.closeAfterWrites(); }
  void shutDown() {
    if (!socket.is_open()) return;
    boost::system::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    shut.set_value();
  }
};

FabricClient::FabricClient(const std::string& address, const Identity& who, double connect_timeout_s)
    : address_(address), impl_(std::make_shared<Impl>()) {
  impl_->address = address;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw FabricError("fabric server address '" + address + "' is not host:port");
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(connect_timeout_s));
  boost::system::error_code ec;
  tcp::resolver resolver(impl_->io);
  auto endpoints = resolver.resolve(host, port, ec);
  if (ec) throw FabricError("fabric server address '" + address + "': " + ec.message());
  for (;;) {
    asio::connect(impl_->socket, endpoints, ec);
    if (!ec) break;
    if (ec != asio::error::connection_refused || std::chrono::steady_clock::now() >= deadline)
      throw FabricError("cannot connect to the fabric server at " + address + ": " + ec.message());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  impl_->socket.set_option(tcp::no_delay(true), ec);
  rpc::ToServer hello;
  auto* h = hello.mutable_hello();
  h->set_protocol_version(wire::kProtocolVersion);
  h->set_job(who.job);
  h->set_rank(who.rank);
  h->set_world_size(who.world_size);
  h->set_preset(who.preset);
  h->set_fabric(who.fabric);
  std::future<std::string> welcomed = impl_->welcome.get_future();
  impl_->send(wire::frame(hello.SerializeAsString()));
  impl_->readHeader();
  Impl* impl = impl_.get();
  impl_->thread = std::thread([impl] { impl->io.run(); });
  const auto left = std::max(std::chrono::steady_clock::duration(std::chrono::seconds(1)),
                             deadline - std::chrono::steady_clock::now());
  std::string why;
  if (welcomed.wait_for(left) != std::future_status::ready)
    why = "no answer from " + address + " (is it a cardsim fabric server?)";
  else
    why = welcomed.get();
  if (!why.empty()) {
    close();
    throw FabricError(why);
  }
}

FabricClient::~FabricClient() { close(); }

uint64_t FabricClient::nextSeq(const std::string& group) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->seqs[group]++;
}

namespace {
std::string arriveFrame(const FabricClient::Collective& c, uint64_t id, bool eager) {
  rpc::ToServer m;
  auto* a = m.mutable_arrive();
  a->set_id(id);
  a->set_group(c.group);
  for (int r : c.ranks) a->add_ranks(r);
  a->set_seq(c.seq);
  a->set_op(c.op);
  a->set_bytes(c.bytes);
  a->set_root(c.root);
  a->set_peer(c.peer);
  a->set_algorithm(c.algorithm);
  a->set_arrival_ps(c.arrival_ps);
  a->set_timeout_ms(c.timeout_s > 0 ? static_cast<uint32_t>(std::min(c.timeout_s * 1000.0, 4.0e9)) : 0);
  a->set_eager(eager);
  return wire::frame(m.SerializeAsString());
}
}  // namespace

// Raises what went wrong with the connection, or with an earlier eager send (once).
void FabricClient::throwIfFailedLocked() {
  if (!impl_->fatal.empty()) throw FabricError(impl_->fatal);
  if (!impl_->deferred.empty()) {
    std::string why;
    why.swap(impl_->deferred);
    throw FabricError(why);
  }
}

void FabricClient::post(const Collective& c) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    throwIfFailedLocked();
    id = Impl::kEagerBit | impl_->next_id++;
  }
  impl_->send(arriveFrame(c, id, true));
}

namespace {
// As the server names a collective: "all_reduce #3 of process group [0, 1]".
std::string describe(const FabricClient::Collective& c) {
  std::string ranks;
  for (int r : c.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return c.op + " #" + std::to_string(c.seq) + " of process group [" + ranks + "]";
}
// An error about the connection (not from the server about this collective) gets the
// collective's name in front, so that the user learns what was under way.
std::string named(const FabricClient::Collective& c, const std::string& why) {
  return why.find(" of process group [") != std::string::npos ? why : describe(c) + ": " + why;
}
}  // namespace

FabricClient::Completion FabricClient::collective(const Collective& c) {
  std::future<Impl::Result> f;
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    try {
      throwIfFailedLocked();
    } catch (const FabricError& e) {
      throw FabricError(named(c, e.what()));
    }
    id = impl_->next_id++;
    f = impl_->waiting[id].get_future();
  }
  impl_->send(arriveFrame(c, id, false));
  if (c.timeout_s > 0) {
    // The server enforces the timeout and names the missing ranks; this is the backstop
    // for a server that stopped answering.
    if (f.wait_for(std::chrono::duration<double>(c.timeout_s + 10)) != std::future_status::ready) {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      impl_->waiting.erase(id);
      throw FabricError(describe(c) + ": no answer from the fabric server at " + address_ + " within " +
                        std::to_string(static_cast<int>(c.timeout_s + 10)) + " s");
    }
  }
  Impl::Result r = f.get();
  if (!r.ok) throw FabricError(named(c, r.error));
  return r.completion;
}

void FabricClient::park(bool parked) {
  rpc::ToServer m;
  m.mutable_park()->set_parked(parked);
  impl_->send(wire::frame(m.SerializeAsString()));
}

void FabricClient::close() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->closed_by_us) return;
    impl_->closed_by_us = true;
  }
  auto impl = impl_;
  std::future<void> shut = impl->shut.get_future();
  asio::post(impl->io, [impl] { impl->startClosing(); });
  if (impl->thread.joinable()) {
    if (impl->thread.get_id() == std::this_thread::get_id()) {
      impl->thread.detach();
    } else {
      // A server that stopped reading cannot hold the process: its queued writes are given
      // up after a bound.
      // (The io thread may have ended already, the server gone: nothing to wait for then.)
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (shut.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready && !impl->io.stopped())
        if (std::chrono::steady_clock::now() >= give_up) {
          impl->io.stop();
          break;
        }
      impl->thread.join();
      // The io thread may have ended (the server hung up) before the close above ran: run
      // what is still queued, or its handlers, which hold the Impl, would keep it alive
      // for ever (a leak LeakSanitizer found).
      impl->io.restart();
      impl->io.poll();
    }
  }
  impl->failAll("the connection to the fabric server was closed");
}

}  // namespace cardsim::sim
