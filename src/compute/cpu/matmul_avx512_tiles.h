// The AVX-512 GEMM's register tiles: weight layouts (row-major or packed panels), bf16 x bf16 (vdpbf16ps) and fp32
// FMA tiles of MR rows x NR columns, each (row, column) one 16-lane accumulator over K in order then the fixed lane
// tree, and the tile choosers over a block. Internal to the CPU GEMM files (matmul_avx512*.cpp).
// Register tiles must be fully unrolled (-O2 does not) so that the accumulators live in registers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "compute/cpu/simd_avx512.h"
#include "compute/ops.h"

#define LS_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

namespace ls::compute::avx512 {

using simd::reduce_lanes;
using simd::reduce_lanes8;

constexpr int kTileRows = 4;          // register tile: rows x columns of 16-lane accumulators
constexpr int kTileColumns = 6;
constexpr int kFewRowsColumns = 8;    // register tile width when fewer than kTileRows rows are left

// Where a column's weights sit: value (c, k) at column(c) + (k / 32) * step + k % 32. Row-major: column(c) = c * K,
// step 32. Packed panels (Matrix::packed): column(c) = panel c / 8 + (c % 8) * 32, step 8 * 32.
template <typename Weight>
struct WeightLayout {
  const Weight* base = nullptr;
  int64_t K = 0;
  bool packed = false;
  int64_t panel_values = 0;  // values per panel when packed: ceil(K / 32) * 32 * 8
  WeightLayout() = default;
  WeightLayout(const Weight* base_, int64_t K_, bool packed_)
      : base(base_), K(K_), packed(packed_),
        panel_values(packed_ ? (K_ + kPackedDepth - 1) / kPackedDepth * kPackedDepth * kPackedColumns : 0) {}
  const Weight* column(int64_t c) const {
    if (!packed) return base + c * K;
    return base + (c / kPackedColumns) * panel_values + (c % kPackedColumns) * kPackedDepth;
  }
  int64_t step() const { return packed ? kPackedColumns * kPackedDepth : kPackedDepth; }
};

// ---- bf16 x bf16 -> fp32: 32 values of K per step, lane i holds the pair (2i, 2i+1) of every step ----

template <int MR, int NR>
LS_TARGET_AVX512_BF16 void tile_bf16(const uint16_t* x, const WeightLayout<uint16_t>& layout, int64_t col, int64_t K,
                                     int64_t ldy, float* y) {
  const uint16_t* w[NR];
  #pragma GCC unroll 16
  for (int n = 0; n < NR; ++n) w[n] = layout.column(col + n);
  const int64_t step = layout.step();
  __m512 acc[MR][NR];
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
  int64_t k = 0, offset = 0;
  if (layout.packed && col % kPackedColumns + NR <= kPackedColumns) {
    // Every column of the tile in one panel: one pointer, the columns at fixed 64-byte displacements (fewer
    // instructions per step than NR pointers; the same loads and the same arithmetic).
    const uint16_t* panel = w[0];
    for (; k + 32 <= K; k += 32, offset += step) {
      __m512bh wv[NR];
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) wv[n] = (__m512bh)_mm512_loadu_si512(panel + offset + n * kPackedDepth);
      #pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
        #pragma GCC unroll 16
        for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
      }
    }
  }
  for (; k + 32 <= K; k += 32, offset += step) {
    __m512bh wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = (__m512bh)_mm512_loadu_si512(w[n] + offset);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
    }
  }
  if (k < K) {  // zero-filled tail: the same extra step for every row
    const __mmask32 mask = _cvtu32_mask32((1u << (K - k)) - 1u);
    __m512bh wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w[n] + offset);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
    }
  }
  if constexpr (NR == 8) {
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) _mm256_storeu_ps(y + m * ldy, reduce_lanes8(acc[m]));
  } else {
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) y[m * ldy + n] = reduce_lanes(acc[m][n]);
  }
}

