// The host side of simulated time: every host thread's virtual clock, the clock shared
// while one thread works on another's behalf, and measured host time (CARDSIM_HOST_TIME).
// Internal to the simulator: Simulator's host-clock methods are defined over it.
#pragma once

#include "device_models/Command.h"

namespace cardsim::sim::hostclock {

using model::TimePs;

// The calling thread's clock (the shared one while a share is active).
TimePs now();
// Adds `d` to the calling thread's clock; returns the new time.
TimePs advance(TimePs d);
// Moves the calling thread's clock to at least `t`; returns the new time.
TimePs raise(TimePs t);
// Measured host time since the thread's previous return, times the factor (0 when off).
TimePs measuredSinceLastReturn();
// A call that blocked returns now: its blocked time is not host work.
void noteReturn();
double measuredFactor();
bool started();
void shareBegin();
void shareEnd();
// Reads CARDSIM_HOST_TIME. Throws ConfigError on a value that is not a mode.
void configureFromEnvironment();

}  // namespace cardsim::sim::hostclock
