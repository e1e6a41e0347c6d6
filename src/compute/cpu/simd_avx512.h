// AVX-512 helpers shared by the CPU kernels: the fixed lane tree, bf16 rounding, bf16/fp32 loads and a vector exp.
// Every helper works lane by lane (or in one fixed order), so a value never depends on its neighbours.
#pragma once

// GCC 12's AVX-512 headers trip -Wuninitialized inside their own _mm512_undefined_* helpers (at every use site).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "base/bf16.h"

#define LS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

namespace ls::compute::simd {

// The fixed lane tree: lane i + lane i+8, then i + i+4, then (0+2) and (1+3), then their sum.
LS_TARGET_AVX512 inline float reduce_lanes(__m512 v) {
  const __m256 low = _mm512_castps512_ps256(v);
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s8 = _mm256_add_ps(low, high);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// reduce_lanes of eight vectors at once, as [8] fp32: the same additions of the same pairs (lane i + i+8, then i + i+4,
// then (0+2) and (1+3), then their sum), done for eight vectors in shuffled registers, so entry j == reduce_lanes(a[j]).
LS_TARGET_AVX512 inline __m256 reduce_lanes8(const __m512* a) {
  // lanes i + i+8: [a0 | a1] as two 8-lane halves, and so on
  const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x44), _mm512_shuffle_f32x4(a[0], a[1], 0xee));
  const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], 0x44), _mm512_shuffle_f32x4(a[2], a[3], 0xee));
  const __m512 t45 = _mm512_add_ps(_mm512_shuffle_f32x4(a[4], a[5], 0x44), _mm512_shuffle_f32x4(a[4], a[5], 0xee));
  const __m512 t67 = _mm512_add_ps(_mm512_shuffle_f32x4(a[6], a[7], 0x44), _mm512_shuffle_f32x4(a[6], a[7], 0xee));
  // lanes i + i+4 of each half: quarter j of u0123 holds vector j, of u4567 vector 4 + j
  const __m512 u0123 = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xdd));
  const __m512 u4567 = _mm512_add_ps(_mm512_shuffle_f32x4(t45, t67, 0x88), _mm512_shuffle_f32x4(t45, t67, 0xdd));
  // (0+2), (1+3) in each quarter: [a.(0+2), a.(1+3), b.(0+2), b.(1+3)] with a = vector j, b = vector 4 + j
  const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(u0123, u4567, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(u0123, u4567, _MM_SHUFFLE(3, 2, 3, 2)));
  // their sum: lane 0 of quarter j = vector j, lane 2 = vector 4 + j
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v, v, _MM_SHUFFLE(2, 2, 0, 0)),
                                 _mm512_shuffle_ps(v, v, _MM_SHUFFLE(3, 3, 1, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, w));
}

// Lane-wise float_to_bf16 (round to nearest even, NaN kept quiet), returned as the bf16-exact fp32 value.
LS_TARGET_AVX512 inline __m512 round_bf16(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i rounded =
      _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), high);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i quieted = _mm512_or_si512(_mm512_and_si512(bits, high), _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quieted));
}

// round_bf16 when `round`, else the value unchanged (OpContext::store for 16 lanes).
LS_TARGET_AVX512 inline __m512 store16(bool round, __m512 value) { return round ? round_bf16(value) : value; }

// 16 values (lanes outside `mask` read as zero) widened to fp32.
LS_TARGET_AVX512 inline __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
LS_TARGET_AVX512 inline __m512 load16(const bf16* p, __mmask16 mask) {
  const __m256i raw = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// The mask of the first `n` (0..16) lanes.
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// exp(x) lane by lane (Cephes expf: x = n ln2 + r, degree-6 polynomial in r, scaled by 2^n; ~1 ulp).
// Overflows to +inf above ~88.72, underflows through the denormals to 0 below ~-103.9.
LS_TARGET_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7228f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

}  // namespace ls::compute::simd
