// What every device kernel needs: the shim stream behind the current torch stream, CPU
// views of device memory (device memory is host-addressable), and a launch that runs the
// functional body on this thread and hands the cost descriptor to the timing model.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include <functional>
#include <vector>

#include "cardsim/shim.h"

namespace cardsim::kernels {

// Throws the torch error matching a failed shim Status (OutOfMemory ->
// torch.OutOfMemoryError, InvalidDevice/InvalidValue -> ValueError-like c10 errors).
void throwIfFailed(const shim::Status& s, const char* what);

// The shim stream behind the current c10 stream of `device` (nullptr: the default stream).
shim::Stream currentStream(c10::DeviceIndex device);

// A CPU tensor over the same bytes as the device tensor `t` (same sizes, strides,
// offset, conj/neg bits). It does not own the memory; a resize re-homes it in CPU memory.
at::Tensor cpuAlias(const at::Tensor& t);
// A tensor of dispatch key `key` over `storage` with the dtype, sizes, strides and offset
// of `like` (the building block of host views, device views and meta twins).
at::Tensor tensorOver(const c10::Storage& storage, c10::DispatchKey key, const at::Tensor& like);

// The CPU storage viewing a device tensor's storage; views made over one such storage are
// seen by ATen as aliases of each other (its overlap checks then work as on the CPU).
c10::Storage cpuAliasStorage(const at::Tensor& t);
at::Tensor cpuAliasOver(const c10::Storage& host_storage, const at::Tensor& t);

// The model's data type for a tensor's element type (integers and bool are timed as
// fp32 vector work; fp64 on a card without fp64 units is timed as emulated fp32).
shim::DataType costDtype(at::ScalarType t, c10::DeviceIndex device);
// Multiplier on flops for `costDtype` substitutions (fp64 emulated on fp32: 4).
double flopScale(at::ScalarType t, c10::DeviceIndex device);

bool isCapturing(shim::Stream stream);

// torch.cuda.set_sync_debug_mode's counterpart: 0 default, 1 warn, 2 error whenever an
// operator makes the host wait for the card (a blocking copy, .item(), nonzero's count).
void setSyncDebugMode(int mode);
int syncDebugMode();
// Warns or raises as the mode says; `what` names the operation.
void onHostSync(const char* what);

// CARDSIM_EXECUTION=timing: kernels are timed but do no work and touch no device memory
// (read once from the runtime; it cannot change within a process).
bool timingMode();

// Reads of device data on the host in timing mode (they give zeros, so a program's control
// flow may differ from a full run there): counted per calling site. The site comes from
// `site_fn` (the Python layer installs one that names the user's file and line).
void setHostReadSiteFn(std::string (*site_fn)());
void noteHostRead(double bytes);
struct HostReadSite {
  std::string site;
  uint64_t count = 0;
  double bytes = 0;
};
std::vector<HostReadSite> hostReads();   // in first-seen order

// Gives a device storage `nbytes` of new device memory, the old bytes copied on the card
// (tensor.resize_ and storage.resize_ both come here).
void resizeStorage(const c10::Storage& storage, size_t nbytes);

// A kernel's host execution: inside, the async checker's device-memory guard (shim
// checkGuardDeviceMemory) lets the host views of device memory be touched, and the CPU
// operators that emulate the kernel are not recorded by profilers (the device operator
// that launched them is, with the device time).
class HostWindow {
 public:
  HostWindow() : on_(shim::checkEnabled()) {
    if (on_) shim::checkHostWindowOpen();
    // Switching RecordFunction off and on rebuilds the thread's callback tables (about
    // 3,600 instructions a kernel, a seventh of a small op's cost): only when a profiler or
    // another observer has callbacks to skip.
    if (at::hasCallbacks() && at::isRecordFunctionEnabled()) {
      at::enableRecordFunction(false);
      reenable_ = true;
    }
  }
  ~HostWindow() {
    if (reenable_) at::enableRecordFunction(true);
    if (on_) shim::checkHostWindowClose();
  }
  HostWindow(const HostWindow&) = delete;
  HostWindow& operator=(const HostWindow&) = delete;

 private:
  bool on_;
  bool reenable_ = false;
};

// Runs `work` now (exceptions propagate unchanged) and queues `cost` on the current
// stream of `device`. While that stream captures a graph, `work` is recorded instead, and
// the graph holds the memory of the `touched` device tensors (as a graph's private pool
// would: freed tensors' blocks are not reused while a replay may still write them).
// `touched` is by pointer: the common, uncaptured launch then costs no reference counting.
void launch(c10::DeviceIndex device, const char* name, const shim::KernelCost& cost,
            const std::function<void()>& work, c10::ArrayRef<const at::Tensor*> touched = {});

}  // namespace cardsim::kernels
