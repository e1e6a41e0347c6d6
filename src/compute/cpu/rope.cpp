// NeoX (half-split) rotary embedding with transformers' exact inv_freq values and fp32 cos/sin of pos * inv_freq.
#include <cmath>
#include <vector>

#include "base/check.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/rope_angles.h"
#include "compute/cpu/simd_avx512.h"
#include "compute/ops.h"

namespace ls::compute {
namespace {

// inv_freq for head_dim 64, theta 1e6 as torch computes it on the CPU (reference/lfm2.md §2.5): torch's pow differs
// from a correctly rounded result in 11 of 32 entries, so the values are written out.
constexpr float kInvFreq64Theta1e6[32] = {
    0x1.000000p+0f,  0x1.4c7bc0p-1f,  0x1.afd136p-2f,  0x1.186a08p-2f,  0x1.6c310ep-3f,  0x1.d8ffacp-4f,
    0x1.33281ap-4f,  0x1.8eec7ep-5f,  0x1.030dc6p-5f,  0x1.507316p-6f,  0x1.b4f7e4p-7f,  0x1.1bc25ap-7f,
    0x1.708938p-8f,  0x1.dea41cp-9f,  0x1.36d21ap-9f,  0x1.93aeb8p-10f, 0x1.0624dep-10f, 0x1.547688p-11f,
    0x1.ba2e4ap-12f, 0x1.1f24e4p-12f, 0x1.74eea6p-13f, 0x1.e459c4p-14f, 0x1.3a8748p-14f, 0x1.987f7cp-15f,
    0x1.094564p-15f, 0x1.58863ap-16f, 0x1.bf749ep-17f, 0x1.2291c6p-17f, 0x1.796182p-18f, 0x1.ea20e0p-19f,
    0x1.3e47c8p-19f, 0x1.9d5ef2p-20f,
};

// A product kept as it is (no fused multiply-add may absorb it: the scalar loop rounds each product before the sum).
LS_TARGET_AVX512 inline __m512 unfused(__m512 product) {
  __asm__("" : "+v"(product));
  return product;
}

// One row's heads rotated 16 lanes at a time (half a multiple of 16): the scalar loop's products, roundings and sum per
// element, in its order. cos_half / sin_half [half] are already stored.
LS_TARGET_AVX512 void rotate_heads_avx512(bool round, float* x, int heads, int half, const float* cos_half,
                                          const float* sin_half) {
  using namespace simd;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int head = 0; head < heads; ++head) {
    float* low = x + int64_t{head} * 2 * half;  // v[0 .. half), rotated as -v[half ..]
    float* high = low + half;                    // v[half .. 2 half), rotated as v[0 ..]
    for (int i = 0; i < half; i += 16) {
      const __m512 c = _mm512_loadu_ps(cos_half + i), s = _mm512_loadu_ps(sin_half + i);
      const __m512 a = _mm512_loadu_ps(low + i), b = _mm512_loadu_ps(high + i);
      const __m512 low_c = store16(round, unfused(_mm512_mul_ps(a, c)));
      const __m512 low_s = store16(round, unfused(_mm512_mul_ps(_mm512_xor_ps(b, sign), s)));
      const __m512 high_c = store16(round, unfused(_mm512_mul_ps(b, c)));
      const __m512 high_s = store16(round, unfused(_mm512_mul_ps(a, s)));
      _mm512_storeu_ps(low + i, store16(round, _mm512_add_ps(low_c, low_s)));
      _mm512_storeu_ps(high + i, store16(round, _mm512_add_ps(high_c, high_s)));
    }
  }
}

}  // namespace

RopeTable make_rope_table(int head_dim, double theta) {
  LS_CHECK(head_dim > 0 && head_dim % 2 == 0, "RoPE needs an even head size");
  RopeTable table;
  table.head_dim = head_dim;
  table.inv_freq.resize(head_dim / 2);
  if (head_dim == 64 && theta == 1e6) {
    table.inv_freq.assign(std::begin(kInvFreq64Theta1e6), std::end(kInvFreq64Theta1e6));
    return table;
  }
  // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
  const float base = static_cast<float>(theta);
  for (int i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    table.inv_freq[i] = 1.0f / std::pow(base, exponent);
  }
  return table;
}

void rope_neox(const OpContext& ctx, float* x, int64_t rows, int heads, const int64_t* positions,
               const RopeTable& table) {
  const int head_dim = table.head_dim, half = head_dim / 2;
  const bool vector = cpu_features().avx512 && half % 16 == 0;
  auto rotate_rows = [&](int64_t row_begin, int64_t row_end) {
    std::vector<float> cos_half(half), sin_half(half), rotated(head_dim);
    for (int64_t row = row_begin; row < row_end; ++row) {
      const RopeAngles angles = rope_angles(table, positions[row]);
      for (int i = 0; i < half; ++i) {
        cos_half[i] = ctx.store(angles.cos[i]);
        sin_half[i] = ctx.store(angles.sin[i]);
      }
      if (vector) {
        rotate_heads_avx512(ctx.rounds_to_bf16(), x + row * heads * head_dim, heads, half, cos_half.data(),
                            sin_half.data());
        continue;
      }
      for (int head = 0; head < heads; ++head) {
        float* v = x + (row * heads + head) * head_dim;
        for (int i = 0; i < half; ++i) {
          rotated[i] = -v[i + half];
          rotated[i + half] = v[i];
        }
        for (int d = 0; d < head_dim; ++d) {
          const float c = cos_half[d % half], s = sin_half[d % half];
          if (ctx.rounds_to_bf16()) {
            v[d] = round_to_bf16(round_to_bf16(v[d] * c) + round_to_bf16(rotated[d] * s));
          } else {
            const float a = v[d] * c, b = rotated[d] * s;
            v[d] = a + b;
          }
        }
      }
    }
  };
  // Rows are independent: many-row calls split them over the pool (a row's values never depend on the split).
  if (!ctx.pool || rows < 8) return rotate_rows(0, rows);
  ctx.pool->parallel_for(rows, [&](int, int64_t begin, int64_t end) { rotate_rows(begin, end); });
}

}  // namespace ls::compute
