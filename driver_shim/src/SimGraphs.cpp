// The `sim` backend: stream capture and graph launch.
#include "SimBackend.h"

namespace cardsim::shim::simbackend {

Status SimBackend::checkUnsafeCall(const char* what) {
  const CaptureMode mine = threadCaptureMode();
  if (mine == CaptureMode::Relaxed) return Status::Ok();
  const std::thread::id me = std::this_thread::get_id();
  std::vector<std::pair<StreamObject*, CaptureMode>> prohibiting;
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    for (StreamObject* st : streams_) {
      if (!capturing(st)) continue;
      std::lock_guard<std::mutex> sl(st->mutex);
      if (!st->capture_origin || !st->capture) continue;
      const CaptureMode m = st->capture->mode;
      const bool own = st->capture->owner == me && m != CaptureMode::Relaxed;
      const bool other = st->capture->owner != me && m == CaptureMode::Global && mine == CaptureMode::Global;
      if (own || other) prohibiting.emplace_back(st, m);
    }
  }
  if (prohibiting.empty()) return Status::Ok();
  Status out;
  for (const auto& [st, m] : prohibiting) {
    Status s = breakCapture(st, std::string(what) + " (a potentially unsafe call during a capture in " +
                                    captureModeName(m) + " mode; capture_error_mode='relaxed' permits it)");
    if (out.ok()) out = s;
  }
  return out;
}

Status SimBackend::streamBeginCapture(Stream stream, CaptureMode mode) {
  if (!stream)
    return Status(Code::InvalidValue, "streamBeginCapture: the default stream cannot be captured");
  if (Status st = checkStream(stream, "streamBeginCapture"); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture)
    return Status(Code::InvalidValue, "streamBeginCapture: stream " + std::to_string(stream->id) +
                                          " is already capturing");
  stream->capture = std::make_shared<GraphObject>();
  stream->capture->device = stream->device;
  stream->capture->origin_stream = stream->id;
  stream->capture->mode = mode;
  stream->capture->owner = std::this_thread::get_id();
  stream->capture_origin = true;
  stream->capturing = true;
  stream->capture_broken.clear();
  return Status::Ok();
}

Status SimBackend::streamEndCapture(Stream stream, Graph* graph) {
  if (!graph) return nullArg("streamEndCapture", "graph");
  *graph = nullptr;
  if (!stream) return Status(Code::InvalidValue, "streamEndCapture: the default stream never captures");
  if (Status st = checkStream(stream, "streamEndCapture"); !st.ok()) return st;
  std::shared_ptr<GraphObject> g;
  std::string broken;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (stream->capture && !stream->capture_origin)
      return Status(Code::InvalidValue, "streamEndCapture: stream " + std::to_string(stream->id) +
                                            " joined a capture begun on another stream; end it there");
    if (!stream->capture && stream->capture_broken.empty())
      return Status(Code::InvalidValue, "streamEndCapture: stream " + std::to_string(stream->id) +
                                            " is not capturing");
    g = std::move(stream->capture);
    stream->capturing = false;
    stream->capture_origin = false;
    broken.swap(stream->capture_broken);
  }
  if (g) {
    std::vector<StreamObject*> unjoined;
    {
      std::lock_guard<std::mutex> lock(g->mutex);
      unjoined = g->joined;
      if (broken.empty()) broken = g->broken;
    }
    for (StreamObject* j : unjoined) leaveCapture(j);
    if (broken.empty() && !unjoined.empty()) {
      std::string ids;
      for (StreamObject* j : unjoined) ids += (ids.empty() ? "" : ", ") + std::to_string(j->id);
      return Status(Code::InvalidValue, "streamEndCapture: stream(s) " + ids + " joined the capture and were "
                                            "not joined back (the capturing stream never waited on an event "
                                            "recorded on them); the capture is invalidated");
    }
  }
  if (!broken.empty())
    return Status(Code::InvalidValue, "streamEndCapture: the capture was invalidated by " + broken);
  GraphObject* out = graph_pool_.acquire();
  out->device = g->device;
  {
    std::lock_guard<std::mutex> lock(g->mutex);
    out->nodes = std::move(g->nodes);
    out->origin_stream = g->origin_stream;
    out->markers = g->markers;
    out->mode = g->mode;
  }
  *graph = out;
  return Status::Ok();
}

Status SimBackend::streamIsCapturing(Stream stream, bool* is) {
  if (!is) return nullArg("streamIsCapturing", "capturing");
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "streamIsCapturing", &s); !st.ok()) return st;
  *is = capturing(s);
  return Status::Ok();
}

Status SimBackend::graphNodeCount(Graph graph, std::size_t* count) {
  if (!count) return nullArg("graphNodeCount", "count");
  if (Status st = checkGraph(graph, "graphNodeCount"); !st.ok()) return st;
  *count = static_cast<std::size_t>(std::count_if(graph->nodes.begin(), graph->nodes.end(),
                                                  [](const GraphNode& n) { return !n.marker(); }));
  return Status::Ok();
}

