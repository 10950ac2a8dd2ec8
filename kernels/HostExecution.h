// Boxed execution of ATen operators on device tensors: the CPU kernel runs on CPU tensors
// that alias the device memory, results that are new memory move to the device, and the
// operator's cost descriptor goes to the timing model. Operators with a cost model of
// their own are registered by name; every other operator reaches the fallback, which
// charges a generic cost and is listed by fallbackOperators().
#pragma once

#include <string>
#include <vector>

namespace cardsim::kernels {

// Operators that ran through the generic fallback so far in this process, sorted.
std::vector<std::string> fallbackOperators();

// Operators registered with a cost model of their own.
std::vector<std::string> costedOperators();

}  // namespace cardsim::kernels
