// RoPE for the DSpark drafter: fp32 tables and rotation, interleaved (GPT-J) or NeoX pairing, one rounding.
// AVX-512 rotates 8 pairs at a time with the scalar loop's products and sums (never fused), so both give the same bits.
#include <cmath>
#include <vector>

#include "compute/cpu/cpu_features.h"
#include "compute/cpu/draft_ops.h"
#include "compute/cpu/rope_angles.h"
#include "compute/cpu/simd_avx512.h"

namespace ls::compute {
namespace {

// One row's heads, pair by pair: (a, b) rotates to (a cos - b sin, a sin + b cos), each result rounded once.
void rotate_row(const OpContext& ctx, float* x, int heads, int head_dim, const RopeAngles& angles, bool neox) {
  const int half = head_dim / 2;
  for (int head = 0; head < heads; ++head) {
    float* v = x + int64_t{head} * head_dim;
    for (int i = 0; i < half; ++i) {
      float& a = neox ? v[i] : v[2 * i];
      float& b = neox ? v[i + half] : v[2 * i + 1];
      const float rotated_a = a * angles.cos[i] - b * angles.sin[i];
      const float rotated_b = a * angles.sin[i] + b * angles.cos[i];
      a = ctx.store(rotated_a);
      b = ctx.store(rotated_b);
    }
  }
}

// A product kept as it is (no fused multiply-add may absorb it: the scalar loop rounds each product before the sum).
LS_TARGET_AVX512 inline __m512 unfused(__m512 product) {
  __asm__("" : "+v"(product));
  return product;
}

// rotate_row for interleaved pairs with half a multiple of 8: lanes (2j, 2j+1) hold pair j of 8; a difference is the
// sum with the negated product (exact), and a sum does not depend on its operands' order, so each lane gets the bits of
// the scalar expression.
LS_TARGET_AVX512 void rotate_row_interleaved_avx512(bool round, float* x, int heads, int head_dim,
                                                    const RopeAngles& angles) {
  using namespace simd;
  const int half = head_dim / 2;
  const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512 even_sign = _mm512_castsi512_ps(
      _mm512_setr_epi32(INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN,
                        0, INT32_MIN, 0));
  for (int head = 0; head < heads; ++head) {
    float* v = x + int64_t{head} * head_dim;
    for (int j = 0; j < half; j += 8) {
      // [c_j, c_j, c_j+1, c_j+1, ...] and the same for the sines.
      const __m512 c = _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(angles.cos + j)));
      const __m512 s = _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(angles.sin + j)));
      const __m512 ab = _mm512_loadu_ps(v + 2 * j);                        // [a0, b0, a1, b1, ...]
      const __m512 ba = _mm512_permute_ps(ab, _MM_SHUFFLE(2, 3, 0, 1));     // [b0, a0, b1, a1, ...]
      const __m512 straight = unfused(_mm512_mul_ps(ab, c));               // [a c, b c, ...]
      const __m512 crossed = unfused(_mm512_mul_ps(ba, s));                // [b s, a s, ...]
      const __m512 rotated = _mm512_add_ps(straight, _mm512_xor_ps(crossed, even_sign));  // [a c - b s, b c + a s]
      _mm512_storeu_ps(v + 2 * j, store16(round, rotated));
    }
  }
}

}  // namespace

void rope_rotate(const OpContext& ctx, float* x, int64_t rows, int heads, const int64_t* positions,
                 const RopeTable& table, bool neox) {
  const int head_dim = table.head_dim;
  const bool vector = !neox && cpu_features().avx512 && (head_dim / 2) % 8 == 0;
  for (int64_t row = 0; row < rows; ++row) {
    const RopeAngles angles = rope_angles(table, positions[row]);
    float* values = x + row * heads * head_dim;
    if (vector)
      rotate_row_interleaved_avx512(ctx.rounds_to_bf16(), values, heads, head_dim, angles);
    else
      rotate_row(ctx, values, heads, head_dim, angles, neox);
  }
}

}  // namespace ls::compute
