// The client keeps no thread of its own: the thread that reports a collective writes its
// frame to the socket itself, and a thread waiting for an answer reads the socket itself
// (one reader at a time; it hands what it reads for the others to them). A collective's
// round trip is then the server's answer and one wake-up, not four hand-offs between
// threads (a 2-rank replay's collectives took about 70 us each through an I/O thread).
#include "simulator/FabricClient.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "simulator/FabricNames.h"
#include "simulator/FabricWire.h"
#include "simulator/proto/fabric.pb.h"

namespace cardsim::sim {

namespace rpc = cardsim::fabric_rpc;
using Clock = std::chrono::steady_clock;

struct FabricClient::Impl {
  int fd = -1;
  std::string address;

  std::mutex write_mutex;   // one whole frame at a time on the socket

  struct Result {
    bool ok = false;
    Completion completion;
    std::string error;
  };
  std::mutex mutex;   // everything below
  std::condition_variable changed;   // an answer came in, the reader's role fell free, or the connection failed
  bool reading = false;              // a thread is reading the socket (it alone touches `in`)
  std::string in;                    // bytes read that do not make a whole frame yet
  std::set<uint64_t> waiting;        // ids whose callers wait for an answer
  std::map<uint64_t, Result> answered;
  std::map<uint64_t, std::vector<std::pair<int, std::string>>> gone_answers;   // AskGone's, by id
  uint64_t next_id = 1;
  std::string fatal;   // set once the connection is unusable
  bool closed_by_us = false;
  bool welcomed = false;
  std::map<std::string, uint64_t> seqs;
  std::vector<FabricClient::Revision> revisions;   // Revise messages not handed to a caller yet
  // Eager sends are never answered; an error about one (its receiver left, the two sides
  // disagree) is kept here and raised by this rank's next call. Their ids have the top bit set.
  std::string deferred;
  static constexpr uint64_t kEagerBit = uint64_t{1} << 63;

  std::string lostMessage(const std::string& reason) const {
    return closed_by_us ? "the connection to the fabric server was closed"
                        : "the fabric server at " + address + " closed the connection (" + reason +
                              "): the server, or the rank hosting it (rank 0, when the job started it), has stopped "
                              "(exited or was killed)";
  }

  void failLocked(const std::string& why) {
    if (fatal.empty()) fatal = why;
    changed.notify_all();
  }

  void onMessageLocked(const rpc::ToClient& m) {
    if (m.has_welcome()) {
      welcomed = true;
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
      r.completion.note = m.complete().note();
    } else if (m.has_gone()) {
      const rpc::Gone& g = m.gone();
      if (waiting.count(g.id()) == 0) return;
      auto& out = gone_answers[g.id()];
      for (int i = 0; i < g.ranks_size(); ++i) out.emplace_back(g.ranks(i), i < g.why_size() ? g.why(i) : std::string());
      return;
    } else if (m.has_revise()) {
      revisions.push_back(Revision{m.revise().group(), m.revise().seq(), m.revise().end_ps()});
      return;
    } else if (m.has_error()) {
      id = m.error().id();
      r.error = m.error().message();
      if (id == 0) return failLocked(r.error);
      if (id & kEagerBit) {
        if (deferred.empty()) deferred = "an earlier send failed: " + r.error;
        return;
      }
    } else {
      return;
    }
    if (waiting.count(id) == 0) return;   // gave up on it already
    answered[id] = std::move(r);
  }

  // Why a reader found the connection unusable: the stream ended or broke (`lost`, with the
  // reason), or the server sent something that is not a message (`garbage`, in words).
  struct Failure {
    std::string lost, garbage;
    bool any() const { return !lost.empty() || !garbage.empty(); }
  };

  // The reader's part, without the lock: waits until the socket is readable or `deadline`,
  // then reads what is there and cuts it into messages; `timed_out` if nothing came in time.
  void readSome(Clock::time_point deadline, std::vector<rpc::ToClient>* got, Failure* failure, bool* timed_out) {
    int wait_ms = -1;
    if (deadline != Clock::time_point::max()) {
      // Rounded up to whole milliseconds, except "now", which does not wait at all.
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
      wait_ms = left <= 0 ? 0 : static_cast<int>(std::min<long long>((left + 999) / 1000, 3600 * 1000));
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready < 0) {
      if (errno != EINTR) failure->lost = std::string("poll: ") + std::strerror(errno);
      return;
    }
    if (ready == 0) {
      *timed_out = Clock::now() >= deadline;
      return;
    }
    char buf[1 << 16];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      failure->lost = std::strerror(errno);
      return;
    }
    if (n == 0) {
      failure->lost = "end of file";
      return;
    }
    in.append(buf, static_cast<std::size_t>(n));
    std::size_t at = 0;
    while (in.size() - at >= 4) {
      const uint32_t len = wire::frameLength(reinterpret_cast<const unsigned char*>(in.data() + at));
      if (len == 0 || len > wire::kMaxFrameBytes) {
        failure->garbage = "the fabric server at " + address + " sent a frame of " + std::to_string(len) +
                   " bytes: is that address a cardsim fabric server?";
        return;
      }
      if (in.size() - at - 4 < len) break;
      rpc::ToClient m;
      if (!m.ParseFromArray(in.data() + at + 4, static_cast<int>(len))) {
        failure->garbage = "the fabric server at " + address + " sent a malformed message";
        return;
      }
      got->push_back(std::move(m));
      at += 4 + len;
    }
    in.erase(0, at);
  }

