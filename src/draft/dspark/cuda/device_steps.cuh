// Device steps shared by the drafter's kernels: the SwiGLU value of two rounded outputs, one head's norm + RoPE, one
// row's residual + RMSNorm, and (from compute/cuda/pdl.cuh) the programmatic dependent launch controls.
#pragma once

#include <cuda_bf16.h>

#include "compute/cuda/pdl.cuh"

namespace ls::dspark::cuda {

// bf16(bf16(silu(g)) * u) for bf16-exact g and u: the arithmetic of swiglu and swiglu_stacked.
__device__ __forceinline__ __nv_bfloat16 swiglu_value(float g, float u) {
  const float silu = __bfloat162float(__float2bfloat16_rn(g / (1.0f + expf(-g))));
  return __float2bfloat16_rn(silu * u);
}

// The programmatic dependent launch controls are the target's (compute/cuda/pdl.cuh).
using ls::cuda::let_next_kernel_start;
using ls::cuda::wait_for_previous_kernel;

// bf16 rounding of an fp32 value, kept in fp32.
__device__ __forceinline__ float round_bf16(float value) { return __bfloat162float(__float2bfloat16_rn(value)); }

// One query or key head of hd values by a warp (lanes over the head): y = bf16(weight * bf16(x * inverse_rms)) with
// the sum of squares in double over the warp's xor tree, staged in `normed` (hd floats of the warp's shared memory),
// then RoPE at `position` (neox halves or interleaved pairs) into out. The block pass's q / k heads and the absorb's
// key heads both call it, so a key cached by either has the same bits.
__device__ __forceinline__ void norm_rope_head(const __nv_bfloat16* in, const float* weight, int hd, float eps,
                                               float position, const float* inv_freq, bool neox, float* normed,
                                               __nv_bfloat16* out, int lane) {
  constexpr int kLanes = 32;
  double sum_squares = 0;
  for (int i = lane; i < hd; i += kLanes) {
    const double value = __bfloat162float(in[i]);
    sum_squares += value * value;
  }
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
  }
  const float mean = static_cast<float>(sum_squares / static_cast<double>(hd));
  const float inverse_rms = 1.0f / sqrtf(mean + eps);
  for (int i = lane; i < hd; i += kLanes) {
    normed[i] = round_bf16(weight[i] * round_bf16(__bfloat162float(in[i]) * inverse_rms));
  }
  __syncwarp();
  const int half = hd / 2;
  for (int pair = lane; pair < half; pair += kLanes) {
    const float angle = position * inv_freq[pair];
    const float cosine = cosf(angle), sine = sinf(angle);
    const int ia = neox ? pair : 2 * pair, ib = neox ? pair + half : 2 * pair + 1;
    const float x = normed[ia], y = normed[ib];
    out[ia] = __float2bfloat16_rn(x * cosine - y * sine);
    out[ib] = __float2bfloat16_rn(x * sine + y * cosine);
  }
}

// norm_rope_head with each lane's loads (its elements of the head, their weights, its RoPE frequencies) issued at
// once: the same arithmetic in the same order, so the same bits (session 8). hd <= 128.
__device__ __forceinline__ void norm_rope_head_batched(const __nv_bfloat16* in, const float* weight, int hd, float eps,
                                                       float position, const float* inv_freq, bool neox,
                                                       float* normed, __nv_bfloat16* out, int lane) {
  constexpr int kLanes = 32, kMost = 4;  // elements a lane holds (hd <= 128)
  const int half = hd / 2;
  float values[kMost], weights[kMost], frequencies[kMost / 2];
#pragma unroll
  for (int k = 0; k < kMost; ++k) {
    const int i = lane + k * kLanes;
    values[k] = i < hd ? __bfloat162float(in[i]) : 0.0f;
    weights[k] = i < hd ? weight[i] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kMost / 2; ++k) {
    const int pair = lane + k * kLanes;
    frequencies[k] = pair < half ? inv_freq[pair] : 0.0f;
  }
  double sum_squares = 0;
#pragma unroll
  for (int k = 0; k < kMost; ++k) {
    if (lane + k * kLanes >= hd) break;
    const double value = values[k];
    sum_squares += value * value;
  }
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
  }
  const float mean = static_cast<float>(sum_squares / static_cast<double>(hd));
  const float inverse_rms = 1.0f / sqrtf(mean + eps);
#pragma unroll
  for (int k = 0; k < kMost; ++k) {
    const int i = lane + k * kLanes;
    if (i >= hd) break;
    normed[i] = round_bf16(weights[k] * round_bf16(values[k] * inverse_rms));
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < kMost / 2; ++k) {
    const int pair = lane + k * kLanes;
    if (pair >= half) break;
    const float angle = position * frequencies[k];
    const float cosine = cosf(angle), sine = sinf(angle);
    const int ia = neox ? pair : 2 * pair, ib = neox ? pair + half : 2 * pair + 1;
    const float x = normed[ia], y = normed[ib];
    out[ia] = __float2bfloat16_rn(x * cosine - y * sine);
    out[ib] = __float2bfloat16_rn(x * sine + y * cosine);
  }
}

