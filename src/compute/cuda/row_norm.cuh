// The RMSNorm row reduction every norm kernel shares (rms_norm_kernel's order): one warp sums the squares of a row
// held in shared memory as fp32, lane l chaining elements l, l + 32, ... in double, then the xor tree. Included by
// CUDA sources only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace ls::cuda {

// 1 / sqrt(mean(v^2) + eps) of the row whose element i is value(i) (a float), valid on lane 0 (other lanes hold
// their own xor-tree order's sum: broadcast lane 0's); called by all 32 lanes of one warp.
template <typename Value>
__device__ __forceinline__ float warp_inverse_rms_of(const Value& value, int width, float eps) {
  const int lane = threadIdx.x & 31;
  double sum = 0;
#pragma unroll 8
  for (int i = lane; i < width; i += 32) {
    const double v = value(i);
    sum = __dadd_rn(sum, __dmul_rn(v, v));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  const float mean = static_cast<float>(sum / static_cast<double>(width));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
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
