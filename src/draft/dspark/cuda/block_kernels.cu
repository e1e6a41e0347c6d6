// Block-pass kernels of the CUDA drafter: embed, RMSNorm, RoPE, residual, SwiGLU, block K/V scatter, attention, and
// the fused ones (q/k/v heads: norm + RoPE + cache rows; residual + norm; SwiGLU over the stacked gate/up output).
#include <cmath>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/device_steps.cuh"

namespace ls::dspark::cuda {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

int blocks_for(int64_t count, int threads) { return static_cast<int>((count + threads - 1) / threads); }

__global__ void embed_kernel(const bf16_t* table, const int32_t* tokens, int64_t rows, int64_t width, bf16_t* out) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= rows * width) return;
  const int64_t row = index / width, column = index % width;
  out[index] = table[static_cast<int64_t>(tokens[row]) * width + column];
}

__global__ void round_kernel(const float* in, int64_t count, bf16_t* out) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index < count) out[index] = __float2bfloat16_rn(in[index]);
}

// One warp per row, each lane's values of the row kBatch at a time (lane + k x kWarp, k < kBatch): 1 is the
// one-at-a-time reference, 16 the batched loads (session 8: the loop waits for each batch in turn), 64 holds a row
// of up to 2048 (session 10). Where one batch covers the row its values and weights are kept for the output (one
// load round trip a row; every load before the first store, so y may be x), else the output loop loads them again.
// The same sum in the same lane order and the same outputs at every kBatch, so the same bits.
constexpr int kNormBatch = 16;
constexpr int kNormHeld = 64;
template <int kBatch>
__global__ void rms_norm_kernel(const bf16_t* x, int64_t rows, int64_t width, const float* weight, float eps,
                                bf16_t* y) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const bf16_t* in = x + row * width;
  const bool held = width <= kWarp * kBatch;
  float values[kBatch], weights[kBatch];
  double sum_squares = 0;
  for (int64_t base = lane; base < width; base += kWarp * kBatch) {
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t i = base + k * kWarp;
      values[k] = i < width ? __bfloat162float(in[i]) : 0.0f;
      weights[k] = held && i < width ? weight[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (base + k * kWarp >= width) break;
      const double value = values[k];
      sum_squares += value * value;
    }
  }
  sum_squares = warp_sum(sum_squares);
  const float mean = static_cast<float>(sum_squares / static_cast<double>(width));
  const float inverse_rms = 1.0f / sqrtf(mean + eps);
  bf16_t* out = y + row * width;
  for (int64_t base = lane; base < width; base += kWarp * kBatch) {
    if (!held) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t i = base + k * kWarp;
        values[k] = i < width ? __bfloat162float(in[i]) : 0.0f;
        weights[k] = i < width ? weight[i] : 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t i = base + k * kWarp;
      if (i >= width) break;
      out[i] = __float2bfloat16_rn(weights[k] * round_bf16(values[k] * inverse_rms));
    }
  }
}

// One thread per (row, head, pair).
__global__ void rope_kernel(bf16_t* x, int64_t rows, int heads, int head_dim, const int32_t* positions,
                            int64_t first_position, const float* inv_freq, bool neox) {
  const int half = head_dim / 2;
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= rows * heads * half) return;
  const int pair = static_cast<int>(index % half);
  const int64_t row_head = index / half;
  const int64_t row = row_head / heads;
  const float position = static_cast<float>(positions ? positions[row] : first_position + row);
  const float angle = position * inv_freq[pair];
  const float cosine = cosf(angle), sine = sinf(angle);
  bf16_t* v = x + row_head * head_dim;
  const int ia = neox ? pair : 2 * pair, ib = neox ? pair + half : 2 * pair + 1;
  const float a = __bfloat162float(v[ia]), b = __bfloat162float(v[ib]);
  v[ia] = __float2bfloat16_rn(a * cosine - b * sine);
  v[ib] = __float2bfloat16_rn(a * sine + b * cosine);
}

