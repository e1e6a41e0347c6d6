// Ops only the DSpark drafter needs: RoPE with fp32 rotation (interleaved or NeoX) and int8 per-row GEMM.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/ops.h"

namespace ls::compute {

// Rotates x [rows, heads, head_dim] in place at absolute positions[row]: cos/sin of position * inv_freq in fp32,
// the rotation in fp32 on the stored values, one rounding of the result (ctx.store). Interleaved pairs (2i, 2i+1)
// unless `neox` (pairs (i, i + head_dim/2)).
void rope_rotate(const OpContext& ctx, float* x, int64_t rows, int heads, const int64_t* positions,
                 const RopeTable& table, bool neox);

// An int8 weight matrix W ~ scales[row] * codes[row, :] (symmetric per output row, fp32 scales).
struct Int8Matrix {
  const int8_t* codes = nullptr;  // [rows, cols]
  const float* scales = nullptr;  // [rows]
  int64_t rows = 0;
  int64_t cols = 0;
};

// Quantizes one row of weights: scale = max|w| / 127, code = round-half-even(w / scale) (0 codes for a zero row).
void quantize_row_int8(std::span<const float> weights, std::span<int8_t> codes, float& scale);

// y [rows, w.rows] = x [rows, w.cols] @ (scales * codes)^T: fp32 accumulation in one fixed 8-lane order over K for
// every row (the same order on the AVX2 and portable paths), then times the row scale, then ctx.store.
void matmul_int8(const OpContext& ctx, const float* x, int64_t rows, const Int8Matrix& w, float* y);

}  // namespace ls::compute
