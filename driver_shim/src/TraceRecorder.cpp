#include "TraceRecorder.h"

#include "traces/lib/TraceFormat.h"

namespace cardsim::shim {

namespace {
// The arena's first block is kept across resets; records after a reset reuse it.
constexpr std::size_t kArenaBlock = 256 * 1024;
constexpr uint32_t kRecordsPerArenaReset = 256;

trace::DeviceCommand::Kind commandKind(ActivityRecord::Kind k) {
  using K = ActivityRecord::Kind;
  switch (k) {
    case K::Kernel: return trace::DeviceCommand::KERNEL;
    case K::MemcpyHtoD: return trace::DeviceCommand::MEMCPY_HTOD;
    case K::MemcpyDtoH: return trace::DeviceCommand::MEMCPY_DTOH;
    case K::MemcpyDtoD: return trace::DeviceCommand::MEMCPY_DTOD;
    case K::MemcpyPeer: return trace::DeviceCommand::MEMCPY_PEER;
    case K::Memset: return trace::DeviceCommand::MEMSET;
    case K::EventRecord: return trace::DeviceCommand::EVENT_RECORD;
    case K::EventWait: return trace::DeviceCommand::EVENT_WAIT;
    case K::Collective: return trace::DeviceCommand::COLLECTIVE;
  }
  return trace::DeviceCommand::KERNEL;
}
}  // namespace

TraceRecorder::TraceRecorder(const std::string& path, trace::Header header, trace::Compression compression,
                             TraceObserver* observer)
    : path_(path), observer_(observer), arena_block_(new char[kArenaBlock]) {
  if (observer_) {
    header.set_format_major(trace::kFormatMajor);   // as the writer sets them in the file
    header.set_format_minor(trace::kFormatMinor);
    observer_->onHeader(header);
  }
  if (!path.empty()) writer_ = std::make_unique<trace::TraceWriter>(path, std::move(header), compression);
  google::protobuf::ArenaOptions options;
  options.initial_block = arena_block_.get();
  options.initial_block_size = kArenaBlock;
  arena_ = std::make_unique<google::protobuf::Arena>(options);
}

trace::Envelope* TraceRecorder::newRecord() {
  if (++arena_records_ >= kRecordsPerArenaReset) {
    arena_->Reset();
    arena_records_ = 0;
  }
  return google::protobuf::Arena::CreateMessage<trace::Envelope>(arena_.get());
}

void TraceRecorder::write(const trace::Envelope& e) {
  if (writer_) writer_->write(e);
  if (observer_) observer_->onRecord(e);
}

uint64_t TraceRecorder::writeCall(trace::Envelope* e, const Host& host) {
  e->set_call(++calls_);
  e->set_thread(host.thread);
  e->set_host_begin_ps(host.begin_ps);
  e->set_host_end_ps(host.end_ps);
  e->set_status(host.status);
  e->set_device(host.device);
  write(*e);
  return calls_;
}

void TraceRecorder::noteSubmission(int device, uint32_t stream, uint64_t call, const Host& host) {
  spans_[StreamKey{device, stream}].push_back(Span{call, host.begin_ps, host.end_ps, 0});
  devices_.insert(device);
}

bool TraceRecorder::match(const ActivityRecord& a, uint64_t* call) {
  *call = 0;
  auto it = spans_.find(StreamKey{a.device, a.stream_id});
  if (it == spans_.end()) return false;
  std::deque<Span>& q = it->second;
  // The stream completes in order, so spans that ended before this command was submitted
  // have no commands left.
  while (!q.empty() && q.front().end_ps < a.submit_ps) q.pop_front();
  if (q.empty()) return false;
  // A call that costs the host no time (a runtime marker's event record) spans none: its
  // command, submitted at the instant the call before it returned, comes after that call's
  // own (the stream keeps their order).
  const auto instant = [&](const Span& s) { return s.begin_ps == a.submit_ps && s.end_ps == a.submit_ps; };
  if (q.size() > 1 && q.front().matched > 0 && q.front().end_ps == a.submit_ps && instant(q[1])) q.pop_front();
  if (q.front().begin_ps < a.submit_ps || instant(q.front())) {
    *call = q.front().call;
    ++q.front().matched;
  }
  return true;   // matched, or submitted before any recorded call (before recording began)
}

void TraceRecorder::writeCommand(const ActivityRecord& a, uint64_t call) {
  const uint32_t name = nameId(a.name);
  trace::Envelope* e = newRecord();
  trace::DeviceCommand* c = e->mutable_command();
  c->set_kind(commandKind(a.kind));
  c->set_device(a.device);
  c->set_queue(a.hardware_queue);
  c->set_stream(a.stream_id);
  c->set_name(name);
  c->set_ready_ps(a.submit_ps);
  c->set_start_ps(a.start_ps);
  c->set_end_ps(a.end_ps);
  c->set_flops(a.flops);
  c->set_bytes(a.bytes);
  c->set_call(call);
  write(*e);
  ++commands_;
}

void TraceRecorder::addCommands(const std::vector<ActivityRecord>& done) {
  // Commands held back last time come first: they completed earlier.
  std::vector<ActivityRecord> held;
  held.swap(held_);
  const std::vector<ActivityRecord>* lists[] = {&held, &done};
  for (const std::vector<ActivityRecord>* list : lists) {
    for (const ActivityRecord& a : *list) {
      uint64_t call = 0;
      if (match(a, &call)) writeCommand(a, call);
      else held_.push_back(a);
    }
  }
}

void TraceRecorder::finish(const std::string& reason, const std::string& fabric_job) {
  for (const ActivityRecord& a : held_) writeCommand(a, 0);
  held_.clear();
  trace::End end;
  end.set_calls(calls_);
  end.set_device_commands(commands_);
  end.set_reason(reason);
  end.set_fabric_job(fabric_job);
  if (writer_) writer_->close(std::move(end));   // the observer sees records as a reader does: no End
}

uint32_t TraceRecorder::nameId(std::string_view text) {
  auto it = names_.find(text);
  if (it != names_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(names_.size()) + 1;
  name_storage_.emplace_back(text);
  names_.emplace(std::string_view(name_storage_.back()), id);
  trace::Envelope* e = newRecord();
  e->mutable_name()->set_id(id);
  e->mutable_name()->set_text(name_storage_.back());
  write(*e);
  return id;
}

uint32_t TraceRecorder::eventId(const void* handle) {
  auto [it, fresh] = events_.emplace(handle, next_event_);
  if (fresh) ++next_event_;
  return it->second;
}

void TraceRecorder::forgetEvent(const void* handle) { events_.erase(handle); }

uint32_t TraceRecorder::graphId(const void* handle) {
  auto [it, fresh] = graphs_.emplace(handle, next_graph_);
  if (fresh) ++next_graph_;
  return it->second;
}

void TraceRecorder::forgetGraph(const void* handle) { graphs_.erase(handle); }

}  // namespace cardsim::shim