  // Reads the socket until `done()` holds or `deadline` passes (false then), as the one
  // reader; a thread finding another reading waits for it to hand over. `lock` holds `mutex`.
  template <class Done>
  bool pump(std::unique_lock<std::mutex>& lock, Clock::time_point deadline, Done done) {
    while (!done()) {
      if (!fatal.empty()) return true;
      if (reading) {
        if (deadline == Clock::time_point::max()) {
          changed.wait(lock);
        } else if (changed.wait_until(lock, deadline) == std::cv_status::timeout) {
          return done();
        }
        continue;
      }
      reading = true;
      lock.unlock();
      std::vector<rpc::ToClient> got;
      Failure failure;
      bool timed_out = false;
      readSome(deadline, &got, &failure, &timed_out);
      lock.lock();
      reading = false;
      for (const rpc::ToClient& m : got) onMessageLocked(m);
      if (failure.any()) failLocked(failure.garbage.empty() ? lostMessage(failure.lost) : failure.garbage);
      changed.notify_all();
      if (timed_out) return done();
    }
    return true;
  }

  // Reads what has already come in, without waiting (unless another thread is reading).
  void drainLocked(std::unique_lock<std::mutex>& lock) {
    if (reading || !fatal.empty()) return;
    pump(lock, Clock::now(), [] { return false; });
  }

