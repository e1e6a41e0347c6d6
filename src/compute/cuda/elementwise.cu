// CUDA row-wise ops over bf16 activations: RMSNorm, residual add, SwiGLU, embedding gather, NeoX RoPE, sigmoid
// top-k routing, slot sum, conversions. Each rounds where the CPU Bf16 mode rounds (src/compute/cpu/*.cpp); each
// row is computed by one warp or thread in a fixed order, so rows never depend on the launch size.
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "compute/cuda/kernels.h"

namespace ls::cuda {
namespace {

using b16 = __nv_bfloat16;

__device__ __forceinline__ float to_f(b16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
// expf of a float through double: the correctly rounded value in all but vanishing cases (the CPU's glibc expf is
// within 0.502 ulp of it), so the bf16 results match the CPU's.
__device__ __forceinline__ float exp_f(float v) { return static_cast<float>(exp(static_cast<double>(v))); }

constexpr int kWarpRows = 8;  // rows (warps) per 256-thread block for warp-per-row kernels

int blocks_for(int64_t items, int per_block) { return static_cast<int>((items + per_block - 1) / per_block); }

Status check_launch(const char* what) {
  const cudaError_t error = cudaGetLastError();
  return cuda_status(error, what);
}

// ---- RMSNorm: one warp per row; sum of squares in double, lanes strided then a fixed shuffle tree ----
__global__ void rms_norm_kernel(const b16* x, int64_t rows, int width, const b16* weight, float eps, b16* y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const b16* in = x + row * width;
  b16* out = y + row * width;
  double sum = 0;
  for (int i = lane; i < width; i += 32) {
    const double v = to_f(in[i]);
    sum = __dadd_rn(sum, __dmul_rn(v, v));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  const float mean = static_cast<float>(sum / static_cast<double>(width));
  const float inverse_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  for (int i = lane; i < width; i += 32)
    out[i] = __float2bfloat16_rn(__fmul_rn(to_f(weight[i]), round_bf16(__fmul_rn(to_f(in[i]), inverse_rms))));
}

__global__ void add_residual_kernel(b16* h, const b16* delta, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    h[i] = __float2bfloat16_rn(__fadd_rn(to_f(h[i]), to_f(delta[i])));
}

__global__ void swiglu_kernel(const b16* gate, const b16* up, int64_t rows, int width, int64_t in_stride, b16* out) {
  const int64_t count = rows * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, col = i % width;
    const float g = to_f(gate[row * in_stride + col]);
    const float silu = round_bf16(__fdiv_rn(g, __fadd_rn(1.0f, exp_f(-g))));
    out[i] = __float2bfloat16_rn(__fmul_rn(silu, to_f(up[row * in_stride + col])));
  }
}

__global__ void embed_kernel(const b16* table, int64_t vocab, int hidden, const int32_t* tokens, int64_t n, b16* out) {
  const int64_t row = blockIdx.x;
  if (row >= n) return;
  const int64_t token = tokens[row];
  const bool valid = token >= 0 && token < vocab;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    out[row * hidden + i] = valid ? table[token * hidden + i] : __float2bfloat16_rn(__int_as_float(0x7fc00000));
}

// ---- NeoX RoPE: one block per row, cos/sin of pos * inv_freq (fp32 angle) through double, rounded to bf16 ----
__global__ void rope_kernel(b16* x, int heads, int head_dim, int64_t row_stride, const int64_t* positions,
                            const float* inv_freq) {
  extern __shared__ float table[];  // cos [half], sin [half]
  const int64_t row = blockIdx.x;
  const int half = head_dim / 2;
  const float position = static_cast<float>(positions[row]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(position, inv_freq[i]);
    table[i] = round_bf16(static_cast<float>(cos(static_cast<double>(angle))));
    table[half + i] = round_bf16(static_cast<float>(sin(static_cast<double>(angle))));
  }
  __syncthreads();
  b16* base = x + row * row_stride;
  // Each thread owns a (head, i) pair and rewrites both halves of it, so reads and writes never race.
  for (int pair = threadIdx.x; pair < heads * half; pair += blockDim.x) {
    const int head = pair / half, i = pair % half;
    b16* v = base + static_cast<int64_t>(head) * head_dim;
    const float lo = to_f(v[i]), hi = to_f(v[i + half]);
    const float c = table[i], s = table[half + i];
    // d = i: v*c + (-hi)*s; d = i + half: hi*c + lo*s.
    v[i] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(lo, c)), round_bf16(__fmul_rn(-hi, s))));
    v[i + half] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(hi, c)), round_bf16(__fmul_rn(lo, s))));
  }
}

