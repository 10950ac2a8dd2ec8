// The raw speed of this machine's SystemC scheduler: thread wake-ups per second with no
// model around them. Benchmarks print cardsim's throughput next to it, measured in the
// same run, so the figure says how close the model comes to SystemC itself.
#pragma once

namespace cardsim::sim {

// Runs a two-process ping-pong for about `seconds` of wall time in a child process (the
// caller's SystemC context is untouched) and returns wake-ups per second, or < 0 on error.
double measureSchedulerWakeupsPerSecond(double seconds);

}  // namespace cardsim::sim
