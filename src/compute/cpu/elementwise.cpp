// CPU row-wise ops: bf16 storing, RMSNorm, residual add, SwiGLU, embedding gather, MoE slot sum.
// RMSNorm, the residual add and SwiGLU take AVX-512 when present (one fixed order per row or per element) and split
// large calls over the pool by rows / elements, which never changes a value.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/simd_avx512.h"
#include "compute/ops.h"

namespace ls::compute {
namespace {

constexpr int64_t kParallelElements = 32768;  // calls smaller than this stay on the calling thread

// Runs task(begin, end) over [0, count) in pieces of `grain`, on the pool when the call is large enough.
template <typename Task>
void split(const OpContext& ctx, int64_t count, int64_t grain, int64_t elements, const Task& task) {
  if (!ctx.pool || ctx.pool->size() == 1 || elements < kParallelElements) return task(0, count);
  const int64_t pieces = (count + grain - 1) / grain;
  ctx.pool->parallel_for(pieces, [&](int, int64_t begin, int64_t end) {
    task(begin * grain, std::min(count, end * grain));
  });
}

// One row of RMSNorm: sum of squares in double in 16 lanes (two 8-lane halves, each in index order), then a fixed
// tree; the normalised value rounded before the weight in Bf16 mode, as transformers does.
LS_TARGET_AVX512 void rms_norm_row_avx512(bool round, const float* in, int64_t width, const float* weight, float eps,
                                          float* out) {
  using namespace simd;
  __m512d low = _mm512_setzero_pd(), high = _mm512_setzero_pd();
  for (int64_t i = 0; i < width; i += 16) {
    const __m512 x = load16(in + i, first_lanes(width - i));
    const __m512d x_low = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d x_high = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    low = _mm512_fmadd_pd(x_low, x_low, low);
    high = _mm512_fmadd_pd(x_high, x_high, high);
  }
  const __m512d sum8 = _mm512_add_pd(low, high);
  const __m256d sum4 = _mm256_add_pd(_mm512_castpd512_pd256(sum8), _mm512_extractf64x4_pd(sum8, 1));
  __m128d sum2 = _mm_add_pd(_mm256_castpd256_pd128(sum4), _mm256_extractf128_pd(sum4, 1));
  sum2 = _mm_add_sd(sum2, _mm_unpackhi_pd(sum2, sum2));
  const float mean = static_cast<float>(_mm_cvtsd_f64(sum2) / static_cast<double>(width));
  const __m512 inverse_rms = _mm512_set1_ps(1.0f / std::sqrt(mean + eps));
  for (int64_t i = 0; i < width; i += 16) {
    const __mmask16 mask = first_lanes(width - i);
    const __m512 normalised = store16(round, _mm512_mul_ps(load16(in + i, mask), inverse_rms));
    _mm512_mask_storeu_ps(out + i, mask, store16(round, _mm512_mul_ps(load16(weight + i, mask), normalised)));
  }
}

LS_TARGET_AVX512 void add_residual_avx512(bool round, float* h, const float* delta, int64_t count) {
  using namespace simd;
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 mask = first_lanes(count - i);
    _mm512_mask_storeu_ps(h + i, mask, store16(round, _mm512_add_ps(load16(h + i, mask), load16(delta + i, mask))));
  }
}

// silu(g) = g / (1 + exp(-g)) with the vector exp; each element on its own.
LS_TARGET_AVX512 void swiglu_avx512(bool round, const float* gate, const float* up, int64_t count, float* out) {
  using namespace simd;
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 mask = first_lanes(count - i);
    const __m512 g = load16(gate + i, mask);
    const __m512 silu = store16(round, _mm512_div_ps(g, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, g)))));
    _mm512_mask_storeu_ps(out + i, mask, store16(round, _mm512_mul_ps(silu, load16(up + i, mask))));
  }
}