// ---- Fused: h = round(h + delta), then RMSNorm of the new h (the two kernels' arithmetic, one launch) ----
__global__ void add_rms_norm_kernel(b16* h, const b16* delta, int64_t rows, int width, const b16* weight, float eps,
                                    b16* y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  b16* in = h + row * width;
  const b16* add = delta + row * width;
  b16* out = y + row * width;
  double sum = 0;
  for (int i = lane; i < width; i += 32) {
    const b16 sum_bf16 = __float2bfloat16_rn(__fadd_rn(to_f(in[i]), to_f(add[i])));
    in[i] = sum_bf16;
    const double v = to_f(sum_bf16);
    sum = __dadd_rn(sum, __dmul_rn(v, v));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  const float mean = static_cast<float>(sum / static_cast<double>(width));
  const float inverse_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  for (int i = lane; i < width; i += 32)  // in[i] was written by this lane
    out[i] = __float2bfloat16_rn(__fmul_rn(to_f(weight[i]), round_bf16(__fmul_rn(to_f(in[i]), inverse_rms))));
}

// ---- Fused per-head q/k RMSNorm + NeoX RoPE: one block per row, a warp per head (q heads, then k heads) ----
__global__ void qk_norm_rope_kernel(QkNormRope a) {
  extern __shared__ float table[];  // cos [half], sin [half]
  const int64_t row = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float position = static_cast<float>(a.positions[row]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(position, a.inv_freq[i]);
    table[i] = round_bf16(static_cast<float>(cos(static_cast<double>(angle))));
    table[half + i] = round_bf16(static_cast<float>(sin(static_cast<double>(angle))));
  }
  __syncthreads();
  for (int head = warp; head < a.q_heads + a.k_heads; head += warps) {
    const bool is_q = head < a.q_heads;
    const int h = is_q ? head : head - a.q_heads;
    const int64_t at = (row * (is_q ? a.q_heads : a.k_heads) + h) * hd;
    const b16* in = reinterpret_cast<const b16*>(is_q ? a.q_raw : a.k_raw) + at;
    const b16* weight = reinterpret_cast<const b16*>(is_q ? a.q_weight : a.k_weight);
    b16* v = reinterpret_cast<b16*>(is_q ? a.q : a.k) + at;
    // RMSNorm of the head (rms_norm_kernel's arithmetic with width = head_dim)
    double sum = 0;
    for (int i = lane; i < hd; i += 32) {
      const double x = to_f(in[i]);
      sum = __dadd_rn(sum, __dmul_rn(x, x));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
    const float mean = static_cast<float>(sum / static_cast<double>(hd));
    const float inverse_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.eps)));
    for (int i = lane; i < hd; i += 32)
      v[i] = __float2bfloat16_rn(__fmul_rn(to_f(weight[i]), round_bf16(__fmul_rn(to_f(in[i]), inverse_rms))));
    __syncwarp();
    // RoPE of the normalised head (rope_kernel's arithmetic); each lane owns pairs (i, i + half)
    for (int i = lane; i < half; i += 32) {
      const float lo = to_f(v[i]), hi = to_f(v[i + half]);
      const float c = table[i], s = table[half + i];
      v[i] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(lo, c)), round_bf16(__fmul_rn(-hi, s))));
      v[i + half] = __float2bfloat16_rn(__fadd_rn(round_bf16(__fmul_rn(hi, c)), round_bf16(__fmul_rn(lo, s))));
    }
    __syncwarp();
  }
}

