// CPU GEMM y = x @ W^T: every (row, column) dot product is one 8-lane accumulator over K in order, then a fixed
// horizontal sum, so a row's result never depends on how many rows share the call or which tile computed it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "compute/cpu/matmul_avx512.h"
#include "compute/ops.h"

namespace ls::compute {
namespace {

constexpr int kLanes = 8;
constexpr int64_t kRowTile = 64;     // rows kept hot in cache while a column block streams its weights
constexpr int64_t kColumnChunk = 16;  // columns per unit of thread work

// ---- portable kernel: the same 8 partial sums (multiply, then add) and the same final tree ----

float weight_at(const Matrix& w, int64_t index) { return w.b16 ? bf16_to_float(w.b16[index]) : w.f32[index]; }

float dot_portable(const float* x, const Matrix& w, int64_t column) {
  const int64_t K = w.cols;
  const int64_t base = column * K;
  float lanes[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int lane = 0; lane < kLanes; ++lane) lanes[lane] += x[k + lane] * weight_at(w, base + k + lane);
  if (k < K)
    for (int lane = 0; lane < kLanes; ++lane) {
      const bool inside = k + lane < K;
      lanes[lane] += (inside ? x[k + lane] : 0.0f) * (inside ? weight_at(w, base + k + lane) : 0.0f);
    }
  const float s0 = lanes[0] + lanes[4], s1 = lanes[1] + lanes[5], s2 = lanes[2] + lanes[6], s3 = lanes[3] + lanes[7];
  const float t0 = s0 + s2, t1 = s1 + s3;
  return t0 + t1;
}

void block_portable(const float* x, const Matrix& w, float* y, int64_t row_begin, int64_t row_end, int64_t col_begin,
                    int64_t col_end) {
  for (int64_t row = row_begin; row < row_end; ++row)
    for (int64_t col = col_begin; col < col_end; ++col) y[row * w.rows + col] = dot_portable(x + row * w.cols, w, col);
}

// ---- AVX2/FMA kernel: MR rows x NR columns per tile, one accumulator per (row, column) ----

__attribute__((target("avx2,fma"))) inline __m256 load_weights8(const Matrix& w, int64_t index) {
  if (w.b16) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.b16 + index));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
  return _mm256_loadu_ps(w.f32 + index);
}

__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // lane i + lane i+4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                         // (0+2), (1+3)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));                                      // (0+2) + (1+3)
  return _mm_cvtss_f32(s);
}

template <int MR, int NR>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* x, const Matrix& w, float* y, int64_t row,
                                                   int64_t col) {
  const int64_t K = w.cols;
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    __m256 wv[NR];
    for (int n = 0; n < NR; ++n) wv[n] = load_weights8(w, (col + n) * K + k);
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_loadu_ps(x + (row + m) * K + k);
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  if (k < K) {  // zero-padded tail: the same extra step for every row
    const int64_t left = K - k;
    alignas(32) float wt[NR][kLanes] = {};
    alignas(32) float xt[kLanes] = {};
    for (int n = 0; n < NR; ++n)
      for (int64_t lane = 0; lane < left; ++lane) wt[n][lane] = weight_at(w, (col + n) * K + k + lane);
    for (int m = 0; m < MR; ++m) {
      for (int64_t lane = 0; lane < left; ++lane) xt[lane] = x[(row + m) * K + k + lane];
      const __m256 xv = _mm256_load_ps(xt);
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_fmadd_ps(xv, _mm256_load_ps(wt[n]), acc[m][n]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) y[(row + m) * w.rows + col + n] = horizontal_sum(acc[m][n]);
}

__attribute__((target("avx2,fma"))) void block_avx2(const float* x, const Matrix& w, float* y, int64_t row_begin,
                                                    int64_t row_end, int64_t col_begin, int64_t col_end) {
  int64_t col = col_begin;
  for (; col + 4 <= col_end; col += 4) {
    int64_t row = row_begin;
    for (; row + 4 <= row_end; row += 4) {
      tile_avx2<4, 2>(x, w, y, row, col);
      tile_avx2<4, 2>(x, w, y, row, col + 2);
    }
    for (; row < row_end; ++row) tile_avx2<1, 4>(x, w, y, row, col);
  }
  for (; col < col_end; ++col) {
    int64_t row = row_begin;
    for (; row + 4 <= row_end; row += 4) tile_avx2<4, 1>(x, w, y, row, col);
    for (; row < row_end; ++row) tile_avx2<1, 1>(x, w, y, row, col);
  }
}

using BlockKernel = void (*)(const float*, const Matrix&, float*, int64_t, int64_t, int64_t, int64_t);

struct KernelChoice {
  BlockKernel block;
  const char* name;
};

KernelChoice choose_matmul_kernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {block_avx2, "avx2-fma"};
  return {block_portable, "portable"};
}

const KernelChoice& matmul_kernel() {
  static const KernelChoice choice = choose_matmul_kernel();
  return choice;
}

}  // namespace

const char* matmul_kernel_name() {
  if (const char* name = matmul_avx512_name()) return name;
  return matmul_kernel().name;
}

void matmul(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, float* y) {
  if (matmul_avx512(ctx, x, rows, w, y)) return;  // runtime dispatch: AVX-512 (bf16 dot / fp32 FMA) when present
  LS_CHECK((w.f32 != nullptr) != (w.b16 != nullptr), "a matrix holds exactly one of fp32 or bf16 weights");
  if (rows <= 0 || w.rows <= 0) return;
  const BlockKernel block = matmul_kernel().block;
  const int64_t chunks = (w.rows + kColumnChunk - 1) / kColumnChunk;
  auto run = [&](int, int64_t chunk_begin, int64_t chunk_end) {
    const int64_t col_begin = chunk_begin * kColumnChunk, col_end = std::min(w.rows, chunk_end * kColumnChunk);
    for (int64_t row_begin = 0; row_begin < rows; row_begin += kRowTile) {
      const int64_t row_end = std::min(rows, row_begin + kRowTile);
      block(x, w, y, row_begin, row_end, col_begin, col_end);
      for (int64_t row = row_begin; row < row_end; ++row)
        for (int64_t col = col_begin; col < col_end; ++col) {
          float& out = y[row * w.rows + col];
          if (w.bias) out += w.bias[col];
          out = ctx.store(out);
        }
    }
  };
  if (ctx.pool)
    ctx.pool->parallel_for(chunks, run);
  else
    run(0, 0, chunks);
}

void matmul_group(const OpContext& ctx, const float* x, int64_t rows, std::span<const Matrix> ws,
                  std::span<float* const> ys) {
  LS_CHECK(ws.size() == ys.size(), "a matmul group has one output per matrix");
  if (matmul_group_avx512(ctx, x, rows, ws, ys)) return;
  for (size_t i = 0; i < ws.size(); ++i) matmul(ctx, x, rows, ws[i], ys[i]);
}

void matmul_argmax(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, int32_t* best) {
  if (matmul_argmax_avx512(ctx, x, rows, w, best)) return;
  std::vector<float> y(rows * w.rows);  // [rows, N] the outputs, then the same scan
  matmul(ctx, x, rows, w, y.data());
  for (int64_t row = 0; row < rows; ++row) {
    const float* values = y.data() + row * w.rows;
    bool found = false;
    float value = 0;
    best[row] = 0;
    for (int64_t col = 0; col < w.rows; ++col)
      if (!found ? !std::isnan(values[col]) : values[col] > value) {
        found = true;
        value = values[col];
        best[row] = static_cast<int32_t>(col);
      }
  }
}

}  // namespace ls::compute
