// What the native backend needs from a vendor runtime, in neutral terms: one
// implementation per vendor (CnrtRuntime.cpp for Cambricon's CNRT, SupaRuntime.cpp for
// Biren's SUPA runtime), each calling the vendor's functions with the vendor's own argument
// order and turning every vendor error into a Status that names the call, the vendor's
// error name and code, and the vendor's message. Queues and notifiers are the vendor's
// handles, opaque here; a null queue is the current device's default queue.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "cardsim/shim.h"

namespace cardsim::shim::native {

using VendorQueue = void*;
using VendorNotifier = void*;

class IVendorRuntime {
 public:
  virtual ~IVendorRuntime() = default;
  virtual const char* runtimeName() const = 0;   // "CNRT", "SUPA runtime"
  virtual std::string libraryPath() const = 0;
  virtual std::string version() const = 0;       // "6.2.1", or "" if unknown

  virtual Status deviceCount(int* count) = 0;
  virtual Status setDevice(int device) = 0;
  virtual Status getDevice(int* device) = 0;
  virtual Status synchronizeDevice() = 0;
  virtual Status canAccessPeer(int* can, int device, int peer) = 0;
  // Fills what the runtime reports (name, memory, clusters/cores, compute capability);
  // leaves the other fields as they are.
  virtual Status deviceProperties(DeviceProperties* props, int device) = 0;

  virtual Status malloc(void** ptr, std::size_t bytes) = 0;
  virtual Status free(void* ptr) = 0;
  virtual Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) = 0;
  virtual Status hostMalloc(void** ptr, std::size_t bytes) = 0;
  virtual Status hostFree(void* ptr) = 0;
  // NotSupported if the runtime has no registration calls.
  virtual Status hostRegister(void* ptr, std::size_t bytes) = 0;
  virtual Status hostUnregister(void* ptr) = 0;

  virtual Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind) = 0;
  virtual Status memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                             VendorQueue queue) = 0;
  virtual Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                 std::size_t bytes, VendorQueue queue) = 0;
  virtual Status memset(void* ptr, int value, std::size_t bytes) = 0;
  virtual Status memsetAsync(void* ptr, int value, std::size_t bytes, VendorQueue queue) = 0;

  virtual Status queueCreate(VendorQueue* queue, int priority) = 0;
  virtual Status queueDestroy(VendorQueue queue) = 0;
  virtual Status queueSynchronize(VendorQueue queue) = 0;
  virtual Status queueQuery(VendorQueue queue) = 0;      // NotReady while work is pending
  virtual Status queuePriority(VendorQueue queue, int* priority) = 0;
  virtual Status priorityRange(int* least, int* greatest) = 0;
  virtual Status queueWaitNotifier(VendorQueue queue, VendorNotifier notifier) = 0;

  // flags: shim's kEvent* bits.
  virtual Status notifierCreate(VendorNotifier* notifier, unsigned flags) = 0;
  virtual Status notifierDestroy(VendorNotifier notifier) = 0;
  virtual Status notifierRecord(VendorNotifier notifier, VendorQueue queue) = 0;
  virtual Status notifierQuery(VendorNotifier notifier) = 0;   // NotReady while pending
  virtual Status notifierSynchronize(VendorNotifier notifier) = 0;
  virtual Status notifierElapsedMs(float* ms, VendorNotifier start, VendorNotifier end) = 0;
};

// The vendor's collective library (CNCL, BCCL), in the same neutral terms. Communicators
// are the vendor's handles.
using VendorComm = void*;

class IVendorCollectives {
 public:
  virtual ~IVendorCollectives() = default;
  virtual std::string libraryPath() const = 0;
  virtual Status uniqueId(std::string* id) = 0;
  virtual Status initRank(VendorComm* comm, int nranks, const std::string& id, int rank, int device) = 0;
  virtual Status destroy(VendorComm comm) = 0;
  virtual Status launch(const CommCall& call, VendorComm comm, VendorQueue queue) = 0;
  virtual Status group(bool start) = 0;
};

std::unique_ptr<IVendorCollectives> openCncl(Status* why);
std::unique_ptr<IVendorCollectives> openBccl(Status* why);

// Each opens its vendor's library from the standard places (or the one the environment
// names) and resolves every symbol; nullptr with `why` naming the library and, when one is
// missing, the symbol.
std::unique_ptr<IVendorRuntime> openCnrt(Status* why);
std::unique_ptr<IVendorRuntime> openSupaRuntime(Status* why);

// "cnrtMalloc failed: cnrtErrorNoMem (100100): <the vendor's message>" as a Status whose
// code follows the vendor's error class.
Status vendorError(Code code, const char* call, const char* error_name, long error_code,
                   const char* message);

}  // namespace cardsim::shim::native