// Threads of one residual_norm_row (the reduction tree over them fixes the double sum's order).
inline constexpr int kRowThreads = 256;

// A row's 1 / sqrt(mean square + eps) from each of kRowThreads threads' double sum of squares: a butterfly within
// each warp, then the warps' sums added in warp order (the one reduction tail of residual_norm_row and its batched
// form). Every thread of the CTA calls it (those at or past kRowThreads only join the barrier); `partial` is shared
// [kRowThreads / 32].
__device__ __forceinline__ float row_inverse_rms(double sum_squares, bool lane_of_row, int64_t width, float eps,
                                                 double* partial) {
  if (lane_of_row) {
    for (int offset = 16; offset > 0; offset /= 2) sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum_squares;
  }
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kRowThreads / 32; ++w) total += partial[w];
  const float mean = static_cast<float>(total / static_cast<double>(width));
  return 1.0f / sqrtf(mean + eps);
}

// Row `row` of x [rows, width]: x = bf16(x + delta) (delta may be null: x as is), then y = bf16(weight *
// bf16(x * inverse_rms)) with the sum of squares in double over a tree of kRowThreads threads. Every thread of the
// CTA calls it (those at or past kRowThreads only join the barriers); `partial` is shared [kRowThreads / 32]. delta
// is read through L2 (other CTAs of the same launch may have written it).
__device__ __forceinline__ void residual_norm_row(__nv_bfloat16* x, const __nv_bfloat16* delta, int64_t row,
                                                  int64_t width, const float* weight, float eps, __nv_bfloat16* y,
                                                  double* partial) {
  const bool lane_of_row = threadIdx.x < kRowThreads;
  __nv_bfloat16* in = x + row * width;
  const __nv_bfloat16* add = delta ? delta + row * width : nullptr;
  double sum_squares = 0;
  if (lane_of_row) {
    for (int64_t i = threadIdx.x; i < width; i += kRowThreads) {
      float value = __bfloat162float(in[i]);
      if (add) {
        value = __bfloat162float(__float2bfloat16_rn(value + __bfloat162float(__ldcg(add + i))));
        in[i] = __float2bfloat16_rn(value);
      }
      sum_squares += static_cast<double>(value) * value;
    }
  }
  const float inverse_rms = row_inverse_rms(sum_squares, lane_of_row, width, eps, partial);
  __nv_bfloat16* out = y + row * width;
  if (lane_of_row) {
    for (int64_t i = threadIdx.x; i < width; i += kRowThreads) {
      const float value = __bfloat162float(in[i]);
      out[i] = __float2bfloat16_rn(weight[i] * __bfloat162float(__float2bfloat16_rn(value * inverse_rms)));
    }
  }
  __syncthreads();  // partial may be reused by the next row
}

// residual_norm_row with every load a thread makes issued at once (x, delta and weight elements into registers:
// rows up to kRowThreads * kMaxRowLoads wide, wider rows take residual_norm_row) and the normed pass reading the
// kept values instead of x again: the same arithmetic in the same order, so the same bits (session 8; the loop
// above waits for each element's load in turn, its store to x possibly aliasing the next load).
inline constexpr int kMaxRowLoads = 16;
__device__ __forceinline__ void residual_norm_row_batched(__nv_bfloat16* x, const __nv_bfloat16* delta, int64_t row,
                                                          int64_t width, const float* weight, float eps,
                                                          __nv_bfloat16* y, double* partial) {
  if (width > static_cast<int64_t>(kRowThreads) * kMaxRowLoads) {
    residual_norm_row(x, delta, row, width, weight, eps, y, partial);
    return;
  }
  const bool lane_of_row = threadIdx.x < kRowThreads;
  __nv_bfloat16* in = x + row * width;
  const __nv_bfloat16* add = delta ? delta + row * width : nullptr;
  float values[kMaxRowLoads], weights[kMaxRowLoads];
  __nv_bfloat16 added[kMaxRowLoads];
  double sum_squares = 0;
  if (lane_of_row) {
#pragma unroll
    for (int k = 0; k < kMaxRowLoads; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kRowThreads;
      values[k] = i < width ? __bfloat162float(in[i]) : 0.0f;
      added[k] = add && i < width ? __ldcg(add + i) : __float2bfloat16_rn(0.0f);
      weights[k] = i < width ? weight[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kMaxRowLoads; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kRowThreads;
      if (i >= width) break;
      float value = values[k];
      if (add) {
        value = __bfloat162float(__float2bfloat16_rn(value + __bfloat162float(added[k])));
        in[i] = __float2bfloat16_rn(value);
        values[k] = value;
      }
      sum_squares += static_cast<double>(value) * value;
    }
  }
  const float inverse_rms = row_inverse_rms(sum_squares, lane_of_row, width, eps, partial);
  __nv_bfloat16* out = y + row * width;
  if (lane_of_row) {
#pragma unroll
    for (int k = 0; k < kMaxRowLoads; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kRowThreads;
      if (i >= width) break;
      out[i] = __float2bfloat16_rn(weights[k] * __bfloat162float(__float2bfloat16_rn(values[k] * inverse_rms)));
    }
  }
  __syncthreads();  // partial may be reused by the next row
}

}  // namespace ls::dspark::cuda
