// Helpers for the op tests: seeded random data, NaN-poisoned outputs, bitwise comparison, both numeric modes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "base/bf16.h"
#include "base/hash.h"
#include "compute/ops.h"

namespace ls::compute::testing {

// Uniform values in (-scale, scale) from splitmix64(seed + i).
inline std::vector<float> random_values(size_t count, uint64_t seed, float scale = 1.0f) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<float>((2.0 * uniform_open01(splitmix64(seed * 0x100000001b3ull + i)) - 1.0) * scale);
  return values;
}

// The values as the mode stores activations (bf16-exact in Bf16 mode).
inline std::vector<float> stored(std::vector<float> values, NumericMode mode) {
  if (mode == NumericMode::Bf16)
    for (float& value : values) value = round_to_bf16(value);
  return values;
}

inline std::vector<float> poisoned(size_t count) {
  return std::vector<float>(count, std::numeric_limits<float>::quiet_NaN());
}

inline bool bitwise_equal(const float* a, const float* b, size_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

inline bool all_finite(const std::vector<float>& values) {
  for (float value : values)
    if (!std::isfinite(value)) return false;
  return true;
}

// A weight matrix [rows, cols] of random values, stored fp32 or bf16 as the mode loads weights.
inline OwnedMatrix random_matrix(int64_t rows, int64_t cols, uint64_t seed, NumericMode mode, float scale = 0.5f) {
  OwnedMatrix matrix;
  matrix.rows = rows;
  matrix.cols = cols;
  std::vector<float> values = random_values(rows * cols, seed, scale);
  if (mode == NumericMode::Bf16) {
    for (float value : values) matrix.b16.push_back(float_to_bf16(value));
  } else {
    matrix.f32 = values;
  }
  return matrix;
}

inline float matrix_at(const OwnedMatrix& matrix, int64_t index) {
  return matrix.b16.empty() ? matrix.f32[index] : bf16_to_float(matrix.b16[index]);
}

// y [rows, w.rows] = x @ W^T (+ bias) in double: the reference every GEMM kernel is checked against.
inline std::vector<double> reference_matmul(const std::vector<float>& x, int64_t rows, const OwnedMatrix& w) {
  std::vector<double> y(rows * w.rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < w.rows; ++n) {
      double sum = w.bias.empty() ? 0.0 : w.bias[n];
      for (int64_t k = 0; k < w.cols; ++k) sum += static_cast<double>(x[r * w.cols + k]) * matrix_at(w, n * w.cols + k);
      y[r * w.rows + n] = sum;
    }
  return y;
}

// Maximum |a - b| / max(|b|, floor) over the arrays.
inline double max_relative_error(const std::vector<float>& a, const std::vector<double>& b, double floor = 1e-3) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
  return worst;
}

constexpr NumericMode kModes[] = {NumericMode::Fp32, NumericMode::Bf16};

inline const char* mode_name(NumericMode mode) { return mode == NumericMode::Bf16 ? "bf16" : "fp32"; }

}  // namespace ls::compute::testing

namespace ls::compute::testing {

// Runs `op(in, rows, out)` on every row alone, then on windows of widths 1..16 at several offsets and on one
// 64-row batch; returns how many rows differed bitwise from their one-row result (0 = batch invariant).
template <typename Op>
int rows_differing_from_one_row_runs(const std::vector<float>& input, int64_t in_width, int64_t out_width, Op op) {
  const int64_t total = static_cast<int64_t>(input.size()) / in_width;
  std::vector<float> alone = poisoned(total * out_width);
  for (int64_t row = 0; row < total; ++row) op(input.data() + row * in_width, 1, alone.data() + row * out_width);
  int differing = 0;
  auto compare = [&](int64_t begin, int64_t rows) {
    std::vector<float> out = poisoned(rows * out_width);
    op(input.data() + begin * in_width, rows, out.data());
    for (int64_t row = 0; row < rows; ++row)
      if (!bitwise_equal(out.data() + row * out_width, alone.data() + (begin + row) * out_width, out_width))
        ++differing;
  };
  for (int64_t width = 1; width <= 16 && width <= total; ++width)
    for (int64_t begin : {int64_t{0}, int64_t{3}, total - width})
      if (begin + width <= total) compare(begin, width);
  compare(0, total);
  return differing;
}

}  // namespace ls::compute::testing