  // Writes one whole frame; false if the connection is gone (`why`), or if the server has
  // not taken a byte for the send timeout (`stalled`).
  bool sendFrame(const std::string& frame, std::string* why, bool* stalled) {
    std::lock_guard<std::mutex> w(write_mutex);
    if (fd < 0) {
      *why = "the connection to the fabric server was closed";
      return false;
    }
    std::size_t done = 0;
    while (done < frame.size()) {
      const ssize_t n = ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        *stalled = errno == EAGAIN || errno == EWOULDBLOCK;
        *why = std::strerror(errno);
        return false;
      }
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  void send(const std::string& frame) {
    std::string why;
    bool stalled = false;
    if (sendFrame(frame, &why, &stalled)) return;
    std::lock_guard<std::mutex> lock(mutex);
    failLocked(stalled ? "the fabric server at " + address + " stopped reading: nothing could be written to it for 60 s"
                       : lostMessage(why));
  }
};

namespace {

// How long past a collective's timeout a member waits for the server's answer before it
// takes the server for stopped.
constexpr double kBackstopGraceS = 2.0;

struct Endpoint {
  int family, type, protocol;
  sockaddr_storage addr;
  socklen_t len;
};

// Where "host:port" (TCP) or "unix:PATH" / "unix:@NAME" (a Unix-domain socket, @ for an
// abstract name, as FabricServer::localAddress() gives) leads.
std::vector<Endpoint> resolve(const std::string& address) {
  std::vector<Endpoint> out;
  if (address.rfind("unix:", 0) == 0) {
    std::string path = address.substr(5);
    if (!path.empty() && path[0] == '@') path[0] = '\0';
    Endpoint e{AF_UNIX, SOCK_STREAM, 0, {}, 0};
    auto* un = reinterpret_cast<sockaddr_un*>(&e.addr);
    if (path.empty() || path.size() >= sizeof un->sun_path)
      throw FabricError("fabric server address '" + address + "': the socket's name must be 1 to " +
                        std::to_string(sizeof un->sun_path - 1) + " characters");
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path, path.data(), path.size());
    e.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (path[0] == '\0' ? 0 : 1));
    out.push_back(e);
    return out;
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw FabricError("fabric server address '" + address + "' is not host:port (nor unix:PATH)");
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  // getaddrinfo takes a port number past 65535 (modulo 2^16), or a service name: a number
  // is checked here, so that a typo is named rather than met as "connection refused".
  if (port.find_first_not_of("0123456789") == std::string::npos &&
      (port.size() > 5 || std::stoul(port) < 1 || std::stoul(port) > 65535))
    throw FabricError("fabric server address '" + address + "': port " + port + " is not 1..65535");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    throw FabricError("fabric server address '" + address + "': " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  for (addrinfo* a = list.get(); a; a = a->ai_next) {
    Endpoint e{a->ai_family, a->ai_socktype, a->ai_protocol, {}, a->ai_addrlen};
    std::memcpy(&e.addr, a->ai_addr, a->ai_addrlen);
    out.push_back(e);
  }
  return out;
}

// A connection to `address`, retrying refused connections until `deadline`.
int connectTo(const std::string& address, Clock::time_point deadline) {
  const std::vector<Endpoint> endpoints = resolve(address);
  for (;;) {
    int last_error = ECONNREFUSED;
    for (const Endpoint& a : endpoints) {
      const int fd = ::socket(a.family, a.type | SOCK_CLOEXEC, a.protocol);
      if (fd < 0) {
        last_error = errno;
        continue;
      }
      // Non-blocking while connecting, so that an address that never answers is bounded too.
      const int flags = ::fcntl(fd, F_GETFL, 0);
      ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        rc = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 3600 * 1000)));
        int err = ETIMEDOUT;
        socklen_t len = sizeof err;
        if (rc > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      }
      if (rc == 0) {
        ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        const int one = 1;
        if (a.family != AF_UNIX) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        // A server that stops reading cannot block a rank's call for ever.
        timeval t{60, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
        return fd;
      }
      last_error = errno;
      ::close(fd);
    }
    // A Unix-domain name nobody listens on yet: ECONNREFUSED (or ENOENT for a path); its
    // backlog full: EAGAIN (a Unix-domain connect does not complete later, as TCP's does).
    const bool retry = last_error == ECONNREFUSED || last_error == ENOENT || last_error == EAGAIN;
    if (!retry || Clock::now() >= deadline)
      throw FabricError("cannot connect to the fabric server at " + address + ": " + std::strerror(last_error));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

FabricClient::FabricClient(const std::string& address, const Identity& who, double connect_timeout_s)
    : address_(address), impl_(std::make_shared<Impl>()) {
  impl_->address = address;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(connect_timeout_s));
  impl_->fd = connectTo(address, deadline);
  rpc::ToServer hello;
  auto* h = hello.mutable_hello();
  h->set_protocol_version(wire::kProtocolVersion);
  h->set_job(who.job);
  h->set_rank(who.rank);
  h->set_world_size(who.world_size);
  world_size_ = who.world_size;
  rank_ = who.rank;
  h->set_preset(who.preset);
  h->set_fabric(who.fabric);
  h->set_pid(static_cast<uint32_t>(::getpid()));
  impl_->send(wire::frame(hello.SerializeAsString()));
  const auto answer_by = std::max(deadline, Clock::now() + std::chrono::seconds(1));
  std::string why;
  {
    std::unique_lock<std::mutex> lock(impl_->mutex);
    const bool answered = impl_->pump(lock, answer_by, [&] { return impl_->welcomed; });
    if (!impl_->welcomed)
      why = !impl_->fatal.empty() ? impl_->fatal
            : answered            ? "the fabric server at " + address + " did not welcome this rank"
                                  : "no answer from " + address + " (is it a cardsim fabric server?)";
  }
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
  a->set_sealed_ps(c.sealed_ps);
  a->set_launched_ps(c.launched_ps);
  for (double b : c.send_bytes) a->add_send_bytes(b);
  for (double b : c.recv_bytes) a->add_recv_bytes(b);
  if (c.device >= 0) a->set_device(static_cast<uint32_t>(c.device));
  a->set_dtype(c.dtype);
  a->set_reduce_op(c.reduce_op);
  a->set_refused(c.refused);
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
    std::unique_lock<std::mutex> lock(impl_->mutex);
    impl_->drainLocked(lock);   // an error about an earlier send is this call's to raise
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
  return c.op + " #" + std::to_string(c.seq) + " of process group [" + ranks + "]" + groupInstanceNote(c.group);
}
// An error about the connection (not from the server about this collective) gets the
// collective's name in front, so that the user learns what was under way.
std::string named(const FabricClient::Collective& c, const std::string& why) {
  return why.find(" of process group [") != std::string::npos ? why : describe(c) + ": " + why;
}
}  // namespace

FabricClient::Completion FabricClient::collective(const Collective& c) { return await(arrive(c), c); }

uint64_t FabricClient::arrive(const Collective& c) {
  uint64_t id;
  {
    std::unique_lock<std::mutex> lock(impl_->mutex);
    impl_->drainLocked(lock);
    try {
      throwIfFailedLocked();
    } catch (const FabricError& e) {
      throw FabricError(named(c, e.what()));
    }
    id = impl_->next_id++;
    impl_->waiting.insert(id);
  }
  impl_->send(arriveFrame(c, id, false));
  return id;
}

