// The `sim` backend: streams (hardware queues) and events.
#include "SimBackend.h"

namespace cardsim::shim::simbackend {

Status SimBackend::streamCreate(Stream* out, int priority) {
  if (!out) return nullArg("streamCreate", "stream");
  *out = newStream(t_current_device, priority);
  return Status::Ok();
}

StreamObject* SimBackend::newStream(int d, int priority, bool internal) {
  StreamObject* s = stream_pool_.acquire();
  s->device = d;
  s->priority = clampPriority(priority);
  s->rank = rankOf(s->priority);
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    s->id = internal ? next_internal_stream_id_++ : next_stream_id_++;
    // Queue 0 is the default stream's; created streams take the others in turn.
    const uint32_t q = params_.queues.hardware_queues;
    s->queue = QueueId{q == 1 ? 0 : 1 + (next_queue_[static_cast<size_t>(d)]++ % (q - 1))};
    s->last = {dev(d), s->queue, 0};   // nothing queued yet: synchronizing returns at once
    streams_.push_back(s);
  }
  return s;
}

Status SimBackend::streamDestroy(Stream stream) {
  if (!stream) return Status(Code::InvalidHandle, "streamDestroy: the default stream cannot be destroyed");
  if (Status st = checkStream(stream, "streamDestroy"); !st.ok()) return st;
  leaveCapture(stream);   // a joined stream leaves the capture it joined
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (stream->capture) stream->capture.reset();   // an unfinished capture dies with it
    stream->capturing = false;
    stream->capture_origin = false;
  }
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    stream->alive = false;
    streams_.erase(std::find(streams_.begin(), streams_.end(), stream));
  }
  // Work already queued on it still completes in the model (it holds only queue ids).
  stream_pool_.release(stream);
  return Status::Ok();
}

Status SimBackend::streamSynchronize(Stream stream) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "streamSynchronize", &s); !st.ok()) return st;
  if (capturing(s)) return breakCapture(s, "streamSynchronize");
  if (Status st = checkUnsafeCall("streamSynchronize"); !st.ok()) return st;
  return guard([&] {
    sim_.waitFor({lastOf(s)}, params_.host.sync_overhead_s);
    return Status::Ok();
  });
}

Status SimBackend::streamQuery(Stream stream) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "streamQuery", &s); !st.ok()) return st;
  if (capturing(s)) return breakCapture(s, "streamQuery");
  if (Status st = checkUnsafeCall("streamQuery"); !st.ok()) return st;
  return guard([&] {
    return sim_.query({lastOf(s)}, params_.host.query_overhead_s)
               ? Status::Ok()
               : Status(Code::NotReady, "stream " + std::to_string(s->id) + " has work pending");
  });
}

Status SimBackend::streamGetPriority(Stream stream, int* priority) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "streamGetPriority", &s); !st.ok()) return st;
  if (!priority) return nullArg("streamGetPriority", "priority");
  *priority = s->priority;
  return Status::Ok();
}

Status SimBackend::streamGetDevice(Stream stream, int* device) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "streamGetDevice", &s); !st.ok()) return st;
  if (!device) return nullArg("streamGetDevice", "device");
  *device = s->device;
  return Status::Ok();
}

Status SimBackend::streamGetId(Stream stream, uint32_t* id) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "streamGetId", &s); !st.ok()) return st;
  if (!id) return nullArg("streamGetId", "id");
  *id = s->id;
  return Status::Ok();
}

Status SimBackend::streamWaitEvent(Stream stream, Event event) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "streamWaitEvent", &s); !st.ok()) return st;
  if (Status st = checkEvent(event, "streamWaitEvent"); !st.ok()) return st;
  std::shared_ptr<GraphObject> captured;
  StreamObject* recorder = nullptr;
  int marker = -1;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    captured = event->captured_in.lock();
    recorder = event->captured_stream;
    marker = event->captured_marker;
  }
  if (capturing(s)) {
    // The captured work replays in capture order on one stream, so a wait on an event of
    // the same capture is already satisfied; the origin waiting on a joined stream's event
    // joins that stream back. A wait on work outside the capture is not part of the graph
    // (the replay does not wait for it), as in a relaxed capture.
    bool origin = false;
    std::shared_ptr<GraphObject> mine;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      origin = s->capture_origin;
      mine = s->capture;
    }
    if (origin && captured && captured == mine && recorder && recorder != s) leaveCapture(recorder);
    if (captured && captured == mine && marker >= 0) appendMarker(*mine, s->id, false, marker);
    return Status::Ok();
  }
  if (captured) {
    // Fork: a stream waiting on an event recorded in a capture joins that capture.
    if (s->device != captured->device)
      return Status(Code::InvalidValue, "streamWaitEvent: stream " + std::to_string(s->id) + " of device " +
                                            std::to_string(s->device) + " cannot join a capture on device " +
                                            std::to_string(captured->device));
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->capture = captured;
      s->capture_origin = false;
      s->capturing = true;
    }
    {
      std::lock_guard<std::mutex> lock(captured->mutex);
      captured->joined.push_back(s);
    }
    if (marker >= 0) appendMarker(*captured, s->id, false, marker);   // the branch starts after it
    return Status::Ok();
  }
  model::QueuePoint point;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    if (!event->recorded) return Status::Ok();   // waiting on a never-recorded event is a no-op
    point = event->point;
  }
  model::Command cmd;
  cmd.kind = CommandKind::EventWait;
  cmd.wait_for = point;
  return submitAndMaybeWait(s, std::move(cmd), "event wait", params_.host.event_overhead_s, false);
}

