// The process-wide state behind the torch device: the personality (mlu or supa), the
// visible devices (torch index -> shim device), streams as torch sees them, and the
// conversions between the two numberings.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <string>
#include <vector>

#include "cardsim/shim.h"

namespace cardsim::accel {

struct Personality {
  std::string device;          // "mlu"
  std::string visible_env;     // "MLU_VISIBLE_DEVICES"
  std::string default_preset;  // "mlu370-x8"
};

// Set once, by the Python package, before anything touches a device.
void activate(const Personality& p);
const Personality& personality();

// Whether the runtime has started (the first device query starts it).
bool isReady();
// Starts it with the personality's configuration (idempotent). Every entry point that
// reaches the shim must come through here first: the shim would otherwise start itself
// with default options, and the personality's start would then be refused.
void start();

// Visible devices, read lazily from the personality's variable on first use.
int deviceCount();
int toShim(c10::DeviceIndex index);            // checks the index; throws naming it
c10::DeviceIndex fromShim(int shim_device);    // -1 when not visible
void checkIndex(c10::DeviceIndex index);

// This thread's current torch device (mirrors the shim's current device).
c10::DeviceIndex currentDevice();
void setCurrentDevice(c10::DeviceIndex index);

// Streams: a torch StreamId names a shim stream; 0 is each device's default stream.
c10::Stream currentStream(c10::DeviceIndex index);
c10::Stream defaultStream(c10::DeviceIndex index);
c10::Stream newStream(c10::DeviceIndex index, int priority);
c10::Stream poolStream(c10::DeviceIndex index, bool high_priority);
void setCurrentStream(const c10::Stream& s);
shim::Stream shimStream(const c10::Stream& s);
int streamPriority(const c10::Stream& s);
// Torch priorities: 0 is the default (lowest); negative numbers are higher, down to this.
int greatestPriority();

}  // namespace cardsim::accel
