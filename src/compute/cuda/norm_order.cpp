// The norm order switch (norm_order.h).
#include "compute/cuda/norm_order.h"

#include <atomic>
#include <cstdlib>
#include <string>

namespace ls::cuda {
namespace {

bool sliced_from_env() {
  const char* value = std::getenv("LS_NORM_SLICED");
  return value != nullptr && value[0] != 0 && std::string(value) != "0";
}
std::atomic<bool> sliced{sliced_from_env()};
std::atomic<bool> sliced_fault{false};

}  // namespace

void set_norm_sliced(bool on) { sliced.store(on, std::memory_order_relaxed); }
bool norm_sliced() { return sliced.load(std::memory_order_relaxed); }
void set_norm_sliced_fault_for_test(bool on) { sliced_fault.store(on, std::memory_order_relaxed); }
bool norm_sliced_fault_for_test() { return sliced_fault.load(std::memory_order_relaxed); }

}  // namespace ls::cuda