// MR rows x one 8-column panel of a packed layout: the loads and arithmetic of tile_bf16<MR, 8> (so its bits), inlined
// into the panel loops below (no call and no column address computation per tile).
template <int MR, bool kHoldWeights>
LS_TARGET_AVX512_BF16 __attribute__((always_inline)) inline void panel_bf16(const uint16_t* x, const uint16_t* panel,
                                                                          int64_t K, int64_t step, __mmask32 tail,
                                                                          int64_t ldy, float* y) {
  __m512 acc[MR][8];
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) acc[m][n] = _mm512_setzero_ps();
  int64_t k = 0, offset = 0;
  for (; k + 32 <= K; k += 32, offset += step) {
    __m512bh wv[8];
    #pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) {
      wv[n] = (__m512bh)_mm512_loadu_si512(panel + offset + n * kPackedDepth);
      // Held in a register for every row: GCC otherwise reloads it per row in the panel loop at MR = 2 (1.8 -> 2.6
      // dot products per ns hot). Not in the verify loop, whose groups run faster as GCC schedules them (2.0 -> 2.9).
      if constexpr (kHoldWeights) asm("" : "+v"(wv[n]));
    }
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      #pragma GCC unroll 8
      for (int n = 0; n < 8; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
    }
  }
  if (k < K) {  // zero-filled tail, as tile_bf16's
    __m512bh wv[8];
    #pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) wv[n] = (__m512bh)_mm512_maskz_loadu_epi16(tail, panel + offset + n * kPackedDepth);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(tail, x + m * K + k);
      #pragma GCC unroll 8
      for (int n = 0; n < 8; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
    }
  }
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) _mm256_storeu_ps(y + m * ldy, reduce_lanes8(acc[m]));
}

// The lanes of a K-tail step (K % 32 values; none when K is a multiple of 32).
LS_TARGET_AVX512_BF16 inline __mmask32 tail_mask(int64_t K) {
  return _cvtu32_mask32(K % 32 ? (1u << (K % 32)) - 1u : 0u);
}

// MR rows x the whole panels of [col, col_end) (col and col_end multiples of 8), one panel after another in one call
// (at K = 64, the drafter's Markov W2, a call and an address computation per panel cost more than its 16 dot products).
template <int MR>
LS_TARGET_AVX512_BF16 void panels_bf16(const uint16_t* x, const WeightLayout<uint16_t>& layout, int64_t col,
                                       int64_t col_end, int64_t K, int64_t ldy, float* y) {
  const int64_t step = layout.step();
  const __mmask32 tail = tail_mask(K);
  const uint16_t* panel = layout.column(col);
  for (; col < col_end; col += kPackedColumns, panel += layout.panel_values, y += kPackedColumns)
    panel_bf16<MR, true>(x, panel, K, step, tail, ldy, y);
}

