// The SwiGLU arithmetic every kernel that computes it shares (the CPU swiglu in Bf16 mode): silu(g) = g / (1 +
// exp(-g)) with exp through double (the correctly rounded float in all but vanishing cases; glibc's expf is within
// 0.502 ulp of it), rounded to bf16; the output is then round(silu * up). Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>

namespace ls::cuda {

__device__ __forceinline__ float silu_bf16(float g) {
  const float e = static_cast<float>(exp(static_cast<double>(-g)));
  return __bfloat162float(__float2bfloat16_rn(__fdiv_rn(g, __fadd_rn(1.0f, e))));
}

}  // namespace ls::cuda
