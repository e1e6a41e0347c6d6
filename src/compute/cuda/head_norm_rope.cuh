// One attention head's RMSNorm then NeoX RoPE by one warp (qk_norm_rope's arithmetic, shared by its launch and the
// target's fused q/k norm + KV write): lane l holds elements l + 32 j (j < J = head_dim / 32) in registers, the norm's
// lane chain is rms_norm_kernel's, and with head_dim a multiple of 64 each RoPE pair (i, i + head_dim / 2) is the
// lane's own (j, j + J / 2). Split in two so a launch can do the part that does not read the head before its
// programmatic wait. Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ls::cuda {

// What a head's norm + RoPE needs besides the head itself (constant, or fixed before the forward's first kernel):
// the lane's norm weights and its pairs' rounded cos / sin. A launch can make it before its programmatic wait.
template <int J>
struct HeadRope {
  float w[J], c[J / 2], s[J / 2];
};

template <int J>
__device__ __forceinline__ HeadRope<J> head_rope_prepare(const __nv_bfloat16* weight, float position,
                                                         const float* inv_freq) {
  const int lane = threadIdx.x & 31;
  auto round_bf16 = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };
  HeadRope<J> r;
#pragma unroll
  for (int j = 0; j < J; ++j) r.w[j] = __bfloat162float(weight[lane + 32 * j]);
#pragma unroll
  for (int j = 0; j < J / 2; ++j) {
    const float angle = __fmul_rn(position, inv_freq[lane + 32 * j]);
    r.c[j] = round_bf16(static_cast<float>(cos(static_cast<double>(angle))));
    r.s[j] = round_bf16(static_cast<float>(sin(static_cast<double>(angle))));
  }
  return r;
}

template <int J>
__device__ __forceinline__ void head_norm_rope_apply(const __nv_bfloat16* in, float eps, const HeadRope<J>& r,
                                                     __nv_bfloat16* out) {
  const int lane = threadIdx.x & 31;
  constexpr int hd = 32 * J, half = hd / 2;
  auto round_bf16 = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };
  float x[J];
#pragma unroll
  for (int j = 0; j < J; ++j) x[j] = __bfloat162float(in[lane + 32 * j]);
  double sum = 0;
#pragma unroll
  for (int j = 0; j < J; ++j) sum = __dadd_rn(sum, __dmul_rn(static_cast<double>(x[j]), static_cast<double>(x[j])));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  const float mean = static_cast<float>(sum / static_cast<double>(hd));
  const float inverse_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  float n[J];  // the normed head, bf16 values (rms_norm's output)
#pragma unroll
  for (int j = 0; j < J; ++j) n[j] = round_bf16(__fmul_rn(r.w[j], round_bf16(__fmul_rn(x[j], inverse_rms))));
#pragma unroll
  for (int j = 0; j < J / 2; ++j) {
    const int i = lane + 32 * j;
    const float c = r.c[j], s = r.s[j], lo = n[j], hi = n[j + J / 2];
    out[i] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(lo, c)), round_bf16(__fmul_rn(-hi, s))));
    out[i + half] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(hi, c)), round_bf16(__fmul_rn(lo, s))));
  }
}

template <int J>
__device__ __forceinline__ void head_norm_rope(const __nv_bfloat16* in, const __nv_bfloat16* weight, float eps,
                                               float position, const float* inv_freq, __nv_bfloat16* out) {
  head_norm_rope_apply<J>(in, eps, head_rope_prepare<J>(weight, position, inv_freq), out);
}

}  // namespace ls::cuda