// A verify window of `rows` (4..16) rows x the whole panels of [col, col_end), each panel run by every row group while
// it is in L1, in the groups and with the prefetch of the tile path (block() in matmul_avx512.cpp): windows of up to
// `unprefetched` rows in 2-row groups (3 + 2 for five, 3 for three left), none prefetched; wider ones in 2-row groups,
// the panel `groups` panels ahead (below prefetch_end) fetched into L2 a slice per row group.
LS_TARGET_AVX512_BF16 inline void verify_panels_bf16(const uint16_t* x, const WeightLayout<uint16_t>& layout,
                                                     int64_t rows, int64_t col, int64_t col_end, int64_t prefetch_end,
                                                     int64_t K, int64_t ldy, float* y, int64_t unprefetched,
                                                     int64_t groups) {
  const int64_t step = layout.step();
  const __mmask32 tail = tail_mask(K);
  const uint16_t* panel = layout.column(col);
  const bool prefetch = rows > unprefetched;
  const int64_t row_groups = (rows + 1) / 2, panel_bytes = layout.panel_values * 2;
  const int64_t slice = (panel_bytes / row_groups + 63) / 64 * 64;
  for (; col < col_end; col += kPackedColumns, panel += layout.panel_values, y += kPackedColumns) {
    const char* next = prefetch && col + groups * kPackedColumns < prefetch_end
                           ? reinterpret_cast<const char*>(panel + groups * layout.panel_values)
                           : nullptr;
    for (int64_t row = 0, group = 0, take = 0; row < rows; row += take, ++group) {
      const int64_t left = rows - row;
      take = !prefetch && (left == 5 || left == 3) ? 3 : std::min<int64_t>(2, left);
      if (next)
        for (int64_t offset = group * slice; offset < std::min(panel_bytes, (group + 1) * slice); offset += 64)
          _mm_prefetch(next + offset, _MM_HINT_T1);
      const uint16_t* xr = x + row * K;
      float* yr = y + row * ldy;
      if (take == 3)
        panel_bf16<3, false>(xr, panel, K, step, tail, ldy, yr);
      else if (take == 2)
        panel_bf16<2, false>(xr, panel, K, step, tail, ldy, yr);
      else
        panel_bf16<1, false>(xr, panel, K, step, tail, ldy, yr);
    }
  }
}

// ---- fp32 x against fp32 or bf16 weights: 16 values of K per step, FMA ----

template <typename Weight>
LS_TARGET_AVX512 inline __m512 load_weights16(const Weight* w, __mmask16 mask) {
  if constexpr (sizeof(Weight) == 2) {
    const __m256i raw = _mm256_maskz_loadu_epi16(mask, w);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  } else {
    return _mm512_maskz_loadu_ps(mask, w);
  }
}

template <int MR, int NR, typename Weight>
LS_TARGET_AVX512 void tile_fp32(const float* x, const WeightLayout<Weight>& layout, int64_t col, int64_t K,
                                int64_t ldy, float* y) {
  const Weight* w[NR];
  #pragma GCC unroll 16
  for (int n = 0; n < NR; ++n) w[n] = layout.column(col + n);
  const int64_t step = layout.step();
  __m512 acc[MR][NR];
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
  const __mmask16 all = 0xffff;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = load_weights16(w[n] + (k / 32) * step + k % 32, all);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  if (k < K) {
    const __mmask16 mask = _cvtu32_mask16((1u << (K - k)) - 1u);
    __m512 wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = load_weights16(w[n] + (k / 32) * step + k % 32, mask);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) y[m * ldy + n] = reduce_lanes(acc[m][n]);
}

// ---- a call's inputs and outputs ----

// x [rows, K] as bf16 bits (truncated); returns whether the row was bf16-exact (the truncation lost nothing).
LS_TARGET_AVX512 inline bool row_to_bf16(const float* x, int64_t K, uint16_t* out) {
  __m512i lost = _mm512_setzero_si512();
  const __m512i low_half = _mm512_set1_epi32(0xffff);
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512i bits = _mm512_loadu_si512(x + k);
    lost = _mm512_or_si512(lost, _mm512_and_si512(bits, low_half));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
  }
  if (k < K) {
    const __mmask16 mask = _cvtu32_mask16((1u << (K - k)) - 1u);
    const __m512i bits = _mm512_maskz_loadu_epi32(mask, x + k);
    lost = _mm512_or_si512(lost, _mm512_and_si512(bits, low_half));
    _mm256_mask_storeu_epi16(out + k, mask, _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
  }
  return _mm512_test_epi32_mask(lost, lost) == 0;
}