FabricClient::Completion FabricClient::await(uint64_t id, const Collective& c) {
  // The server enforces the timeout and names the missing ranks; this is the backstop for
  // a server that stopped answering. (Its timer started at the first member's arrival, no
  // later than this one's: its answer is due by then; the grace covers a loaded machine.)
  const double backstop_s = c.timeout_s + kBackstopGraceS;
  const auto deadline = c.timeout_s > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                             std::chrono::duration<double>(backstop_s))
                                        : Clock::time_point::max();
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->pump(lock, deadline, [&] { return impl_->answered.count(id) > 0; });
  impl_->waiting.erase(id);
  auto it = impl_->answered.find(id);
  if (it == impl_->answered.end()) {
    if (!impl_->fatal.empty()) throw FabricError(named(c, impl_->fatal));
    char within[32];
    std::snprintf(within, sizeof within, "%g", backstop_s);
    throw FabricError(describe(c) + ": no answer from the fabric server at " + address_ + " within " + within +
                      " s: the process hosting it stopped answering (a job's own server runs in rank 0's "
                      "process; a hand-started one in its cardsim fabricd)");
  }
  Impl::Result r = std::move(it->second);
  impl_->answered.erase(it);
  if (!r.ok) throw FabricError(named(c, r.error));   // revisions stay for the next call
  // Revisions came before this answer on the socket: the caller applies them with it.
  r.completion.revised = std::exchange(impl_->revisions, {});
  return r.completion;
}

std::vector<std::pair<int, std::string>> FabricClient::goneOf(const std::vector<int>& ranks, double timeout_s) {
  uint64_t id;
  {
    std::unique_lock<std::mutex> lock(impl_->mutex);
    if (!impl_->fatal.empty()) throw FabricError(impl_->fatal);
    id = impl_->next_id++;
    impl_->waiting.insert(id);
  }
  rpc::ToServer m;
  rpc::AskGone* a = m.mutable_ask_gone();
  a->set_id(id);
  for (int r : ranks) a->add_ranks(r);
  impl_->send(wire::frame(m.SerializeAsString()));
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->pump(lock, deadline, [&] { return impl_->gone_answers.count(id) > 0; });
  impl_->waiting.erase(id);
  auto it = impl_->gone_answers.find(id);
  if (it == impl_->gone_answers.end()) {
    if (!impl_->fatal.empty()) throw FabricError(impl_->fatal);
    throw FabricError("no answer from the fabric server at " + address_ + " within " + std::to_string(timeout_s) + " s");
  }
  std::vector<std::pair<int, std::string>> out = std::move(it->second);
  impl_->gone_answers.erase(it);
  return out;
}

void FabricClient::traffic(int source, int destination, double bytes, uint64_t start_ps) {
  rpc::ToServer m;
  rpc::Traffic* t = m.mutable_traffic();
  t->add_ranks(source);
  t->add_ranks(destination);
  t->set_bytes(bytes);
  t->set_start_ps(start_ps);
  impl_->send(wire::frame(m.SerializeAsString()));
}

void FabricClient::park(bool parked) {
  rpc::ToServer m;
  m.mutable_park()->set_parked(parked);
  impl_->send(wire::frame(m.SerializeAsString()));
}

void FabricClient::close() {
  Impl& impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    if (impl.closed_by_us) return;
    impl.closed_by_us = true;
  }
  {
    // What was written (an eager send, say: its receiver may still need it after this
    // process is gone) goes out before the end of the stream.
    std::lock_guard<std::mutex> w(impl.write_mutex);
    if (impl.fd >= 0) ::shutdown(impl.fd, SHUT_WR);
  }
  std::unique_lock<std::mutex> lock(impl.mutex);
  // Read until the server ends its side (bounded): a byte left unread would make closing
  // the socket a reset, which can discard what is still on its way out.
  if (impl.fd >= 0) impl.pump(lock, Clock::now() + std::chrono::seconds(2), [] { return false; });
  impl.failLocked("the connection to the fabric server was closed");
  if (impl.reading) {
    // Another thread is still in its read: wake it, and wait until it has let go.
    std::lock_guard<std::mutex> w(impl.write_mutex);
    if (impl.fd >= 0) ::shutdown(impl.fd, SHUT_RDWR);
  }
  impl.changed.wait(lock, [&] { return !impl.reading; });
  std::lock_guard<std::mutex> w(impl.write_mutex);
  if (impl.fd >= 0) ::close(impl.fd);
  impl.fd = -1;
}

}  // namespace cardsim::sim