__global__ void add_residual_kernel(bf16_t* x, const bf16_t* delta, int64_t count) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index < count) x[index] = __float2bfloat16_rn(__bfloat162float(x[index]) + __bfloat162float(delta[index]));
}

__global__ void swiglu_kernel(const bf16_t* gate, const bf16_t* up, int64_t count, bf16_t* out) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= count) return;
  out[index] = swiglu_value(__bfloat162float(gate[index]), __bfloat162float(up[index]));
}

// Block (request) i copies gamma rows of keys and values into its cache at rows p .. p+gamma-1.
__global__ void scatter_kernel(const bf16_t* keys, const bf16_t* values, const DeviceBlockRequest* requests,
                               int gamma, int kv_size, int layer) {
  const DeviceBlockRequest request = requests[blockIdx.x];
  const int64_t base = (static_cast<int64_t>(layer) * request.capacity + request.length) * kv_size;
  const int64_t source = static_cast<int64_t>(blockIdx.x) * gamma * kv_size;
  for (int64_t index = threadIdx.x; index < static_cast<int64_t>(gamma) * kv_size; index += blockDim.x) {
    request.keys[base + index] = keys[source + index];
    request.values[base + index] = values[source + index];
  }
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Eight bf16 values (16 bytes, aligned) as floats.
__device__ __forceinline__ void load_eight(const bf16_t* from, float* to) {
  const uint4 raw = *reinterpret_cast<const uint4*>(from);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __bfloat1622float2(pairs[i]);
    to[2 * i] = pair.x;
    to[2 * i + 1] = pair.y;
  }
}

// Grid (request, head); warp s handles block slot s, its lanes take keys lane, lane+32, ... of keys 0 .. p+gamma-1
// (context, then the block). Three passes (max, sum of exponentials, weighted values) compute each key's score the
// same way, so the softmax is the CPU's eager one with its bf16 roundings (raw and scaled scores, probabilities,
// output); only the fp32 sums over keys are split over lanes.
template <int kHeadDim>
__global__ void block_attention_kernel(const bf16_t* q, const DeviceBlockRequest* requests, int gamma,
                                       AttentionDims dims, int layer, bf16_t* out) {
  let_next_kernel_start();  // the next GEMM may start loading its weights
  __shared__ float query_rows[kMaxDeviceBlock][kHeadDim];
  const int request_index = blockIdx.x / dims.heads;
  const int head = blockIdx.x % dims.heads;
  const int slot = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (slot >= gamma) return;
  const DeviceBlockRequest request = requests[request_index];
  const int kv_size = dims.kv_heads * kHeadDim;
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int64_t row = static_cast<int64_t>(request_index) * gamma + slot;
  float* query = query_rows[slot];
  for (int dim = lane; dim < kHeadDim; dim += kWarp) query[dim] = __bfloat162float(q[(row * dims.heads + head) * kHeadDim + dim]);
  __syncwarp();
  const int64_t layer_offset = static_cast<int64_t>(layer) * request.capacity * kv_size + kv_head * kHeadDim;
  const bf16_t* keys = request.keys + layer_offset;
  const bf16_t* values = request.values + layer_offset;
  const int64_t key_count = request.length + gamma;
  auto score = [&](int64_t key) {
    const bf16_t* k = keys + key * kv_size;
    float sum = 0.0f;
#pragma unroll
    for (int dim = 0; dim < kHeadDim; dim += 8) {
      float eight[8];
      load_eight(k + dim, eight);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += query[dim + i] * eight[i];
    }
    return round_bf16(round_bf16(sum) * dims.scale);
  };
  float max_score = -INFINITY;
  for (int64_t key = lane; key < key_count; key += kWarp) max_score = fmaxf(max_score, score(key));
  max_score = warp_max(max_score);
  float total = 0.0f;
  for (int64_t key = lane; key < key_count; key += kWarp) total += expf(score(key) - max_score);
  total = warp_sum(total);
  float accumulated[kHeadDim];
#pragma unroll
  for (int dim = 0; dim < kHeadDim; ++dim) accumulated[dim] = 0.0f;
  for (int64_t key = lane; key < key_count; key += kWarp) {
    const float probability = round_bf16(expf(score(key) - max_score) / total);
    const bf16_t* v = values + key * kv_size;
#pragma unroll
    for (int dim = 0; dim < kHeadDim; dim += 8) {
      float eight[8];
      load_eight(v + dim, eight);
#pragma unroll
      for (int i = 0; i < 8; ++i) accumulated[dim + i] += probability * eight[i];
    }
  }
  bf16_t* destination = out + (row * dims.heads + head) * kHeadDim;
#pragma unroll
  for (int dim = 0; dim < kHeadDim; ++dim) {
    const float sum = warp_sum(accumulated[dim]);
    if (lane == dim % kWarp) destination[dim] = __float2bfloat16_rn(sum);
  }
}