// out [col_begin, col_end) += bias, then rounded to bf16 when asked: float_to_bf16 bit for bit (NaN kept quiet).
LS_TARGET_AVX512 inline void finish_outputs(float* out, const float* bias, int64_t col_begin, int64_t col_end,
                                             bool round) {
  if (!bias && !round) return;
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), high = _mm512_set1_epi32(0xffff0000);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  for (int64_t col = col_begin; col < col_end; col += 16) {
    const __mmask16 mask = col + 16 <= col_end ? __mmask16(0xffff) : _cvtu32_mask16((1u << (col_end - col)) - 1u);
    __m512 value = _mm512_maskz_loadu_ps(mask, out + col);
    if (bias) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, bias + col));
    if (round) {
      const __m512i bits = _mm512_castps_si512(value);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
      const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(half, lsb)), high);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), infinity);
      const __m512i quieted = _mm512_or_si512(_mm512_and_si512(bits, high), quiet);
      value = _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quieted));
    }
    _mm512_mask_storeu_ps(out + col, mask, value);
  }
}

// ---- tiling over a block of rows x columns (any tiling gives a row the same bits) ----

struct Bf16Tiles {
  const uint16_t* x;  // [rows, K] bf16 bits
  WeightLayout<uint16_t> w;  // [N, K] bf16 bits
  int64_t K, ldy;
  float* y;
  const char* weight_bytes(int64_t col) const { return reinterpret_cast<const char*>(w.column(col)); }
  template <int MR, int NR>
  void run(int64_t row, int64_t col) const {
    tile_bf16<MR, NR>(x + row * K, w, col, K, ldy, y + row * ldy + col);
  }
  // Rows [row, row + rows) (1..3) x the whole panels of [col, col_end): false (nothing done) when not packed.
  bool run_panels(int64_t rows, int64_t row, int64_t col, int64_t col_end) const {
    if (!w.packed || col % kPackedColumns != 0) return false;
    const uint16_t* xr = x + row * K;
    float* yr = y + row * ldy + col;
    switch (rows) {
      case 1: panels_bf16<1>(xr, w, col, col_end, K, ldy, yr); return true;
      case 2: panels_bf16<2>(xr, w, col, col_end, K, ldy, yr); return true;
      case 3: panels_bf16<3>(xr, w, col, col_end, K, ldy, yr); return true;
      default: return false;
    }
  }
  // A verify window (verify_panels_bf16) x the whole panels of [col, col_end): false (nothing done) when not packed.
  bool run_verify_panels(int64_t rows, int64_t row, int64_t col, int64_t col_end, int64_t prefetch_end,
                         int64_t unprefetched, int64_t groups) const {
    if (!w.packed || col % kPackedColumns != 0) return false;
    verify_panels_bf16(x + row * K, w, rows, col, col_end, prefetch_end, K, ldy, y + row * ldy + col, unprefetched,
                       groups);
    return true;
  }
};

template <typename Weight>
struct Fp32Tiles {
  const float* x;   // [rows, K]
  WeightLayout<Weight> w;  // [N, K]
  int64_t K, ldy;
  float* y;
  const char* weight_bytes(int64_t col) const { return reinterpret_cast<const char*>(w.column(col)); }
  template <int MR, int NR>
  void run(int64_t row, int64_t col) const {
    tile_fp32<MR, NR>(x + row * K, w, col, K, ldy, y + row * ldy + col);
  }
};

// Runs the MR x NR tile at (row, col), or the narrowest tile that covers `width` < NR columns.
template <int MR, int NR, typename Tiles>
void narrow_tile(const Tiles& tiles, int64_t row, int64_t col, int64_t width) {
  if constexpr (NR > 1)
    if (width < NR) return narrow_tile<MR, NR - 1>(tiles, row, col, width);
  tiles.template run<MR, NR>(row, col);
}

template <int NR, typename Tiles>
void tile_rows(const Tiles& tiles, int64_t rows, int64_t row, int64_t col, int64_t width) {
  switch (rows) {
    case 1: return narrow_tile<1, NR>(tiles, row, col, width);
    case 2: return narrow_tile<2, NR>(tiles, row, col, width);
    case 3: return narrow_tile<3, NR>(tiles, row, col, width);
    default: return narrow_tile<kTileRows, NR>(tiles, row, col, width);
  }
}

}  // namespace ls::compute::avx512
