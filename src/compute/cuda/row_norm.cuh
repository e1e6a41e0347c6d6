// The RMSNorm row reduction every norm kernel shares (rms_norm_kernel's order): one warp sums the squares of a row
// held in shared memory as fp32, lane l chaining elements l, l + 32, ... in double, then the xor tree. Included by
// CUDA sources only.
#pragma once

#include <cuda_runtime.h>

namespace ls::cuda {

// *result = 1 / sqrt(mean(values^2) + eps) of `values` [width]; called by all 32 lanes of one warp.
__device__ __forceinline__ void warp_inverse_rms(const float* values, int width, float eps, float* result) {
  const int lane = threadIdx.x & 31;
  double sum = 0;
#pragma unroll 8
  for (int i = lane; i < width; i += 32) {
    const double v = values[i];
    sum = __dadd_rn(sum, __dmul_rn(v, v));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  if (lane == 0) {
    const float mean = static_cast<float>(sum / static_cast<double>(width));
    *result = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  }
}

}  // namespace ls::cuda