// One warp per (block row, head) of the stacked q/k/v GEMM output [rows, heads + 2 kv_heads, head_dim]: query
// and key heads get the per-head RMSNorm (rms_norm_kernel's arithmetic) then RoPE at positions[row]
// (rope_kernel's), queries go to `queries` [rows, heads, head_dim], keys and values straight to the request's cache
// rows p + slot of `layer` (what scatter_block_kv did from separate buffers).
constexpr int kMaxHeadDim = 128;
constexpr int kHeadWarps = 8;

template <bool kBatched>
__global__ void __launch_bounds__(kHeadWarps * kWarp) qkv_heads_kernel(QkvHeads a) {
  __shared__ float staged[kHeadWarps][kMaxHeadDim];
  let_next_kernel_start();    // the attention's stats sweep may start
  wait_for_previous_kernel();  // after a programmatic launch: the q/k/v GEMM's output is complete
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int heads_per_row = a.heads + 2 * a.kv_heads;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kHeadWarps + warp;
  if (item >= a.rows * heads_per_row) return;
  const int64_t row = item / heads_per_row;
  const int head = static_cast<int>(item % heads_per_row);
  const int hd = a.head_dim;
  const bf16_t* in = a.qkv + item * hd;
  const int request_index = static_cast<int>(row / a.gamma), slot = static_cast<int>(row % a.gamma);
  bf16_t* out;
  if (head < a.heads) {
    out = a.queries + (row * a.heads + head) * hd;
  } else {
    const DeviceBlockRequest request = a.requests[request_index];
    const int kv_head = (head - a.heads) % a.kv_heads;
    const int64_t at = (static_cast<int64_t>(a.layer) * request.capacity + request.length + slot) *
                           (static_cast<int64_t>(a.kv_heads) * hd) + static_cast<int64_t>(kv_head) * hd;
    out = (head < a.heads + a.kv_heads ? request.keys : request.values) + at;
  }
  if (head >= a.heads + a.kv_heads) {  // a value head: copied as is
    for (int i = lane; i < hd; i += kWarp) out[i] = in[i];
    return;
  }
  if constexpr (kBatched) {
    norm_rope_head_batched(in, head < a.heads ? a.q_norm : a.k_norm, hd, a.eps, static_cast<float>(a.positions[row]),
                           a.inv_freq, a.neox, staged[warp], out, lane);
  } else {
    norm_rope_head(in, head < a.heads ? a.q_norm : a.k_norm, hd, a.eps, static_cast<float>(a.positions[row]),
                   a.inv_freq, a.neox, staged[warp], out, lane);
  }
}

// One CTA per row: x = bf16(x + delta) (delta may be null: x as is), then y = rms_norm(x) with the sum of squares
// in double (tree over the CTA).
template <bool kBatched>
__global__ void __launch_bounds__(kRowThreads) residual_norm_kernel(bf16_t* x, const bf16_t* delta, int64_t width,
                                                                    const float* weight, float eps, bf16_t* y) {
  let_next_kernel_start();  // the next GEMM may start loading its weights
  wait_for_previous_kernel();  // after a programmatic launch: x and delta are complete
  __shared__ double partial[kRowThreads / kWarp];
  if constexpr (kBatched) {
    residual_norm_row_batched(x, delta, blockIdx.x, width, weight, eps, y, partial);
  } else {
    residual_norm_row(x, delta, blockIdx.x, width, weight, eps, y, partial);
  }
}

