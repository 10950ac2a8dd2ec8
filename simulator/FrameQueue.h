// Frames written to a socket one after another (asio allows one async_write in flight per
// socket), and closing once what was queued has gone out: the fabric server's side of a
// connection (its Session, FabricServerState.h). The client writes from its calling threads.
// Serving thread only. The owner passes itself (shared_from_this()) to keep it alive in
// the write handlers, and is told when the queue has ended: a write failed (`ec` set), or
// everything queued before closeAfterWrites() went out.
#pragma once

#include <boost/asio.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace cardsim::sim {

class FrameQueue {
 public:
  using Ended = std::function<void(const boost::system::error_code& ec)>;

  FrameQueue(boost::asio::generic::stream_protocol::socket& socket, Ended ended)
      : socket_(socket), ended_(std::move(ended)) {}

  // Queues a frame (dropped once a write has failed: the connection is gone).
  void push(std::string frame, std::shared_ptr<void> keep) {
    if (failed_) return;
    out_.push_back(std::move(frame));
    if (!writing_) next(std::move(keep));
  }
  // Ends the queue once it is written out (at once if nothing is being written).
  void closeAfterWrites() {
    closing_ = true;
    if (!writing_ && !failed_) ended_({});
  }
  bool closing() const { return closing_; }

 private:
  void next(std::shared_ptr<void> keep) {
    if (out_.empty()) {
      writing_ = false;
      if (closing_) ended_({});
      return;
    }
    writing_ = true;
    boost::asio::async_write(socket_, boost::asio::buffer(out_.front()),
                             [this, keep](const boost::system::error_code& ec, std::size_t) {
                               out_.pop_front();
                               if (ec) {
                                 writing_ = false;
                                 failed_ = true;
                                 out_.clear();
                                 ended_(ec);
                                 return;
                               }
                               next(keep);
                             });
  }

  boost::asio::generic::stream_protocol::socket& socket_;
  Ended ended_;
  std::deque<std::string> out_;
  bool writing_ = false;
  bool closing_ = false;
  bool failed_ = false;
};

}  // namespace cardsim::sim
