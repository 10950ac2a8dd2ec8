// Demo: two streams on one simulated card, joined by events. Copies inputs in, runs a
// GEMM and elementwise kernels, copies results back, checks them against the CPU and
// prints the simulated timeline.
//
//   cardsim_stream_timeline [--preset NAME] [--set key.path=value]...
#include <cardsim/shim.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace shim = cardsim::shim;

namespace {

bool check(const shim::Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "error: %s: %s\n", what, s.toString().c_str());
  return s.ok();
}

#define CHECK(call)                    \
  do {                                 \
    if (!check((call), #call)) return 1; \
  } while (0)

double us(uint64_t ps) { return static_cast<double>(ps) * 1e-6; }

}  // namespace

int main(int argc, char** argv) {
  shim::InitOptions init;
  init.preset = "mlu370-x8";
  init.devices = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) {
      init.preset = argv[++i];
    } else if (a == "--set" && i + 1 < argc) {
      init.overrides.push_back(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--preset NAME] [--set key.path=value]...\n", argv[0]);
      return 2;
    }
  }
  CHECK(shim::initialize(init));
  CHECK(shim::setActivityRecording(true));

  shim::DeviceProperties props;
  CHECK(shim::getDeviceProperties(&props, 0));
  std::printf("device 0: %s (%s), preset %s\n", props.name.c_str(), props.vendor.c_str(),
              props.preset.c_str());
  std::printf("  %u clusters at %.2f GHz, fp32 %.1f TFLOPS, fp16 %.1f TFLOPS\n", props.cluster_count,
              props.clock_hz / 1e9, props.peak_fp32_flops / 1e12, props.peak_fp16_flops / 1e12);
  std::printf("  %.2f GiB %s at %.1f GB/s, PCIe Gen%u x%u (%.1f GB/s per direction)\n\n",
              props.total_memory_bytes / 1073741824.0, props.memory_technology.c_str(),
              props.memory_bandwidth_bytes_per_s / 1e9, props.pcie_generation, props.pcie_lanes,
              props.host_link_bandwidth_bytes_per_s / 1e9);

  const int n = 512;                 // GEMM: C[n,n] = A[n,n] * B[n,n]
  const size_t m = 4u << 20;         // elementwise vectors of 4 Mi floats
  const size_t mat_bytes = sizeof(float) * n * n, vec_bytes = sizeof(float) * m;

  float *hA, *hB, *hX, *hC, *hY;
  CHECK(shim::hostMalloc(reinterpret_cast<void**>(&hA), mat_bytes));
  CHECK(shim::hostMalloc(reinterpret_cast<void**>(&hB), mat_bytes));
  CHECK(shim::hostMalloc(reinterpret_cast<void**>(&hX), vec_bytes));
  CHECK(shim::hostMalloc(reinterpret_cast<void**>(&hC), mat_bytes));
  CHECK(shim::hostMalloc(reinterpret_cast<void**>(&hY), vec_bytes));
  for (int i = 0; i < n * n; ++i) {
    hA[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
    hB[i] = static_cast<float>((i * 5) % 11) / 11.0f - 0.5f;
  }
  for (size_t i = 0; i < m; ++i) hX[i] = static_cast<float>(i % 1000) / 1000.0f;

  float *dA, *dB, *dC, *dX, *dY;
  CHECK(shim::malloc(reinterpret_cast<void**>(&dA), mat_bytes));
  CHECK(shim::malloc(reinterpret_cast<void**>(&dB), mat_bytes));
  CHECK(shim::malloc(reinterpret_cast<void**>(&dC), mat_bytes));
  CHECK(shim::malloc(reinterpret_cast<void**>(&dX), vec_bytes));
  CHECK(shim::malloc(reinterpret_cast<void**>(&dY), vec_bytes));

  shim::Stream compute, side;
  CHECK(shim::streamCreate(&compute));
  CHECK(shim::streamCreate(&side));
  shim::Event start, side_done, end;
  CHECK(shim::eventCreate(&start));
  CHECK(shim::eventCreate(&side_done));
  CHECK(shim::eventCreate(&end));
  std::map<uint32_t, std::string> stream_names;
  uint32_t id;
  CHECK(shim::streamGetId(compute, &id));
  stream_names[id] = "compute";
  CHECK(shim::streamGetId(side, &id));
  stream_names[id] = "side";

  CHECK(shim::eventRecord(start, compute));
  CHECK(shim::streamWaitEvent(side, start));
  CHECK(shim::memcpyAsync(dA, hA, mat_bytes, shim::MemcpyKind::HostToDevice, compute));
  CHECK(shim::memcpyAsync(dB, hB, mat_bytes, shim::MemcpyKind::HostToDevice, compute));
  CHECK(shim::memcpyAsync(dX, hX, vec_bytes, shim::MemcpyKind::HostToDevice, side));

  shim::KernelCost gemm;
  gemm.kernel_class = shim::KernelClass::Gemm;
  gemm.flops = 2.0 * n * n * n;
  gemm.bytes_read = 2.0 * mat_bytes;
  gemm.bytes_written = mat_bytes;
  CHECK(shim::launchKernel(compute, "gemm 512x512x512", gemm, [&] {
    std::fill(dC, dC + n * n, 0.0f);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) {
        const float a = dA[i * n + k];
        for (int j = 0; j < n; ++j) dC[i * n + j] += a * dB[k * n + j];
      }
  }));
  shim::KernelCost ew;
  ew.kernel_class = shim::KernelClass::Elementwise;
  ew.flops = 2.0 * m;
  ew.bytes_read = vec_bytes;
  ew.bytes_written = vec_bytes;
  CHECK(shim::launchKernel(side, "axpb y=2x+1", ew, [&] {
    for (size_t i = 0; i < m; ++i) dY[i] = 2.0f * dX[i] + 1.0f;
  }));
  shim::KernelCost relu = ew;
  relu.flops = static_cast<double>(n) * n;
  relu.bytes_read = relu.bytes_written = mat_bytes;
  CHECK(shim::launchKernel(compute, "relu", relu, [&] {
    for (int i = 0; i < n * n; ++i) dC[i] = std::max(dC[i], 0.0f);
  }));
  CHECK(shim::eventRecord(side_done, side));
  CHECK(shim::streamWaitEvent(compute, side_done));
  shim::KernelCost scale = relu;
  CHECK(shim::launchKernel(compute, "scale C*=y[0]", scale, [&] {
    const float s = dY[0];
    for (int i = 0; i < n * n; ++i) dC[i] *= s;
  }));
  CHECK(shim::memcpyAsync(hC, dC, mat_bytes, shim::MemcpyKind::DeviceToHost, compute));
  CHECK(shim::memcpyAsync(hY, dY, vec_bytes, shim::MemcpyKind::DeviceToHost, side));
  CHECK(shim::eventRecord(end, compute));
  CHECK(shim::deviceSynchronize());

  // Check against a CPU reference.
  double max_err = 0;
  for (int i = 0; i < n; i += 37)
    for (int j = 0; j < n; j += 41) {
      double ref = 0;
      for (int k = 0; k < n; ++k) ref += static_cast<double>(hA[i * n + k]) * hB[k * n + j];
      ref = std::max(ref, 0.0) * (2.0 * hX[0] + 1.0);
      max_err = std::max(max_err, std::fabs(ref - hC[i * n + j]));
    }
  for (size_t i = 0; i < m; i += 4099) max_err = std::max(max_err, std::fabs(hY[i] - (2.0 * hX[i] + 1.0)));
  std::printf("results vs CPU reference: max abs error %.2e %s\n\n", max_err,
              max_err < 1e-3 ? "(ok)" : "(MISMATCH)");

  std::vector<shim::ActivityRecord> acts;
  CHECK(shim::drainActivities(&acts));
  std::sort(acts.begin(), acts.end(), [](const auto& a, const auto& b) {
    return a.stream_id != b.stream_id ? a.stream_id < b.stream_id : a.start_ps < b.start_ps;
  });
  std::printf("simulated timeline (us)\n");
  std::printf("  %-8s %10s %10s %10s  %s\n", "stream", "start", "end", "duration", "what");
  std::map<uint32_t, uint64_t> busy;
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& a : acts) {
    if (a.kind == shim::ActivityRecord::Kind::EventRecord ||
        a.kind == shim::ActivityRecord::Kind::EventWait)
      continue;
    std::printf("  %-8s %10.2f %10.2f %10.2f  %s\n", stream_names[a.stream_id].c_str(), us(a.start_ps),
                us(a.end_ps), us(a.end_ps - a.start_ps), a.name.c_str());
    busy[a.stream_id] += a.end_ps - a.start_ps;
    first = std::min(first, a.start_ps);
    last = std::max(last, a.end_ps);
  }
  float ms = 0;
  CHECK(shim::eventElapsedTime(&ms, start, end));
  uint64_t host_ps = 0;
  CHECK(shim::hostTimePs(&host_ps));
  uint64_t busy_sum = 0;
  std::printf("\ntotals\n");
  for (const auto& [sid, b] : busy) {
    std::printf("  %-8s busy %10.2f us\n", stream_names[sid].c_str(), us(b));
    busy_sum += b;
  }
  std::printf("  device span       %10.2f us (first start to last end)\n", us(last - first));
  std::printf("  overlap saved     %10.2f us (sum of stream busy time minus span)\n",
              us(busy_sum) - us(last - first));
  std::printf("  events start->end %10.2f us\n", ms * 1000.0);
  std::printf("  host clock        %10.2f us\n", us(host_ps));
  return max_err < 1e-3 ? 0 : 1;
}