Status SimBackend::graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes) {
  if (!nodes) return nullArg("graphDescribe", "nodes");
  if (Status st = checkGraph(graph, "graphDescribe"); !st.ok()) return st;
  nodes->clear();
  for (const GraphNode& n : graph->nodes) {
    GraphNodeInfo i;
    i.name = n.name;
    i.stream_id = n.stream_id;
    if (n.record_marker >= 0) {
      i.kind = "event record";
      i.event = n.record_marker;
    } else if (n.wait_marker >= 0) {
      i.kind = "event wait";
      i.event = n.wait_marker;
    } else if (n.host_only) {
      i.kind = "host";
    } else if (n.cmd.kind == model::CommandKind::Copy) {
      static const char* const kCopy[] = {"memcpy HtoD", "memcpy DtoH", "memcpy DtoD", "memcpy peer", "memset"};
      i.kind = kCopy[static_cast<int>(n.cmd.copy_kind)];
      i.bytes = static_cast<double>(n.cmd.bytes);
    } else if (n.cmd.kind == model::CommandKind::Kernel) {
      i.kind = "kernel";
      i.flops = n.cmd.kernel.flops;
      i.bytes = n.cmd.kernel.bytes_read + n.cmd.kernel.bytes_written;
    } else {
      i.kind = model::commandKindName(n.cmd.kind);
    }
    nodes->push_back(std::move(i));
  }
  return Status::Ok();
}

Status SimBackend::graphLaunch(Graph graph, Stream stream) {
  if (Status st = checkGraph(graph, "graphLaunch"); !st.ok()) return st;
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "graphLaunch", &s); !st.ok()) return st;
  if (s->device != graph->device)
    return Status(Code::InvalidValue, "graphLaunch: graph was captured on device " +
                                          std::to_string(graph->device) + ", stream is on device " +
                                          std::to_string(s->device));
  if (capturing(s)) return breakCapture(s, "graphLaunch (nested graphs are not supported)");
  // The origin's work replays on `s`; each stream that forked from it inside the capture on a
  // lane of its own, ordered by the events recorded and waited inside the capture, so that
  // branches that overlapped when captured overlap when replayed. The host work of the nodes
  // runs in capture order (a legal order of the dependencies).
  std::vector<std::pair<uint32_t, StreamObject*>> lane{{graph->origin_stream, s}};
  std::size_t next_lane = 0;
  auto laneOf = [&](uint32_t stream_id) {
    for (const auto& [id, l] : lane)
      if (id == stream_id) return l;
    if (next_lane == graph->lanes.size()) graph->lanes.push_back(newStream(graph->device, s->priority, true));
    StreamObject* l = graph->lanes[next_lane++];
    lane.emplace_back(stream_id, l);
    return l;
  };
  std::vector<model::QueuePoint> recorded(static_cast<std::size_t>(graph->markers));
  std::vector<bool> have(recorded.size(), false);
  double overhead = params_.host.launch_overhead_s;  // one launch for the whole graph
  for (GraphNode& n : graph->nodes) {
    if (n.work) {
      try {
        n.work();
      } catch (const std::exception& e) {
        return Status(Code::KernelFailed, "graph node '" + n.name + "' failed: " + e.what());
      }
    }
    if (n.host_only) continue;
    StreamObject* l = laneOf(n.stream_id);
    model::Command cmd;
    const char* name = n.name.c_str();
    if (n.record_marker >= 0) {
      cmd.kind = CommandKind::EventRecord;
      cmd.event = std::make_shared<model::EventSlot>();
      const auto m = static_cast<std::size_t>(n.record_marker);
      if (Status st = submit(l, std::move(cmd), name, overhead, &recorded[m]); !st.ok()) return st;
      have[m] = true;
    } else if (n.wait_marker >= 0) {
      const auto m = static_cast<std::size_t>(n.wait_marker);
      if (!have[m]) continue;
      cmd.kind = CommandKind::EventWait;
      cmd.wait_for = recorded[m];
      if (Status st = submit(l, std::move(cmd), name, overhead, nullptr); !st.ok()) return st;
    } else {
      cmd = n.cmd;
      cmd.in_graph = true;
      if (Status st = submit(l, std::move(cmd), name, overhead, nullptr); !st.ok()) return st;
    }
    overhead = kGraphNodeHostSeconds;
  }
  return Status::Ok();
}

int SimBackend::appendMarker(GraphObject& g, uint32_t stream_id, bool record, int wait_for) {
  GraphNode n;
  n.name = record ? "event record" : "event wait";
  n.stream_id = stream_id;
  std::lock_guard<std::mutex> lock(g.mutex);
  if (record) n.record_marker = g.markers++;
  else n.wait_marker = wait_for;
  const int marker = record ? n.record_marker : wait_for;
  g.nodes.push_back(std::move(n));
  return marker;
}

Status SimBackend::graphDestroy(Graph graph) {
  if (Status st = checkGraph(graph, "graphDestroy"); !st.ok()) return st;
  graph->alive = false;
  // The nodes' closures may hold memory (tensors a replay writes): release it now.
  std::vector<GraphNode> nodes;
  nodes.swap(graph->nodes);
  for (StreamObject* l : graph->lanes) (void)streamDestroy(l);
  graph->lanes.clear();
  graph_pool_.release(graph);
  nodes.clear();
  return Status::Ok();
}

Status SimBackend::launchHostFunc(Stream stream, std::function<void()> fn) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "launchHostFunc", &s); !st.ok()) return st;
  if (!fn) return nullArg("launchHostFunc", "fn");
  if (capturing(s)) {
    std::shared_ptr<GraphObject> g;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      g = s->capture;
    }
    if (!g) return Status(Code::Internal, "stream stopped capturing");
    GraphNode n;
    n.name = "host function";
    n.work = std::move(fn);
    n.host_only = true;
    n.stream_id = s->id;
    std::lock_guard<std::mutex> lock(g->mutex);
    g->nodes.push_back(std::move(n));
    return Status::Ok();
  }
  sim_.hostAdvance(params_.host.launch_overhead_s);
  try {
    fn();
  } catch (const std::exception& e) {
    return Status(Code::KernelFailed, std::string("host function failed: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace cardsim::shim::simbackend