Status SimBackend::deviceGetStreamPriorityRange(int* least, int* greatest) {
  if (!least || !greatest) return nullArg("deviceGetStreamPriorityRange", "least/greatest");
  *least = params_.queues.priority_least;
  *greatest = params_.queues.priority_greatest;
  return Status::Ok();
}

Status SimBackend::eventCreate(Event* out, unsigned flags) {
  if (!out) return nullArg("eventCreate", "event");
  if (flags & ~unsigned(kEventDisableTiming | kEventBlockingSync | kEventInterprocess | kEventRuntimeMarker))
    return Status(Code::InvalidValue, "eventCreate: unknown flags 0x" + hex(flags));
  if ((flags & kEventInterprocess) && !(flags & kEventDisableTiming))
    return Status(Code::InvalidValue, "eventCreate: an interprocess event must also disable timing");
  EventObject* e = event_pool_.acquire();
  e->flags = flags;
  *out = e;
  return Status::Ok();
}

Status SimBackend::eventDestroy(Event event) {
  if (Status st = checkEvent(event, "eventDestroy"); !st.ok()) return st;
  event->alive = false;
  event_pool_.release(event);   // a pending record still completes: the model holds its slot
  return Status::Ok();
}

Status SimBackend::eventRecord(Event event, Stream stream) {
  if (Status st = checkEvent(event, "eventRecord"); !st.ok()) return st;
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "eventRecord", &s); !st.ok()) return st;
  if (capturing(s)) {
    // A marker in the graph, not a command: waits on it inside the capture are ordered by the
    // capture itself (another stream waiting on it joins the capture); queries outside the
    // capture see it as not recorded.
    std::shared_ptr<GraphObject> g;
    {
      std::lock_guard<std::mutex> slock(s->mutex);
      g = s->capture;
    }
    if (!g) return Status(Code::Internal, "stream stopped capturing");
    const int marker = appendMarker(*g, s->id, true, -1);
    std::lock_guard<std::mutex> lock(event->mutex);
    event->recorded = false;
    event->slot.reset();
    event->captured_in = g;
    event->captured_stream = s;
    event->captured_on = s->id;
    event->captured_marker = marker;
    return Status::Ok();
  }
  auto slot = std::make_shared<model::EventSlot>();
  model::Command cmd;
  cmd.kind = CommandKind::EventRecord;
  cmd.event = slot;
  model::QueuePoint p;
  const double overhead = (event->flags & kEventRuntimeMarker) ? 0.0 : params_.host.event_overhead_s;
  Status st = submit(s, std::move(cmd), "event record", overhead, &p);
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> lock(event->mutex);
  event->recorded = true;
  event->captured_in.reset();
  event->captured_stream = nullptr;
  event->device = s->device;
  event->point = p;
  event->slot = std::move(slot);
  return Status::Ok();
}

Status SimBackend::eventQuery(Event event) {
  if (Status st = checkEvent(event, "eventQuery"); !st.ok()) return st;
  if (Status st = checkUnsafeCall("eventQuery"); !st.ok()) return st;
  model::QueuePoint p;
  if (!pointOf(event, &p)) return Status::Ok();
  return guard([&] {
    return sim_.query({p}, params_.host.query_overhead_s)
               ? Status::Ok()
               : Status(Code::NotReady, "event not reached yet");
  });
}

Status SimBackend::eventSynchronize(Event event) {
  if (Status st = checkEvent(event, "eventSynchronize"); !st.ok()) return st;
  if (Status st = checkUnsafeCall("eventSynchronize"); !st.ok()) return st;
  model::QueuePoint p;
  if (!pointOf(event, &p)) return Status::Ok();
  return guard([&] {
    sim_.waitFor({p}, params_.host.sync_overhead_s);
    return Status::Ok();
  });
}

Status SimBackend::eventElapsedTime(float* ms, Event start, Event end) {
  if (!ms) return nullArg("eventElapsedTime", "ms");
  if (Status st = checkEvent(start, "eventElapsedTime"); !st.ok()) return st;
  if (Status st = checkEvent(end, "eventElapsedTime"); !st.ok()) return st;
  if ((start->flags | end->flags) & kEventDisableTiming)
    return Status(Code::InvalidHandle, "eventElapsedTime: an event was created with timing disabled");
  model::QueuePoint a, b;
  std::shared_ptr<model::EventSlot> sa, sb;
  {
    std::lock_guard<std::mutex> la(start->mutex);
    if (!start->recorded)
      return Status(Code::InvalidHandle, "eventElapsedTime: the start event was never recorded");
    a = start->point;
    sa = start->slot;
  }
  {
    std::lock_guard<std::mutex> lb(end->mutex);
    if (!end->recorded)
      return Status(Code::InvalidHandle, "eventElapsedTime: the end event was never recorded");
    b = end->point;
    sb = end->slot;
  }
  return guard([&] {
    if (!sim_.query({a, b}, params_.host.query_overhead_s))
      return Status(Code::NotReady, "eventElapsedTime: an event has not been reached yet");
    const double diff_ps = static_cast<double>(sb->time_ps.load()) -
                           static_cast<double>(sa->time_ps.load());
    *ms = static_cast<float>(diff_ps * 1e-9);
    return Status::Ok();
  });
}

}  // namespace cardsim::shim::simbackend