// ---- Routing: one warp per row; scores in shared memory; k rounds of a warp argmax (ties to the lower id) ----
__global__ void route_kernel(const b16* logits, int64_t rows, int experts, int k, bool normalize, float scaling,
                             const float* expert_bias, int32_t* chosen, float* weights) {
  extern __shared__ float shared[];  // per warp: scores [experts], biased [experts]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  if (row >= rows) return;
  float* scores = shared + static_cast<int64_t>(warp) * 2 * experts;
  float* biased = scores + experts;
  for (int e = lane; e < experts; e += 32) {
    const float logit = to_f(logits[row * experts + e]);
    scores[e] = round_bf16(__fdiv_rn(1.0f, __fadd_rn(1.0f, exp_f(-logit))));
    biased[e] = expert_bias ? __fadd_rn(scores[e], expert_bias[e]) : scores[e];
  }
  __syncwarp();
  int32_t* row_chosen = chosen + row * k;
  float* row_weights = weights + row * k;
  for (int slot = 0; slot < k; ++slot) {
    // Lane-local best over e = lane, lane+32, ... (first maximum), then a tree that prefers the lower id on ties.
    int best = -1;
    float best_value = 0.0f;
    for (int e = lane; e < experts; e += 32) {
      const float v = biased[e];
      if (!isnan(v) && (best < 0 || v > best_value)) {
        best = e;
        best_value = v;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const int other = __shfl_xor_sync(0xffffffffu, best, offset);
      const float other_value = __shfl_xor_sync(0xffffffffu, best_value, offset);
      if (other >= 0 && (best < 0 || other_value > best_value || (other_value == best_value && other < best))) {
        best = other;
        best_value = other_value;
      }
    }
    if (lane == 0) {
      row_chosen[slot] = best;
      row_weights[slot] = best >= 0 ? scores[best] : 0.0f;
      if (best >= 0) biased[best] = __int_as_float(0x7fc00000);  // taken: NaN never wins again
    }
    __syncwarp();
  }
  if (lane != 0) return;
  if (normalize) {
    float sum = 0.0f;
    for (int slot = 0; slot < k; ++slot) sum = __fadd_rn(sum, row_weights[slot]);
    const float denominator = round_bf16(__fadd_rn(round_bf16(sum), 1e-6f));
    for (int slot = 0; slot < k; ++slot) row_weights[slot] = round_bf16(__fdiv_rn(row_weights[slot], denominator));
  }
  for (int slot = 0; slot < k; ++slot) row_weights[slot] = round_bf16(__fmul_rn(row_weights[slot], scaling));
}

__global__ void sum_slots_kernel(const b16* slots, int64_t rows, int k, int64_t width, b16* out) {
  const int64_t count = rows * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, col = i % width;
    float sum = 0.0f;
    for (int slot = 0; slot < k; ++slot) sum = __fadd_rn(sum, to_f(slots[(row * k + slot) * width + col]));
    out[i] = __float2bfloat16_rn(sum);
  }
}

__global__ void to_f32_kernel(const b16* in, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = to_f(in[i]);
}

__global__ void to_bf16_kernel(const float* in, int64_t n, b16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

// A grid-stride launch: enough 256-thread blocks to cover `count`, capped (each thread loops).
int grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

const b16* dev(const bf16* p) { return reinterpret_cast<const b16*>(p); }
b16* dev(bf16* p) { return reinterpret_cast<b16*>(p); }

}  // namespace

Status rms_norm(const bf16* x, int64_t rows, int width, const bf16* weight, float eps, bf16* y, cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  if (width <= 0) return Status(ErrorCode::InvalidArgument, "rms_norm width " + std::to_string(width));
  rms_norm_kernel<<<blocks_for(rows, kWarpRows), 32 * kWarpRows, 0, stream>>>(dev(x), rows, width, dev(weight), eps,
                                                                               dev(y));
  return check_launch("rms_norm_kernel");
}

Status add_residual(bf16* h, const bf16* delta, int64_t count, cudaStream_t stream) {
  if (count <= 0) return ok_status();
  add_residual_kernel<<<grid_for(count), 256, 0, stream>>>(dev(h), dev(delta), count);
  return check_launch("add_residual_kernel");
}