// values [count] = round_to_bf16(values), 16 lanes at a time (a drafter's absorb rounds ~100K taps per 64 rows).
LS_TARGET_AVX512 void round_values_avx512(float* values, int64_t count) {
  using namespace simd;
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 mask = first_lanes(count - i);
    _mm512_mask_storeu_ps(values + i, mask, round_bf16(_mm512_maskz_loadu_ps(mask, values + i)));
  }
}

}  // namespace

void store_activations(const OpContext& ctx, std::span<float> values) {
  if (!ctx.rounds_to_bf16()) return;
  if (cpu_features().avx512) return round_values_avx512(values.data(), static_cast<int64_t>(values.size()));
  for (float& value : values) value = round_to_bf16(value);
}

void rms_norm(const OpContext& ctx, const float* x, int64_t rows, int64_t width, const float* weight, float eps,
              float* y) {
  const bool vector = cpu_features().avx512;
  split(ctx, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(width, 1)), rows * width,
        [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      const float* in = x + row * width;
      float* out = y + row * width;
      if (vector) {
        rms_norm_row_avx512(ctx.rounds_to_bf16(), in, width, weight, eps, out);
        continue;
      }
      // Sum of squares in double, in index order: one fixed order for every row.
      double sum_squares = 0;
      for (int64_t i = 0; i < width; ++i) sum_squares += static_cast<double>(in[i]) * in[i];
      const float mean = static_cast<float>(sum_squares / static_cast<double>(width));
      const float inverse_rms = 1.0f / std::sqrt(mean + eps);
      if (ctx.rounds_to_bf16()) {
        for (int64_t i = 0; i < width; ++i) out[i] = round_to_bf16(weight[i] * round_to_bf16(in[i] * inverse_rms));
      } else {
        for (int64_t i = 0; i < width; ++i) out[i] = weight[i] * (in[i] * inverse_rms);
      }
    }
  });
}

void add_residual(const OpContext& ctx, float* h, const float* delta, int64_t count) {
  const bool vector = cpu_features().avx512;
  split(ctx, count, 4096, count, [&](int64_t begin, int64_t end) {
    if (vector) return add_residual_avx512(ctx.rounds_to_bf16(), h + begin, delta + begin, end - begin);
    for (int64_t i = begin; i < end; ++i) h[i] = ctx.store(h[i] + delta[i]);
  });
}

void swiglu(const OpContext& ctx, const float* gate, const float* up, int64_t count, float* out) {
  const bool vector = cpu_features().avx512;
  split(ctx, count, 4096, count, [&](int64_t begin, int64_t end) {
    if (vector) return swiglu_avx512(ctx.rounds_to_bf16(), gate + begin, up + begin, end - begin, out + begin);
    for (int64_t i = begin; i < end; ++i) {
      const float silu = ctx.store(gate[i] / (1.0f + std::exp(-gate[i])));
      out[i] = ctx.store(silu * up[i]);
    }
  });
}

void embed_rows(const OpContext& ctx, const Matrix& table, std::span<const int32_t> tokens, float* out) {
  const int64_t width = table.cols;
  for (size_t row = 0; row < tokens.size(); ++row) {
    const int64_t token = tokens[row];
    LS_CHECK(token >= 0 && token < table.rows, "embedding token out of range (callers validate ids)");
    float* dst = out + static_cast<int64_t>(row) * width;
    if (table.b16) {
      for (int64_t i = 0; i < width; ++i) dst[i] = bf16_to_float(table.b16[token * width + i]);
    } else {
      std::memcpy(dst, table.f32 + token * width, sizeof(float) * width);
    }
    for (int64_t i = 0; i < width; ++i) dst[i] = ctx.store(dst[i]);
  }
}

void sum_slots(const OpContext& ctx, const float* slots, int64_t rows, int k, int64_t width, float* out) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = 0; i < width; ++i) {
      float sum = 0.0f;
      for (int slot = 0; slot < k; ++slot) sum += slots[(row * k + slot) * width + i];
      out[row * width + i] = ctx.store(sum);
    }
}

}  // namespace ls::compute
