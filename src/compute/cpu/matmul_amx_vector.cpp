// The AMX B-tile layout run on AVX-512 FMAs in TDPBF16PS's documented order, for few-row calls where the tile unit is
// slow (a 1-row nano forward ran 0.70-0.92 ms on AMX against 0.59-0.69 on the AVX-512 panels, s14A): for each output,
// from +0, for every K pair in increasing order, c = fma(a_even, b_even, c) then c = fma(a_odd, b_odd, c) (a bf16
// product is exact in fp32, so each FMA is the instruction's "c += a * b"), inputs and outputs with denormals as zero
// (MXCSR DAZ + FTZ for the call). Its bits equal AMX's only if the hardware follows that order: behind
// set_amx_vector_rows (off) until the Xeon's probe (cpu_bench --amx-order) and the row tests say so.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "compute/cpu/matmul_amx.h"

#define LS_TARGET_AVX512_FMA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

namespace ls::compute {
namespace {

std::atomic<int> g_vector_rows{[] {
  const char* text = std::getenv("LS_CPU_AMX_VECTOR_ROWS");
  return text ? std::atoi(text) : 0;
}()};

// NB blocks of 16 columns of one row: acc[j] over every K pair of block j's tiles, in order.
template <int NB>
LS_TARGET_AVX512_FMA void vector_blocks(const float* a, const uint16_t* w, int64_t k_tiles, int64_t width,
                                        float* y) {
  const int64_t block = k_tiles * kAmxTileValues;
  __m512 acc[NB];
  #pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) acc[j] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t t = 0; t < k_tiles; ++t)
    for (int64_t r = 0; r < kAmxDepth / 2; ++r) {
      const __m512 a_even = _mm512_set1_ps(a[t * kAmxDepth + 2 * r]);
      const __m512 a_odd = _mm512_set1_ps(a[t * kAmxDepth + 2 * r + 1]);
      const uint16_t* row = w + t * kAmxTileValues + r * 32;
      #pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) {
        const __m512i pairs = _mm512_loadu_si512(row + j * block);
        acc[j] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)), a_even, acc[j]);
        acc[j] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(pairs, high)), a_odd, acc[j]);
      }
    }
  #pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const int64_t left = width - j * kAmxColumns;
    const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    _mm512_mask_storeu_ps(y + j * kAmxColumns, mask, acc[j]);
  }
}

}  // namespace

int set_amx_vector_rows(int rows) { return g_vector_rows.exchange(rows > 0 ? rows : 0); }

int amx_vector_rows() { return g_vector_rows.load(std::memory_order_relaxed); }

LS_TARGET_AVX512_FMA void amx_vector_columns(const uint16_t* x, int64_t rows, int64_t K, const bf16* w_amx,
                                             int64_t col_begin, int64_t col_end, float* y, int64_t ldy) {
  const int64_t k_tiles = amx_k_tiles(K), stride = k_tiles * kAmxDepth;
  const uint16_t* w = reinterpret_cast<const uint16_t*>(w_amx);
  const unsigned saved_csr = _mm_getcsr();
  _mm_setcsr(saved_csr | 0x8040u);  // FTZ + DAZ, as the tile unit
  thread_local std::vector<float> a;
  a.resize(stride);
  constexpr int kGroup = 8;  // blocks a pass: 8 independent FMA chains keep both FMA ports busy
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t k = 0; k < stride; ++k) a[k] = bf16_to_float(bf16{x[m * stride + k]});
    for (int64_t col = col_begin; col < col_end; col += kGroup * kAmxColumns) {
      const int64_t width = std::min<int64_t>(kGroup * kAmxColumns, col_end - col);
      const uint16_t* group = w + col / kAmxColumns * k_tiles * kAmxTileValues;
      float* out = y + m * ldy + col;
      switch ((width + kAmxColumns - 1) / kAmxColumns) {
        case 1: vector_blocks<1>(a.data(), group, k_tiles, width, out); break;
        case 2: vector_blocks<2>(a.data(), group, k_tiles, width, out); break;
        case 3: vector_blocks<3>(a.data(), group, k_tiles, width, out); break;
        case 4: vector_blocks<4>(a.data(), group, k_tiles, width, out); break;
        case 5: vector_blocks<5>(a.data(), group, k_tiles, width, out); break;
        case 6: vector_blocks<6>(a.data(), group, k_tiles, width, out); break;
        case 7: vector_blocks<7>(a.data(), group, k_tiles, width, out); break;
        default: vector_blocks<8>(a.data(), group, k_tiles, width, out); break;
      }
    }
  }
  _mm_setcsr(saved_csr);
}

}  // namespace ls::compute