// out [rows, width] = bf16(bf16(silu(gate)) * up) from the stacked gate/up GEMM output [rows, 2 * width].
__global__ void swiglu_stacked_kernel(const bf16_t* gate_up, int64_t rows, int64_t width, bf16_t* out) {
  let_next_kernel_start();  // the next GEMM may start loading its weights
  wait_for_previous_kernel();  // after a programmatic launch: the gate/up GEMM's output is complete
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= rows * width) return;
  const int64_t row = index / width, column = index % width;
  out[index] = swiglu_value(__bfloat162float(gate_up[row * 2 * width + column]),
                            __bfloat162float(gate_up[row * 2 * width + width + column]));
}

}  // namespace

Status qkv_heads(const QkvHeads& args, cudaStream_t stream) {
  if (args.rows == 0) return ok_status();
  if (args.head_dim > kMaxHeadDim || args.head_dim % 2 != 0) {
    return Status(ErrorCode::UnsupportedDraftShape, "qkv_heads takes an even head_dim up to " +
                                                        std::to_string(kMaxHeadDim) + ", not " +
                                                        std::to_string(args.head_dim));
  }
  const int64_t items = args.rows * (args.heads + 2 * args.kv_heads);
  const auto kernel = args.batched ? qkv_heads_kernel<true> : qkv_heads_kernel<false>;
  if (args.programmatic) {
    return ls::cuda::launch_programmatic(kernel, dim3(blocks_for(items, kHeadWarps)), kHeadWarps * kWarp, 0, stream,
                                         args);
  }
  kernel<<<blocks_for(items, kHeadWarps), kHeadWarps * kWarp, 0, stream>>>(args);
  LS_CUDA_TRY_LAUNCH("qkv_heads");
  return ok_status();
}

Status residual_norm(bf16_t* x, const bf16_t* delta, int64_t rows, int64_t width, const float* weight, float eps,
                     bf16_t* y, cudaStream_t stream, bool programmatic, bool batched) {
  if (rows == 0) return ok_status();
  const auto kernel = batched ? residual_norm_kernel<true> : residual_norm_kernel<false>;
  if (programmatic) {
    return ls::cuda::launch_programmatic(kernel, dim3(static_cast<unsigned>(rows)), kRowThreads, 0, stream, x, delta,
                                         width, weight, eps, y);
  }
  kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, delta, width, weight, eps, y);
  LS_CUDA_TRY_LAUNCH("residual_norm");
  return ok_status();
}

Status swiglu_stacked(const bf16_t* gate_up, int64_t rows, int64_t width, bf16_t* out, cudaStream_t stream,
                      bool programmatic) {
  if (rows == 0) return ok_status();
  if (programmatic) {
    return ls::cuda::launch_programmatic(swiglu_stacked_kernel, dim3(blocks_for(rows * width, 256)), 256, 0, stream,
                                         gate_up, rows, width, out);
  }
  swiglu_stacked_kernel<<<blocks_for(rows * width, 256), 256, 0, stream>>>(gate_up, rows, width, out);
  LS_CUDA_TRY_LAUNCH("swiglu_stacked");
  return ok_status();
}

Status embed_tokens(const bf16_t* table, const int32_t* tokens, int64_t rows, int64_t width, bf16_t* out,
                    cudaStream_t stream) {
  if (rows == 0) return ok_status();
  embed_kernel<<<blocks_for(rows * width, 256), 256, 0, stream>>>(table, tokens, rows, width, out);
  LS_CUDA_TRY_LAUNCH("embed_tokens");
  return ok_status();
}

Status round_to_bf16(const float* in, int64_t count, bf16_t* out, cudaStream_t stream) {
  if (count == 0) return ok_status();
  round_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(in, count, out);
  LS_CUDA_TRY_LAUNCH("round_to_bf16");
  return ok_status();
}

