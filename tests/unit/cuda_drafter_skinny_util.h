// The skinny GEMM's fp64 reference and fp32 error bound (cuda_drafter_kernels_test).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/bf16.h"

namespace ls::dspark::testing {

// y = x W^T in fp64 from the bf16 values, and the bound of fp32 accumulation's error.
struct SkinnyReference {
  std::vector<double> sums;   // [rows, n] fp64 of the bf16 values
  std::vector<double> bound;  // fp32 accumulation's error bound (k roundings of at most 2^-24 of the running |sum|)
};

inline SkinnyReference skinny_reference(const std::vector<bf16>& x, const std::vector<bf16>& w, int rows, int64_t n,
                                        int64_t k) {
  const size_t cells = static_cast<size_t>(rows * n);
  SkinnyReference reference{std::vector<double>(cells), std::vector<double>(cells)};
  for (int r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, magnitude = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double product = static_cast<double>(bf16_to_float(x[r * k + j])) * bf16_to_float(w[c * k + j]);
        sum += product;
        magnitude += std::fabs(product);
      }
      reference.sums[r * n + c] = sum;
      reference.bound[r * n + c] = magnitude * k * 0x1p-24 + 1e-30;
    }
  }
  return reference;
}

}  // namespace ls::dspark::testing
