// The CUDA target's RMSNorm arithmetic on the host in both sum-of-squares orders (row_norm.cuh: one warp walking the
// row, and the sliced order of set_norm_sliced), and rows over a wide dynamic range; for cuda_fused_ops_test.cpp and
// cuda_norm_sliced_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/bf16.h"
#include "base/hash.h"

namespace ls::cuda::norm_testing {

// Values over a wide dynamic range (2^-30 .. 2^30), so that the double sum of squares rounds.
inline std::vector<bf16> spread_bf16(size_t count, uint64_t seed) {
  std::vector<bf16> out(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = splitmix64(seed * 0x9e3779b97f4a7c15ull + i);
    const double magnitude = std::ldexp(0.5 + uniform_open01(bits), static_cast<int>(bits % 61) - 30);
    out[i] = float_to_bf16(static_cast<float>((bits >> 63) ? -magnitude : magnitude));
  }
  return out;
}

// The xor tree over 32 lane sums (offsets 16, 8, 4, 2, 1): lane 0's sum.
inline double tree_sum(double (&lanes)[32]) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    double next[32];
    for (int lane = 0; lane < 32; ++lane) next[lane] = lanes[lane] + lanes[lane ^ offset];
    std::memcpy(lanes, next, sizeof(lanes));
  }
  return lanes[0];
}

// The sum of squares in double: one warp (lane l chains elements l, l + 32, ..), or sliced (rows wider than 256:
// 256-element slices, lane l chaining elements 256 s + 8 l .. + 7, the tree per slice, the slice sums in order).
inline double sum_of_squares(const bf16* x, int width, bool sliced) {
  double lanes[32];
  if (!sliced || width <= 256) {
    for (int lane = 0; lane < 32; ++lane) {
      lanes[lane] = 0;
      for (int i = lane; i < width; i += 32) {
        const double v = bf16_to_float(x[i]);
        lanes[lane] += v * v;
      }
    }
    return tree_sum(lanes);
  }
  double total = 0;
  for (int first = 0; first < width; first += 256) {
    for (int lane = 0; lane < 32; ++lane) {
      lanes[lane] = 0;
      for (int i = first + 8 * lane; i < first + 8 * lane + 8 && i < width; ++i) {
        const double v = bf16_to_float(x[i]);
        lanes[lane] += v * v;
      }
    }
    total += tree_sum(lanes);
  }
  return total;
}

// The defined RMSNorm of one row: the sum of squares in the order asked, then the CPU Bf16 mode's two roundings.
inline std::vector<bf16> rms_norm_reference(const bf16* x, int width, const bf16* weight, float eps,
                                            bool sliced = false) {
  const float mean = static_cast<float>(sum_of_squares(x, width, sliced) / static_cast<double>(width));
  const float inverse_rms = 1.0f / std::sqrt(mean + eps);
  std::vector<bf16> out(width);
  for (int i = 0; i < width; ++i) {
    const float normed = round_to_bf16(bf16_to_float(x[i]) * inverse_rms);
    out[i] = float_to_bf16(bf16_to_float(weight[i]) * normed);
  }
  return out;
}

}  // namespace ls::cuda::norm_testing
