// The SwiGLU arithmetic every kernel that computes it shares (the CPU swiglu in Bf16 mode): silu(g) = g / (1 +
// exp(-g)) with exp through double (the correctly rounded float in all but vanishing cases; glibc's expf is within
// 0.502 ulp of it), rounded to bf16; the output is then round(silu * up). Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace ls::cuda {

__device__ __forceinline__ float silu_bf16(float g) {
  const float e = static_cast<float>(exp(static_cast<double>(-g)));
  return __bfloat162float(__float2bfloat16_rn(__fdiv_rn(g, __fadd_rn(1.0f, e))));
}

// swiglu.cu's table of silu_bf16 by the gate's bf16 bits (every gate: a lookup gives silu_bf16's bits), where the
// process's swiglu kernel is the table one (set_swiglu_kernel) and the table is filled on this device (filled here
// unless `stream` is capturing); null otherwise.
const __nv_bfloat16* silu_table_for(cudaStream_t stream);

}  // namespace ls::cuda
