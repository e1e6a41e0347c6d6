// One attention head's RMSNorm then NeoX RoPE by one warp (qk_norm_rope's arithmetic, shared by its launch and the
// target's fused q/k norm + KV write): lane l holds elements l + 32 j (j < J = head_dim / 32) in registers, the norm's
// lane chain is rms_norm_kernel's, and with head_dim a multiple of 64 each RoPE pair (i, i + head_dim / 2) is the
// lane's own (j, j + J / 2). Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ls::cuda {

template <int J>
__device__ __forceinline__ void head_norm_rope(const __nv_bfloat16* in, const __nv_bfloat16* weight, float eps,
                                               float position, const float* inv_freq, __nv_bfloat16* out) {
  const int lane = threadIdx.x & 31;
  constexpr int hd = 32 * J, half = hd / 2;
  auto round_bf16 = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };
  float x[J], w[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    x[j] = __bfloat162float(in[lane + 32 * j]);
    w[j] = __bfloat162float(weight[lane + 32 * j]);
  }
  double sum = 0;
#pragma unroll
  for (int j = 0; j < J; ++j) sum = __dadd_rn(sum, __dmul_rn(static_cast<double>(x[j]), static_cast<double>(x[j])));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  const float mean = static_cast<float>(sum / static_cast<double>(hd));
  const float inverse_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  float n[J];  // the normed head, bf16 values (rms_norm's output)
#pragma unroll
  for (int j = 0; j < J; ++j) n[j] = round_bf16(__fmul_rn(w[j], round_bf16(__fmul_rn(x[j], inverse_rms))));
#pragma unroll
  for (int j = 0; j < J / 2; ++j) {
    const int i = lane + 32 * j;
    const float angle = __fmul_rn(position, inv_freq[i]);
    const float c = round_bf16(static_cast<float>(cos(static_cast<double>(angle))));
    const float s = round_bf16(static_cast<float>(sin(static_cast<double>(angle))));
    const float lo = n[j], hi = n[j + J / 2];
    out[i] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(lo, c)), round_bf16(__fmul_rn(-hi, s))));
    out[i + half] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(hi, c)), round_bf16(__fmul_rn(lo, s))));
  }
}

}  // namespace ls::cuda
