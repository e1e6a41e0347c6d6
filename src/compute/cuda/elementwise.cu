// CUDA row-wise ops over bf16 activations: RMSNorm, residual add, embedding gather, NeoX RoPE, sigmoid
// top-k routing, slot sum, conversions, and the fused residual add + RMSNorm and q/k norm + RoPE. Each rounds where
// the CPU Bf16 mode rounds (src/compute/cpu/*.cpp); each row is computed in a fixed order (wide rows by a CTA, narrow
// ones by a warp, summing alike), so rows never depend on the launch size.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "compute/cuda/head_norm_rope.cuh"
#include "compute/cuda/kernels.h"
#include "compute/cuda/row_gather_norm.h"
#include "compute/cuda/pdl.cuh"
#include "compute/cuda/row_norm.cuh"

namespace ls::cuda {
namespace {

using b16 = __nv_bfloat16;

__device__ __forceinline__ float to_f(b16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
// expf of a float through double: the correctly rounded value in all but vanishing cases (the CPU's glibc expf is
// within 0.502 ulp of it), so the bf16 results match the CPU's.
__device__ __forceinline__ float exp_f(float v) { return static_cast<float>(exp(static_cast<double>(v))); }

// Programmatic launches (pdl.cuh): the row-norm and q/k norm + RoPE kernels are launched to start while the kernel
// before them drains, wait for it before touching activations, and let the next kernel (a decode GEMM staging its
// weights) start at once; every kernel of the chain waits for its predecessor, so completion stays in stream order.

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
  let_next_kernel_start();
  wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    h[i] = __float2bfloat16_rn(__fadd_rn(to_f(h[i]), to_f(delta[i])));
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

// ---- Row kernels with a CTA per row (widths that are multiples of 8, up to kRowThreads * kRowChunks * 8) ----
// Every thread loads its 16-byte chunks of the row (and of the weight, and of delta) before it stores anything, so
// the loads are all in flight at once; the row's values go to shared memory, where warp 0 sums the squares in
// rms_norm_kernel's order (lane l chains elements l, l + 32, ... in double, then the same xor tree); the outputs
// are computed from the registers. Same arithmetic as rms_norm_kernel / add_residual_kernel, bit for bit.
constexpr int kRowThreads = 256;
constexpr int kRowChunks = 4;  // 16-byte chunks per thread: widths up to 8192

union Chunk {
  uint4 raw;
  __nv_bfloat162 pairs[4];
};
__device__ __forceinline__ float chunk_at(const Chunk& c, int e) {
  return e & 1 ? __high2float(c.pairs[e >> 1]) : __low2float(c.pairs[e >> 1]);
}

// inverse_rms of the row held in shared memory `values` [width] fp32, computed by warp 0 (rms_norm_kernel's order).
__device__ __forceinline__ void row_inverse_rms(const float* values, int width, float eps, float* result) {
  if (threadIdx.x < 32) warp_inverse_rms(values, width, eps, result);
}

// y = RMSNorm(row) * weight for one row per CTA; ADD: the row is round(h + delta), written back to h first.
// GATHER: CTA i reads row index[i] (a staged index: loaded before the wait) and writes y row i; h is not written.
// TAP (with ADD): the new h row is also written to tap + row * tap_pitch (a drafter's tap, without a copy node).
template <bool ADD, bool GATHER = false, bool TAP = false>
__global__ void __launch_bounds__(kRowThreads) row_norm_kernel(const b16* x, b16* h, const b16* __restrict__ delta,
                                                               int width, const b16* __restrict__ weight, float eps,
                                                               b16* y, const int32_t* index, b16* tap,
                                                               int64_t tap_pitch) {
  extern __shared__ float row_values[];  // [width]
  __shared__ float inverse_rms;
  let_next_kernel_start();
  const int64_t at = static_cast<int64_t>(GATHER ? index[blockIdx.x] : blockIdx.x) * width;
  const int64_t out_at = static_cast<int64_t>(blockIdx.x) * width;
  const int chunks = width / 8;
  const b16* in = (ADD ? h : x) + at;
  Chunk v[kRowChunks], w[kRowChunks], d[kRowChunks];
#pragma unroll
  for (int c = 0; c < kRowChunks; ++c) {
    const int q = threadIdx.x + c * kRowThreads;
    if (q < chunks) w[c].raw = __ldg(reinterpret_cast<const uint4*>(weight + q * 8));  // weights: no kernel writes them
  }
  wait_for_previous_kernel();
#pragma unroll
  for (int c = 0; c < kRowChunks; ++c) {
    const int q = threadIdx.x + c * kRowThreads;
    if (q < chunks) {
      v[c].raw = *reinterpret_cast<const uint4*>(in + q * 8);
      if constexpr (ADD) d[c].raw = *reinterpret_cast<const uint4*>(delta + at + q * 8);
    }
  }
#pragma unroll
  for (int c = 0; c < kRowChunks; ++c) {
    const int q = threadIdx.x + c * kRowThreads;
    if (q >= chunks) continue;
    if constexpr (ADD) {
      add_chunk(v[c].raw, d[c].raw);
      if constexpr (!GATHER) *reinterpret_cast<uint4*>(h + at + q * 8) = v[c].raw;
      if constexpr (TAP) *reinterpret_cast<uint4*>(tap + blockIdx.x * tap_pitch + q * 8) = v[c].raw;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) row_values[q * 8 + e] = chunk_at(v[c], e);
  }
  __syncthreads();
  row_inverse_rms(row_values, width, eps, &inverse_rms);
  __syncthreads();
  const float inv = inverse_rms;
#pragma unroll
  for (int c = 0; c < kRowChunks; ++c) {
    const int q = threadIdx.x + c * kRowThreads;
    if (q >= chunks) continue;
    *reinterpret_cast<uint4*>(y + out_at + q * 8) = norm_chunk(v[c].raw, w[c].raw, inv);
  }
}

// Whether the CTA-per-row kernels take rows of `width` at these pointers (16-byte chunks, a wide enough row).
bool row_kernel_fits(int width, std::initializer_list<const void*> pointers) {
  if (width % 8 != 0 || width < 256 || width > kRowThreads * kRowChunks * 8) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// ---- Fused per-head q/k RMSNorm + NeoX RoPE: a warp per head (head_norm_rope.cuh), 8 heads per CTA, grid (rows,
// head groups) ----
constexpr int kHeadWarps = 8;

template <int J>
__global__ void __launch_bounds__(32 * kHeadWarps) qk_norm_rope_kernel(QkNormRope a) {
  const int head = blockIdx.y * kHeadWarps + (threadIdx.x >> 5);
  let_next_kernel_start();
  wait_for_previous_kernel();
  if (head >= a.q_heads + a.k_heads) return;
  const int64_t row = blockIdx.x;
  constexpr int hd = 32 * J;
  const bool is_q = head < a.q_heads;
  const int h = is_q ? head : head - a.q_heads;
  const int64_t at = (row * (is_q ? a.q_heads : a.k_heads) + h) * hd;
  head_norm_rope<J>(reinterpret_cast<const b16*>(is_q ? a.q_raw : a.k_raw) + at,
                    reinterpret_cast<const b16*>(is_q ? a.q_weight : a.k_weight), a.eps,
                    static_cast<float>(a.positions[row]), a.inv_freq, reinterpret_cast<b16*>(is_q ? a.q : a.k) + at);
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
  if (rows <= 0x7fffffff && row_kernel_fits(width, {x, weight, y})) {
    return launch_programmatic(row_norm_kernel<false>, dim3(static_cast<unsigned>(rows)), kRowThreads,
                               static_cast<int>(sizeof(float)) * width, stream, dev(x), static_cast<b16*>(nullptr),
                               static_cast<const b16*>(nullptr), width, dev(weight), eps, dev(y),
                               static_cast<const int32_t*>(nullptr), static_cast<b16*>(nullptr), int64_t{0});
  }
  rms_norm_kernel<<<blocks_for(rows, kWarpRows), 32 * kWarpRows, 0, stream>>>(dev(x), rows, width, dev(weight), eps,
                                                                               dev(y));
  return check_launch("rms_norm_kernel");
}

Status add_residual(bf16* h, const bf16* delta, int64_t count, cudaStream_t stream) {
  if (count <= 0) return ok_status();
  return launch_programmatic(add_residual_kernel, dim3(grid_for(count)), 256, 0, stream, dev(h), dev(delta), count);
}

Status add_rms_norm(bf16* h, const bf16* delta, int64_t rows, int width, const bf16* weight, float eps, bf16* y,
                    cudaStream_t stream, bf16* tap, int64_t tap_pitch) {
  if (rows <= 0) return ok_status();
  if (width <= 0) return Status(ErrorCode::InvalidArgument, "add_rms_norm width " + std::to_string(width));
  if (rows > 0x7fffffff || !row_kernel_fits(width, {h, delta, weight, y, tap ? tap : h}) ||
      tap_pitch % 8 != 0) {
    // Rows the CTA kernel does not take: the two launches and the tap's copy (the same bits by definition).
    LS_RETURN_IF_ERROR(add_residual(h, delta, rows * width, stream));
    if (tap)
      LS_CUDA_TRY(cudaMemcpy2DAsync(tap, tap_pitch * sizeof(bf16), h, width * sizeof(bf16), width * sizeof(bf16), rows,
                                    cudaMemcpyDeviceToDevice, stream));
    return rms_norm(h, rows, width, weight, eps, y, stream);
  }
  const int shared = static_cast<int>(sizeof(float)) * width;
  if (tap)
    return launch_programmatic(row_norm_kernel<true, false, true>, dim3(static_cast<unsigned>(rows)), kRowThreads,
                               shared, stream, static_cast<const b16*>(nullptr), dev(h), dev(delta), width,
                               dev(weight), eps, dev(y), static_cast<const int32_t*>(nullptr), dev(tap), tap_pitch);
  return launch_programmatic(row_norm_kernel<true>, dim3(static_cast<unsigned>(rows)), kRowThreads, shared, stream,
                             static_cast<const b16*>(nullptr), dev(h), dev(delta), width, dev(weight), eps, dev(y),
                             static_cast<const int32_t*>(nullptr), static_cast<b16*>(nullptr), int64_t{0});
}

bool gather_rms_norm_fits(int width, const bf16* h, const bf16* delta, const bf16* weight, const bf16* y) {
  return row_kernel_fits(width, {h, delta ? delta : h, weight, y});
}

Status gather_rms_norm(const bf16* h, const bf16* delta, const int32_t* index, int64_t n, int width,
                       const bf16* weight, float eps, bf16* y, cudaStream_t stream, bool fault_no_add_for_test) {
  if (n <= 0) return ok_status();
  if (n > 0x7fffffff || !gather_rms_norm_fits(width, h, delta, weight, y))
    return Status(ErrorCode::InvalidArgument, "gather_rms_norm: width " + std::to_string(width) +
                                                  " (a multiple of 8, 256.." + std::to_string(kRowThreads * kRowChunks * 8) +
                                                  ") and 16-byte aligned rows, rows " + std::to_string(n));
  const int shared = static_cast<int>(sizeof(float)) * width;
  if (delta && !fault_no_add_for_test)
    return launch_programmatic(row_norm_kernel<true, true>, dim3(static_cast<unsigned>(n)), kRowThreads, shared,
                               stream, static_cast<const b16*>(nullptr), const_cast<b16*>(dev(h)), dev(delta), width,
                               dev(weight), eps, dev(y), index, static_cast<b16*>(nullptr), int64_t{0});
  return launch_programmatic(row_norm_kernel<false, true>, dim3(static_cast<unsigned>(n)), kRowThreads, shared, stream,
                             dev(h), static_cast<b16*>(nullptr), static_cast<const b16*>(nullptr), width, dev(weight),
                             eps, dev(y), index, static_cast<b16*>(nullptr), int64_t{0});
}

Status qk_norm_rope(const QkNormRope& args, cudaStream_t stream) {
  if (args.rows <= 0) return ok_status();
  if (args.head_dim <= 0 || args.head_dim % 2 != 0 || args.head_dim > 4096)
    return Status(ErrorCode::InvalidArgument, "qk_norm_rope head_dim " + std::to_string(args.head_dim));
  if (args.rows > 0x7fffffff)
    return Status(ErrorCode::InvalidArgument, "qk_norm_rope: too many rows " + std::to_string(args.rows));
  const int heads = args.q_heads + args.k_heads;
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>((heads + kHeadWarps - 1) / kHeadWarps));
  switch (args.head_dim) {
    case 64: return launch_programmatic(qk_norm_rope_kernel<2>, grid, 32 * kHeadWarps, 0, stream, args);
    case 128: return launch_programmatic(qk_norm_rope_kernel<4>, grid, 32 * kHeadWarps, 0, stream, args);
    case 256: return launch_programmatic(qk_norm_rope_kernel<8>, grid, 32 * kHeadWarps, 0, stream, args);
    default: {
      // Head sizes whose RoPE pairs are not lane-local: the four unfused launches (the same bits by definition).
      const int hd = args.head_dim;
      LS_RETURN_IF_ERROR(rms_norm(args.q_raw, args.rows * args.q_heads, hd, args.q_weight, args.eps, args.q, stream));
      LS_RETURN_IF_ERROR(rms_norm(args.k_raw, args.rows * args.k_heads, hd, args.k_weight, args.eps, args.k, stream));
      LS_RETURN_IF_ERROR(rope_neox(args.q, args.rows, args.q_heads, hd, int64_t{args.q_heads} * hd, args.positions,
                                   args.inv_freq, stream));
      return rope_neox(args.k, args.rows, args.k_heads, hd, int64_t{args.k_heads} * hd, args.positions, args.inv_freq,
                       stream);
    }
  }
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
