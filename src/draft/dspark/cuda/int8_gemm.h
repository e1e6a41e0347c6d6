// The CUDA drafter's int8 weights (--drafter-bits 8): per-output-row scales, codes quantized on the device at load,
// and a few-row GEMM that streams the codes once and widens them to bf16 in registers for the tensor cores.
//
// Quantization is the CPU drafter's rule (compute::quantize_row_int8): scale = max |w| / 127 over the row, code =
// nearbyint(w / scale) clamped to [-127, 127] (0 where the row is all zero). The device stores code + 128 as a byte
// (the fp32 magic-number widening below needs it biased): every code is an integer of at most 8 significant bits, so
// bf16 holds it exactly and the tensor cores' products code x bf16(x) are exact in fp32.
//
// int8_gemm: y [rows, n] = (x [rows, k] codes^T) * scale[col], fp32 accumulate, then the epilogue (bf16, fp32 or
// SwiGLU of a stacked [2F, k] gate/up: y [rows, F] = swiglu(bf16(gate), bf16(up)), the bits of the bf16 GEMM output
// then swiglu_stacked). The summation order is the kernel's own (fixed for a configuration, so a run repeats its
// bits; not batch invariant: drafts change speed, never tokens).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/status.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

// Codes of a [rows, cols] matrix: biased bytes (code + 128) row-major, and one fp32 scale a row.
struct Int8Weights {
  const uint8_t* codes = nullptr;  // [rows, cols]
  const float* scales = nullptr;   // [rows]
  int64_t rows = 0;
  int64_t cols = 0;
};

// codes / scales of w [rows, cols] bf16 (device), the CPU's rule above; one CTA a row. cols % 16 == 0.
Status quantize_rows_int8(const bf16_t* w, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                          cudaStream_t stream);

enum class Int8Epilogue { Bf16, F32, Swiglu };

// How a launch is laid out (automatic when zero): m_tiles 16-row W tiles a warp (1, 2 or 4; the CTA's W rows are
// 16 x m_tiles), warps a CTA splitting K in pieces of 128 (64 at 4 tiles) (4, 8 or 16; fewer where the CTA's
// partials would pass 48 KB of shared memory: warps x 8 x-row tiles x 16 m_tiles floats).
struct Int8GemmShape {
  int m_tiles = 0;
  int warps = 0;
  bool x_l1 = false;  // x loads cached in L1 too: a CTA's x again for each of its column tiles (set_int8_x_l1)
  // K split over k_slices CTAs a column tile (> 1: the scratch below): each CTA's sums go to slice_sums, and the
  // tile's last CTA (a ticket) adds the slices in slice order and runs the epilogue (fixed order: the same bits every
  // run). Scratch: slice_sums [k_slices x tiles x 8 x-tiles x 16 m_tiles] floats (int8_gemm_slice_floats), tickets
  // [tiles] zero (the last CTA puts its ticket back to zero). Two launches in flight must not share them.
  int k_slices = 0;
  float* slice_sums = nullptr;
  unsigned int* tickets = nullptr;
  bool planted_drop_slice = false;  // tests only: the fold leaves slice 0 out
};

struct Int8Gemm {
  const bf16_t* x = nullptr;  // [rows, k] (leading dimension k)
  int rows = 0;
  Int8Weights w;              // [n, k]; SwiGLU: [2F, k], gate rows then up rows
  void* y = nullptr;          // [rows, ldy] bf16 or fp32
  int64_t ldy = 0;
  Int8Epilogue epilogue = Int8Epilogue::Bf16;
  Int8GemmShape shape;        // pins for the bench and tests
  bool planted_scale = false;  // tests only: every output takes its neighbour column's scale
};

// Up to 32 rows (x tiles of 8, 16 or 32); K a multiple of 16.
inline constexpr int kInt8GemmMaxRows = 32;
inline bool int8_gemm_supported(int64_t rows, int64_t k) {
  return rows >= 1 && rows <= kInt8GemmMaxRows && k % 16 == 0 && k > 0;
}
// The shape a launch takes when `args.shape` leaves it automatic.
Int8GemmShape int8_gemm_shape(const Int8Gemm& args);
// Column tiles of a launch of `shape` (the tickets a split launch needs) and its slice_sums floats; `shape` as
// int8_gemm_shape resolves it (four W tiles become two above 16 rows: twice the tiles).
int64_t int8_gemm_tiles(const Int8Gemm& args, const Int8GemmShape& shape);
int64_t int8_gemm_slice_floats(const Int8Gemm& args, const Int8GemmShape& shape);
// `programmatic`: launched to overlap the previous kernel's tail (its code loads go first; x is read after the wait).
Status int8_gemm(const Int8Gemm& args, bool programmatic, cudaStream_t stream);

}  // namespace ls::dspark::cuda
