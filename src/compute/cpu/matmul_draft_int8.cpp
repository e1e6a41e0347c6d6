// int8 per-row GEMM for the drafter's opt-in 8-bit weights, and the quantizer used at load.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "compute/cpu/draft_ops.h"

namespace ls::compute {
namespace {

constexpr int kLanes = 8;
constexpr int64_t kColumnChunk = 16;
constexpr int64_t kRowTile = 64;  // rows kept hot while a worker's columns stream past

// 8 partial sums over K (lane = k mod 8, zero-padded tail), then the fixed tree (0+4, 1+5, ...) -> (0+2, 1+3) -> sum.
float dot_int8_portable(const float* x, const int8_t* codes, int64_t K) {
  float lanes[kLanes] = {};
  for (int64_t k = 0; k < K; k += kLanes)
    for (int lane = 0; lane < kLanes; ++lane) {
      const bool inside = k + lane < K;
      // std::fma rounds once, as _mm256_fmadd_ps does, so both paths give the same bits.
      lanes[lane] =
          std::fma(inside ? x[k + lane] : 0.0f, inside ? static_cast<float>(codes[k + lane]) : 0.0f, lanes[lane]);
    }
  const float s0 = lanes[0] + lanes[4], s1 = lanes[1] + lanes[5], s2 = lanes[2] + lanes[6], s3 = lanes[3] + lanes[7];
  return (s0 + s2) + (s1 + s3);
}

__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 acc) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// MR rows against one weight row: the codes are widened once per 8 and reused by every row; each (row, column)
// keeps its own accumulator, so the order over K is the same whatever MR is.
template <int MR>
__attribute__((target("avx2,fma"))) void dot_int8_avx2(const float* x, int64_t x_stride, const int8_t* codes,
                                                       int64_t K, float* out) {
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + k));
    const __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
    for (int m = 0; m < MR; ++m) acc[m] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * x_stride + k), w, acc[m]);
  }
  if (k < K) {
    alignas(32) float wt[kLanes] = {};
    for (int64_t lane = 0; k + lane < K; ++lane) wt[lane] = static_cast<float>(codes[k + lane]);
    for (int m = 0; m < MR; ++m) {
      alignas(32) float xt[kLanes] = {};
      for (int64_t lane = 0; k + lane < K; ++lane) xt[lane] = x[m * x_stride + k + lane];
      acc[m] = _mm256_fmadd_ps(_mm256_load_ps(xt), _mm256_load_ps(wt), acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) out[m] = horizontal_sum(acc[m]);
}

// Every row of x against one weight row: out[row] for row in [0, rows).
using ColumnKernel = void (*)(const float* x, int64_t rows, const int8_t* codes, int64_t K, float* out);

void column_portable(const float* x, int64_t rows, const int8_t* codes, int64_t K, float* out) {
  for (int64_t row = 0; row < rows; ++row) out[row] = dot_int8_portable(x + row * K, codes, K);
}

__attribute__((target("avx2,fma"))) void column_avx2(const float* x, int64_t rows, const int8_t* codes, int64_t K,
                                                     float* out) {
  int64_t row = 0;
  for (; row + 4 <= rows; row += 4) dot_int8_avx2<4>(x + row * K, K, codes, K, out + row);
  for (; row < rows; ++row) dot_int8_avx2<1>(x + row * K, K, codes, K, out + row);
}

ColumnKernel choose_column_kernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return column_avx2;
  return column_portable;
}

}  // namespace

void quantize_row_int8(std::span<const float> weights, std::span<int8_t> codes, float& scale) {
  LS_CHECK(weights.size() == codes.size(), "quantize_row_int8 needs as many codes as weights");
  float largest = 0.0f;
  for (float w : weights) largest = std::max(largest, std::fabs(w));
  scale = largest / 127.0f;
  for (size_t i = 0; i < weights.size(); ++i) {
    const float code = scale > 0.0f ? std::nearbyint(weights[i] / scale) : 0.0f;
    codes[i] = static_cast<int8_t>(std::clamp(code, -127.0f, 127.0f));
  }
}

void matmul_int8(const OpContext& ctx, const float* x, int64_t rows, const Int8Matrix& w, float* y) {
  if (rows <= 0 || w.rows <= 0) return;
  if (matmul_int8_vnni(ctx, x, rows, w, y)) return;
  LS_CHECK(w.codes != nullptr, "int8 weights kept only as VNNI panels need an AVX-512 VNNI CPU");
  static const ColumnKernel column = choose_column_kernel();
  const int64_t chunks = (w.rows + kColumnChunk - 1) / kColumnChunk;
  auto run = [&](int, int64_t chunk_begin, int64_t chunk_end) {
    const int64_t col_begin = chunk_begin * kColumnChunk, col_end = std::min(w.rows, chunk_end * kColumnChunk);
    std::vector<float> sums(static_cast<size_t>(std::min(rows, kRowTile)));
    // A tile of rows stays hot in cache while this worker's columns stream their codes past it.
    for (int64_t row_begin = 0; row_begin < rows; row_begin += kRowTile) {
      const int64_t tile_rows = std::min(kRowTile, rows - row_begin);
      for (int64_t col = col_begin; col < col_end; ++col) {
        column(x + row_begin * w.cols, tile_rows, w.codes + col * w.cols, w.cols, sums.data());
        for (int64_t row = 0; row < tile_rows; ++row)
          y[(row_begin + row) * w.rows + col] = ctx.store(sums[row] * w.scales[col]);
      }
    }
  };
  if (ctx.pool)
    ctx.pool->parallel_for(chunks, run);
  else
    run(0, 0, chunks);
}

}  // namespace ls::compute