Status add_rms_norm(bf16* h, const bf16* delta, int64_t rows, int width, const bf16* weight, float eps, bf16* y,
                    cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  if (width <= 0) return Status(ErrorCode::InvalidArgument, "add_rms_norm width " + std::to_string(width));
  add_rms_norm_kernel<<<blocks_for(rows, kWarpRows), 32 * kWarpRows, 0, stream>>>(dev(h), dev(delta), rows, width,
                                                                                   dev(weight), eps, dev(y));
  return check_launch("add_rms_norm_kernel");
}

Status qk_norm_rope(const QkNormRope& args, cudaStream_t stream) {
  if (args.rows <= 0) return ok_status();
  if (args.head_dim <= 0 || args.head_dim % 2 != 0 || args.head_dim > 4096)
    return Status(ErrorCode::InvalidArgument, "qk_norm_rope head_dim " + std::to_string(args.head_dim));
  if (args.rows > 0x7fffffff)
    return Status(ErrorCode::InvalidArgument, "qk_norm_rope: too many rows " + std::to_string(args.rows));
  qk_norm_rope_kernel<<<static_cast<unsigned>(args.rows), 256, sizeof(float) * args.head_dim, stream>>>(args);
  return check_launch("qk_norm_rope_kernel");
}

Status swiglu(const bf16* gate, const bf16* up, int64_t rows, int width, int64_t in_stride, bf16* out,
              cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return ok_status();
  swiglu_kernel<<<grid_for(rows * width), 256, 0, stream>>>(dev(gate), dev(up), rows, width, in_stride, dev(out));
  return check_launch("swiglu_kernel");
}

Status embed_rows(const bf16* table, int64_t vocab, int hidden, const int32_t* tokens, int64_t n, bf16* out,
                  cudaStream_t stream) {
  if (n <= 0) return ok_status();
  if (n > 0x7fffffff) return Status(ErrorCode::InvalidArgument, "embed_rows: too many rows " + std::to_string(n));
  embed_kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(dev(table), vocab, hidden, tokens, n, dev(out));
  return check_launch("embed_kernel");
}

Status rope_neox(bf16* x, int64_t rows, int heads, int head_dim, int64_t row_stride, const int64_t* positions,
                 const float* inv_freq, cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > 4096)
    return Status(ErrorCode::InvalidArgument, "rope_neox head_dim " + std::to_string(head_dim));
  rope_kernel<<<static_cast<unsigned>(rows), 256, sizeof(float) * head_dim, stream>>>(dev(x), heads, head_dim,
                                                                                      row_stride, positions, inv_freq);
  return check_launch("rope_kernel");
}

Status route_experts(const bf16* router_logits, int64_t rows, int experts, int k, bool normalize, float scaling,
                     const float* expert_bias, int32_t* chosen, float* weights, cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  if (experts <= 0 || experts > 1024 || k <= 0 || k > experts)
    return Status(ErrorCode::InvalidArgument,
                  "route_experts: experts " + std::to_string(experts) + ", k " + std::to_string(k) +
                      " (need 1 <= k <= experts <= 1024)");
  // Rows (warps) per block so the scores stay within the default 48 KiB of shared memory (no opt-in call, so
  // launching inside a graph capture is plain).
  const int rows_per_block = std::clamp(6144 / experts, 1, kWarpRows);
  const size_t shared = sizeof(float) * 2 * experts * rows_per_block;
  route_kernel<<<blocks_for(rows, rows_per_block), 32 * rows_per_block, shared, stream>>>(
      dev(router_logits), rows, experts, k, normalize, scaling, expert_bias, chosen, weights);
  return check_launch("route_kernel");
}

Status sum_slots(const bf16* slots, int64_t rows, int k, int64_t width, bf16* out, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return ok_status();
  sum_slots_kernel<<<grid_for(rows * width), 256, 0, stream>>>(dev(slots), rows, k, width, dev(out));
  return check_launch("sum_slots_kernel");
}

Status bf16_to_f32(const bf16* in, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return ok_status();
  to_f32_kernel<<<grid_for(n), 256, 0, stream>>>(dev(in), n, out);
  return check_launch("to_f32_kernel");
}

Status f32_to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t stream) {
  if (n <= 0) return ok_status();
  to_bf16_kernel<<<grid_for(n), 256, 0, stream>>>(in, n, dev(out));
  return check_launch("to_bf16_kernel");
}

}  // namespace ls::cuda
