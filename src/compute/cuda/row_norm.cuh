// The RMSNorm row reduction every norm kernel shares (rms_norm_kernel's order): one warp sums the squares of a row
// held in shared memory as fp32, lane l chaining elements l, l + 32, ... in double, then the xor tree. Rows wider than
// kNormSlice under set_norm_sliced (norm_order.h, session 12) take the sliced order instead: 256-element slices, lane l
// chaining its 8 contiguous elements 256 s + 8 l .. of slice s in double, the xor tree per slice, then the slice sums
// in slice order; a CTA's warps take a slice each. Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace ls::cuda {

constexpr int kNormSlice = 256;  // elements a slice of the sliced order: 32 lanes x 8

// The xor tree over a warp's 32 double sums; every lane ends with the same sum (each step adds a pair both ways).
__device__ __forceinline__ double warp_tree_sum(double sum) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  return sum;
}

// 1 / sqrt(mean + eps) from a row's sum of squares.
__device__ __forceinline__ float inverse_rms_from(double sum, int width, float eps) {
  const float mean = static_cast<float>(sum / static_cast<double>(width));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// The sliced order by one warp (all 32 lanes): up to 8 slices' chains at once, then their trees, then the slice sums
// in slice order; valid on every lane.
template <typename Value>
__device__ __forceinline__ float warp_inverse_rms_sliced(const Value& value, int width, float eps) {
  const int lane = threadIdx.x & 31;
  double total = 0;
  for (int first = 0; first < width; first += 8 * kNormSlice) {
    double part[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      part[t] = 0;
      const int at = first + t * kNormSlice + lane * 8;
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        if (at + p < width) {
          const double v = value(at + p);
          part[t] = __dadd_rn(part[t], __dmul_rn(v, v));
        }
      }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) part[t] = warp_tree_sum(part[t]);
#pragma unroll
    for (int t = 0; t < 8; ++t)
      if (first + t * kNormSlice < width) total = __dadd_rn(total, part[t]);
  }
  return inverse_rms_from(total, width, eps);
}

// 1 / sqrt(mean(v^2) + eps) of the row whose element i is value(i) (a float), valid on every lane; called by all 32
// lanes of one warp. sliced: the sliced order for rows wider than kNormSlice (set_norm_sliced).
template <typename Value>
__device__ __forceinline__ float warp_inverse_rms_of(const Value& value, int width, float eps, bool sliced = false) {
  if (sliced && width > kNormSlice) return warp_inverse_rms_sliced(value, width, eps);
  const int lane = threadIdx.x & 31;
  double sum = 0;
#pragma unroll 8
  for (int i = lane; i < width; i += 32) {
    const double v = value(i);
    sum = __dadd_rn(sum, __dmul_rn(v, v));
  }
  return inverse_rms_from(warp_tree_sum(sum), width, eps);
}

// *result = 1 / sqrt(mean(values^2) + eps) of `values` [width]; called by all 32 lanes of one warp.
__device__ __forceinline__ void warp_inverse_rms(const float* values, int width, float eps, float* result) {
  const float inverse = warp_inverse_rms_of([values](int i) { return values[i]; }, width, eps);
  if ((threadIdx.x & 31) == 0) *result = inverse;
}

// A 16-byte chunk of 8 bf16 values h = round(h + delta), pair by pair (add_residual's arithmetic).
__device__ __forceinline__ void add_chunk(uint4& h, const uint4& delta) {
  auto* hp = reinterpret_cast<__nv_bfloat162*>(&h);
  const auto* dp = reinterpret_cast<const __nv_bfloat162*>(&delta);
#pragma unroll
  for (int p = 0; p < 4; ++p)
    hp[p] = __floats2bfloat162_rn(__fadd_rn(__low2float(hp[p]), __low2float(dp[p])),
                                  __fadd_rn(__high2float(hp[p]), __high2float(dp[p])));
}

// The normed chunk round(weight * round(v * inverse)) of 8 bf16 values (rms_norm's two roundings); one_rounding:
// a planted fault for tests (the inner rounding left out).
__device__ __forceinline__ uint4 norm_chunk(const uint4& v, const uint4& weight, float inverse,
                                            bool one_rounding = false) {
  uint4 out;
  const auto* vp = reinterpret_cast<const __nv_bfloat162*>(&v);
  const auto* wp = reinterpret_cast<const __nv_bfloat162*>(&weight);
  auto* op = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    float lo = __fmul_rn(__low2float(vp[p]), inverse), hi = __fmul_rn(__high2float(vp[p]), inverse);
    if (!one_rounding) {
      lo = __bfloat162float(__float2bfloat16_rn(lo));
      hi = __bfloat162float(__float2bfloat16_rn(hi));
    }
    op[p] = __floats2bfloat162_rn(__fmul_rn(__low2float(wp[p]), lo), __fmul_rn(__high2float(wp[p]), hi));
  }
  return out;
}

}  // namespace ls::cuda
