// Fresh random inputs and a bitwise count shared by the CUDA drafter kernel tests.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "base/bf16.h"

namespace ls::dspark::testing {

// Fresh random bf16 values in [-scale, scale).
inline std::vector<bf16> random_values(std::mt19937& rng, size_t count, float scale) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<bf16> values(count);
  for (bf16& value : values) value = float_to_bf16(uniform(rng));
  return values;
}

inline std::vector<float> random_floats(std::mt19937& rng, size_t count, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(rng);
  return values;
}

inline int count_bitwise_equal(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  int equal = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) equal += a[i].bits == b[i].bits;
  return equal;
}

}  // namespace ls::dspark::testing
