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
  const int32_t* code_sums = nullptr;  // [rows] the sum of each row's codes (the w8a8 path; summed per call if null)
  const int8_t* panels = nullptr;      // pack_int8_panels(codes) (the w8a8 path; packed per call if null)
};

// Quantizes one row of weights: scale = max|w| / 127, code = round-half-even(w / scale) (0 codes for a zero row).
void quantize_row_int8(std::span<const float> weights, std::span<int8_t> codes, float& scale);

// y [rows, w.rows] = x [rows, w.cols] @ (scales * codes)^T. With AVX-512 VNNI: matmul_int8_vnni (int8 activations
// too; a matrix may then hold only its panels, codes null). Otherwise fp32 accumulation in one fixed 8-lane order over K for every row (the same order on the AVX2 and
// portable paths), then times the row scale, then ctx.store.
void matmul_int8(const OpContext& ctx, const float* x, int64_t rows, const Int8Matrix& w, float* y);

// The w8a8 form of matmul_int8 (vpdpbusd): each row of x is quantized on its own (scale s = max|x| / 127, code =
// round-half-even(x / s) clamped to +-127), the integer dot products are exact (so any order over K gives the same
// value), and y = store(float(dot) * s * w.scales[col]); a row with a non-finite value gives NaN. A row's result
// depends only on its own values. Returns false, doing nothing, without AVX-512 VNNI.
bool matmul_int8_vnni(const OpContext& ctx, const float* x, int64_t rows, const Int8Matrix& w, float* y);

// Whether matmul_int8_vnni runs one or two rows 8 panels (128 columns) a tile instead of 2, so more accumulator
// chains hide the dot's latency (the same bits): off by default until a batch's A/B; LS_CPU_INT8_WIDE=1 or the setter.
bool int8_wide_tiles();
void set_int8_wide_tiles(bool on);

// code_sums [w.rows] of a matrix's codes, for Int8Matrix::code_sums.
void sum_int8_codes(const int8_t* codes, int64_t rows, int64_t cols, int32_t* code_sums);

// The codes [rows, cols] as the w8a8 kernel reads them (Int8Matrix::panels): panels of 16 rows, each a run of
// ceil(cols / 4) 64-byte steps holding 4 consecutive codes of each of its 16 rows (zeros past the matrix).
std::vector<int8_t> pack_int8_panels(const int8_t* codes, int64_t rows, int64_t cols);

// The code of (row, col) of a [rows, cols] matrix held as pack_int8_panels lays it out.
int8_t int8_panel_code(const int8_t* panels, int64_t cols, int64_t row, int64_t col);

}  // namespace ls::compute