Status rms_norm(const bf16_t* x, int64_t rows, int64_t width, const float* weight, float eps, bf16_t* y,
                cudaStream_t stream, bool batched) {
  if (rows == 0) return ok_status();
  constexpr int kWarpsPerBlock = 8;
  // Batched: rows of up to 512 in one batch of 16, up to 2048 held in one of 64 (batch s10B: the absorb's hidden
  // norm 0.0433 -> 0.0400 ms a round against batches of 16), wider in batches of 16.
  const bool holds = width > kWarp * kNormBatch && width <= kWarp * kNormHeld;
  const auto kernel = !batched ? rms_norm_kernel<1> : holds ? rms_norm_kernel<kNormHeld> : rms_norm_kernel<kNormBatch>;
  kernel<<<blocks_for(rows, kWarpsPerBlock), kWarpsPerBlock * kWarp, 0, stream>>>(x, rows, width, weight, eps, y);
  LS_CUDA_TRY_LAUNCH("rms_norm");
  return ok_status();
}

Status rope_rotate(bf16_t* x, int64_t rows, int heads, int head_dim, const int32_t* positions, int64_t first_position,
                   const float* inv_freq, bool neox, cudaStream_t stream) {
  const int64_t count = rows * heads * (head_dim / 2);
  if (count == 0) return ok_status();
  rope_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(x, rows, heads, head_dim, positions, first_position,
                                                          inv_freq, neox);
  LS_CUDA_TRY_LAUNCH("rope_rotate");
  return ok_status();
}

Status add_residual(bf16_t* x, const bf16_t* delta, int64_t count, cudaStream_t stream) {
  if (count == 0) return ok_status();
  add_residual_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(x, delta, count);
  LS_CUDA_TRY_LAUNCH("add_residual");
  return ok_status();
}

Status swiglu(const bf16_t* gate, const bf16_t* up, int64_t count, bf16_t* out, cudaStream_t stream) {
  if (count == 0) return ok_status();
  swiglu_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(gate, up, count, out);
  LS_CUDA_TRY_LAUNCH("swiglu");
  return ok_status();
}

Status scatter_block_kv(const bf16_t* keys, const bf16_t* values, const DeviceBlockRequest* requests, int count,
                        int gamma, int kv_size, int layer, cudaStream_t stream) {
  if (count == 0) return ok_status();
  scatter_kernel<<<count, 256, 0, stream>>>(keys, values, requests, gamma, kv_size, layer);
  LS_CUDA_TRY_LAUNCH("scatter_block_kv");
  return ok_status();
}

BlockAttentionKernel choose_block_attention(int count, int gamma, AttentionDims dims) {
  return block_attention_tile_supported(gamma, dims) ? BlockAttentionKernel::Split : BlockAttentionKernel::Warp;
}

Status block_attention_warp(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                            AttentionDims dims, int layer, bf16_t* out, cudaStream_t stream) {
  if (count == 0) return ok_status();
  const dim3 grid(count * dims.heads), block(gamma * kWarp);
  switch (dims.head_dim) {
    case 16: block_attention_kernel<16><<<grid, block, 0, stream>>>(q, requests, gamma, dims, layer, out); break;
    case 32: block_attention_kernel<32><<<grid, block, 0, stream>>>(q, requests, gamma, dims, layer, out); break;
    case 64: block_attention_kernel<64><<<grid, block, 0, stream>>>(q, requests, gamma, dims, layer, out); break;
    case 128: block_attention_kernel<128><<<grid, block, 0, stream>>>(q, requests, gamma, dims, layer, out); break;
    default:
      return Status(ErrorCode::UnsupportedDraftShape,
                    "block attention takes head_dim 16, 32, 64 or 128, not " + std::to_string(dims.head_dim));
  }
  LS_CUDA_TRY_LAUNCH("block_attention");
  return ok_status();
}

}  // namespace ls::dspark::cuda
