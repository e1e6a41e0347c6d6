// CUDA kernels of the target's state: paged KV, attention by absolute key blocks, ShortConv, commit, MoE experts.
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "compute/cuda/cuda_util.h"

namespace ls::lfm2::gpu {
namespace {

__device__ __forceinline__ float load(const bf16* p) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}
__device__ __forceinline__ void store(bf16* p, float v) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v);
}
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Key j of a stream: its row in the page pool.
__device__ __forceinline__ int64_t key_row(const int32_t* pages, int64_t j, int page_size) {
  return static_cast<int64_t>(pages[j / page_size]) * page_size + j % page_size;
}

__global__ void write_kv_kernel(const bf16* k, const bf16* v, int64_t rows, const int32_t* row_window,
                                const WindowInfo* windows, const int32_t* pages, int page_size, int kv_width,
                                bf16* keys, bf16* values) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * kv_width) return;
  const int64_t row = i / kv_width;
  const int e = static_cast<int>(i % kv_width);
  const WindowInfo w = windows[row_window[row]];
  const int64_t position = w.committed + (row - w.first_row);
  const int64_t at = key_row(pages + w.page_begin, position, page_size) * kv_width + e;
  keys[at] = k[row * kv_width + e];
  values[at] = v[row * kv_width + e];
}

constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 128;
constexpr int kKeyStride = kMaxHeadDim + 2;  // bf16 per staged key row: 65 words, so lane l's row starts on bank l

// Stages the 32 rows of block b (keys or values, by absolute position) in shared memory with coalesced 16-byte
// loads; rows at or past key_count are left as they are.
__device__ void stage_block(const bf16* rows, const int32_t* pages, int64_t b, int64_t key_count, int page_size,
                            int kv_width, int kv_head, int hd, bf16 (*buf)[kKeyStride], int lane) {
  const int parts = hd / 8;
  for (int i = lane; i < 32 * parts; i += 32) {
    const int t = i / parts, part = i % parts;
    const int64_t j = b * 32 + t;
    if (j >= key_count) continue;
    const uint4 packed =
        *reinterpret_cast<const uint4*>(rows + key_row(pages, j, page_size) * kv_width + kv_head * hd + part * 8);
    const uint32_t* words = reinterpret_cast<const uint32_t*>(&packed);
    uint32_t* dst = reinterpret_cast<uint32_t*>(&buf[t][part * 8]);
    dst[0] = words[0];
    dst[1] = words[1];
    dst[2] = words[2];
    dst[3] = words[3];
  }
  __syncwarp();
}

// Stages the keys of block b, then lane l computes the score of key 32b + l: a dot over dims in ascending order,
// rounded as the CPU rounds.
__device__ float block_score(const bf16* keys, const int32_t* pages, int64_t b, int64_t key_count, int page_size,
                             int kv_width, int kv_head, int hd, const float* qs, bf16 (*kbuf)[kKeyStride], int lane,
                             float scale) {
  stage_block(keys, pages, b, key_count, page_size, kv_width, kv_head, hd, kbuf, lane);
  float dot = 0.0f;
  if (b * 32 + lane < key_count)
    for (int d = 0; d < hd; ++d) dot = __fmaf_rn(qs[d], load(&kbuf[lane][d]), dot);
  __syncwarp();
  return round_bf16(round_bf16(dot) * scale);
}

// Rows with at most this many keys keep their scores (bf16 values already) in shared memory after pass 1, so
// passes 2 and 3 read them instead of recomputing the same dots; longer rows recompute (same bits either way).
constexpr int kCachedKeys = 4096;

// One CTA per (row, head). Keys in blocks of 32 by absolute position; block b belongs to warp b % 4. Pass 1: max of
// the rounded scores; pass 2: sum of exp (lane order, butterfly, warps in order); pass 3: p rounded, p @ v with keys
// in ascending order inside each warp, warps summed in order.
__global__ void attention_kernel(const bf16* q, const int32_t* row_window, const WindowInfo* windows,
                                 const int32_t* pages, KvShape shape, KvLayer layer, bf16* out) {
  const int64_t row = blockIdx.x;
  const int head = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = shape.head_dim, kv_width = shape.kv_heads * hd;
  const int kv_head = head / (shape.heads / shape.kv_heads);
  const WindowInfo w = windows[row_window[row]];
  const int64_t keys = w.committed + (row - w.first_row) + 1;
  const int32_t* stream_pages = pages + w.page_begin;
  __shared__ float qs[kMaxHeadDim];
  __shared__ float warp_max[kAttnWarps], warp_sum[kAttnWarps];
  __shared__ float partial[kAttnWarps][kMaxHeadDim];
  __shared__ __align__(16) bf16 kbuf[kAttnWarps][32][kKeyStride];
  __shared__ bf16 cached_scores[kCachedKeys];
  const bf16* q_row = q + (row * shape.heads + head) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = load(q_row + d);
  __syncthreads();
  auto score = [&](int64_t b) {
    return block_score(layer.keys, stream_pages, b, keys, shape.page_size, kv_width, kv_head, hd, qs, kbuf[warp],
                       lane, shape.scale);
  };
  const bool cached = keys <= kCachedKeys;  // the same for the whole CTA
  auto kept_score = [&](int64_t b) {
    return cached ? (b * 32 + lane < keys ? load(&cached_scores[b * 32 + lane]) : 0.0f) : score(b);
  };
  const int64_t blocks = (keys + 31) / 32;
  // pass 1: max
  float m = -INFINITY;
  for (int64_t b = warp; b < blocks; b += kAttnWarps) {
    const float s = score(b);
    if (b * 32 + lane < keys) {
      m = fmaxf(m, s);
      if (cached) store(&cached_scores[b * 32 + lane], s);  // s is a bf16 value: stored exactly
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  float max_score = warp_max[0];
  for (int i = 1; i < kAttnWarps; ++i) max_score = fmaxf(max_score, warp_max[i]);
  // pass 2: total
  float sum = 0.0f;
  for (int64_t b = warp; b < blocks; b += kAttnWarps) {
    const float s = kept_score(b);
    if (b * 32 + lane < keys) sum += expf(s - max_score);
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) warp_sum[warp] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kAttnWarps; ++i) total += warp_sum[i];
  // pass 3: p @ v; lane owns dims lane, lane+32, lane+64, lane+96
  float acc[kMaxHeadDim / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = warp; b < blocks; b += kAttnWarps) {
    const float s = kept_score(b);
    const float p = b * 32 + lane < keys ? round_bf16(expf(s - max_score) / total) : 0.0f;
    const int count = static_cast<int>(keys - b * 32 < 32 ? keys - b * 32 : 32);
    // the block's values staged like its keys (coalesced), then summed key by key in ascending order
    stage_block(layer.values, stream_pages, b, keys, shape.page_size, kv_width, kv_head, hd, kbuf[warp], lane);
    for (int t = 0; t < count; ++t) {
      const float pt = __shfl_sync(0xffffffffu, p, t);
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) acc[i] = __fmaf_rn(pt, load(&kbuf[warp][t][d]), acc[i]);
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) partial[warp][d] = acc[i];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < kAttnWarps; ++i) o += partial[i][d];
    store(out + (row * shape.heads + head) * hd + d, o);
  }
}

__global__ void short_conv_kernel(ConvArgs a, const int32_t* row_window, const WindowInfo* windows, bf16* z,
                                  bf16* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.rows * a.width) return;
  const int64_t row = i / a.width;
  const int d = static_cast<int>(i % a.width);
  const int D = a.width, K = a.kernel;
  const WindowInfo w = windows[row_window[row]];
  const int64_t in_window = row - w.first_row;
  const bf16* history = a.history + ((static_cast<int64_t>(w.slot) * a.conv_layers + a.conv_slot) * (K - 1)) * D;
  float sum = 0.0f;
  float own_z = 0.0f;
  for (int tap = 0; tap < K; ++tap) {
    const int64_t source = in_window - (K - 1) + tap;
    float value;
    if (source >= 0) {
      const bf16* bcx = a.bcx + (w.first_row + source) * 3 * D;
      value = round_bf16(load(bcx + d) * load(bcx + 2 * D + d));  // z = B * X, the same bits every time
    } else {
      value = load(history + (K - 1 + source) * D + d);
    }
    if (tap == K - 1) own_z = value;
    sum = __fmaf_rn(a.conv_weight[d * K + tap], value, sum);
  }
  if (a.conv_bias) sum += a.conv_bias[d];
  store(z + row * D + d, own_z);
  const float c = load(a.bcx + row * 3 * D + D + d);
  store(y + row * D + d, c * round_bf16(sum));
}

__global__ void commit_conv_kernel(const ConvCommit* commits, int count, const bf16* z, int64_t z_rows, int width,
                                   int kernel, int conv_layers, bf16* history) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(count) * conv_layers * width) return;
  const int d = static_cast<int>(i % width);
  const int layer = static_cast<int>((i / width) % conv_layers);
  const ConvCommit c = commits[i / (static_cast<int64_t>(width) * conv_layers)];
  const int H = kernel - 1;
  bf16* h = history + ((static_cast<int64_t>(c.slot) * conv_layers + layer) * H) * width;
  const bf16* zl = z + static_cast<int64_t>(layer) * z_rows * width;
  // Ascending rows: row r reads row r + kept (> r) of the old history, never one already written.
  for (int r = 0; r < H; ++r) {
    const int source = c.kept - H + r;
    const bf16 value = source >= 0 ? zl[(c.first_row + static_cast<int64_t>(source)) * width + d]
                                   : h[static_cast<int64_t>(H + source) * width + d];
    h[static_cast<int64_t>(r) * width + d] = value;
  }
}

__global__ void gather_rows_kernel(const bf16* src, const int32_t* index, int64_t n, int width, int divisor,
                                   bf16* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t row = i / width;
  dst[i] = src[static_cast<int64_t>(index[row] / divisor) * width + i % width];
}

// One warp per expert (looping when experts > warps): a ballot scan keeps slot order inside the expert.
__global__ void plan_experts_kernel(const int32_t* chosen, int64_t slot_count, int experts, int32_t* offsets,
                                    int32_t* order) {
  extern __shared__ int32_t counts[];  // [experts]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int e = warp; e < experts; e += warps) {
    int count = 0;
    for (int64_t base = 0; base < slot_count; base += 32) {
      const int64_t s = base + lane;
      const unsigned mask = __ballot_sync(0xffffffffu, s < slot_count && chosen[s] == e);
      count += __popc(mask);
    }
    if (lane == 0) counts[e] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int running = 0;
    for (int e = 0; e < experts; ++e) {
      offsets[e] = running;
      running += counts[e];
      counts[e] = offsets[e];
    }
    offsets[experts] = running;
  }
  __syncthreads();
  for (int e = warp; e < experts; e += warps) {
    int next = counts[e];
    for (int64_t base = 0; base < slot_count; base += 32) {
      const int64_t s = base + lane;
      const bool mine = s < slot_count && chosen[s] == e;
      const unsigned mask = __ballot_sync(0xffffffffu, mine);
      if (mine) order[next + __popc(mask & ((1u << lane) - 1u))] = static_cast<int32_t>(s);
      next += __popc(mask);
    }
  }
}

constexpr int kExpertRows = 16;     // rows of one CTA
constexpr int kExpertWarps = 8;
constexpr int kExpertColsPerWarp = 2;
constexpr int kExpertChunk = 256;   // K elements per chunk: 8 per lane
constexpr int64_t kExpertMaxChunksInFlight = 16;  // row chunks of one expert run side by side (grid z)

// CTA (column block, expert, z) runs the expert's row chunks z, z + gridDim.z, ... (chunks of kExpertRows rows).
__global__ void __launch_bounds__(kExpertWarps * 32) expert_gemm_kernel(const bf16* x, const int32_t* offsets,
                                                                        const bf16* w, int64_t n, int64_t k, bf16* y) {
  const int expert = blockIdx.y;
  const int64_t end = offsets[expert + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kExpertWarps + warp) * kExpertColsPerWarp;
  const bf16* we = w + static_cast<int64_t>(expert) * n * k;
  __shared__ __align__(16) bf16 xs[kExpertRows][kExpertChunk];
  for (int64_t begin = offsets[expert] + static_cast<int64_t>(blockIdx.z) * kExpertRows; begin < end;
       begin += static_cast<int64_t>(gridDim.z) * kExpertRows) {
    const int rows = static_cast<int>(end - begin < kExpertRows ? end - begin : kExpertRows);
    float acc[kExpertColsPerWarp][kExpertRows];
#pragma unroll
    for (int c = 0; c < kExpertColsPerWarp; ++c)
#pragma unroll
      for (int r = 0; r < kExpertRows; ++r) acc[c][r] = 0.0f;
    for (int64_t chunk = 0; chunk < k; chunk += kExpertChunk) {
      __syncthreads();
      for (int i = threadIdx.x; i < kExpertRows * kExpertChunk / 8; i += blockDim.x) {
        const int r = i / (kExpertChunk / 8), e8 = (i % (kExpertChunk / 8)) * 8;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (r < rows && chunk + e8 < k) value = *reinterpret_cast<const uint4*>(x + (begin + r) * k + chunk + e8);
        *reinterpret_cast<uint4*>(&xs[r][e8]) = value;
      }
      __syncthreads();
      const int64_t kk = chunk + lane * 8;
      if (kk >= k) continue;
#pragma unroll
      for (int c = 0; c < kExpertColsPerWarp; ++c) {
        const int64_t col = col0 + c;
        if (col >= n) continue;
        const uint4 packed = *reinterpret_cast<const uint4*>(we + col * k + kk);
        const bf16* wv = reinterpret_cast<const bf16*>(&packed);
        float wf[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) wf[j] = load(wv + j);
#pragma unroll
        for (int r = 0; r < kExpertRows; ++r) {
          if (r < rows) {
            float a = acc[c][r];
#pragma unroll
            for (int j = 0; j < 8; ++j) a = __fmaf_rn(load(&xs[r][lane * 8 + j]), wf[j], a);
            acc[c][r] = a;
          }
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kExpertColsPerWarp; ++c) {
      const int64_t col = col0 + c;
#pragma unroll
      for (int r = 0; r < kExpertRows; ++r) {
        float a = acc[c][r];
        for (int offset = 16; offset > 0; offset >>= 1) a += __shfl_xor_sync(0xffffffffu, a, offset);
        if (lane == 0 && r < rows && col < n) store(y + (begin + r) * n + col, a);
      }
    }
  }
}

__global__ void scatter_weighted_kernel(const bf16* out, const int32_t* order, const float* weights,
                                        int64_t slot_count, int width, bf16* slots) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= slot_count * width) return;
  const int64_t p = i / width;
  const int d = static_cast<int>(i % width);
  const int32_t slot = order[p];
  store(slots + static_cast<int64_t>(slot) * width + d, load(out + i) * weights[slot]);
}

unsigned blocks_for(int64_t count, int threads) { return static_cast<unsigned>((count + threads - 1) / threads); }

}  // namespace

Status write_kv(const bf16* k, const bf16* v, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                const int32_t* pages, const KvShape& shape, KvLayer layer, cudaStream_t stream) {
  const int kv_width = shape.kv_heads * shape.head_dim;
  if (rows == 0) return ok_status();
  write_kv_kernel<<<blocks_for(rows * kv_width, 256), 256, 0, stream>>>(k, v, rows, row_window, windows, pages,
                                                                          shape.page_size, kv_width, layer.keys,
                                                                          layer.values);
  LS_CUDA_TRY_LAUNCH("write_kv");
  return ok_status();
}

Status attention(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                 const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream) {
  if (shape.head_dim > kMaxHeadDim || shape.head_dim % 8 != 0 || shape.heads % shape.kv_heads != 0)
    return Status(ErrorCode::InvalidArgument, "attention: head_dim " + std::to_string(shape.head_dim) +
                                                  " above 128 or not a multiple of 8, or heads not a multiple of kv_heads");
  if (rows == 0) return ok_status();
  attention_kernel<<<dim3(static_cast<unsigned>(rows), shape.heads), kAttnWarps * 32, 0, stream>>>(
      q, row_window, windows, pages, shape, layer, out);
  LS_CUDA_TRY_LAUNCH("attention");
  return ok_status();
}

Status short_conv(const ConvArgs& args, const int32_t* row_window, const WindowInfo* windows, bf16* z, bf16* y,
                  cudaStream_t stream) {
  if (args.rows == 0) return ok_status();
  short_conv_kernel<<<blocks_for(args.rows * args.width, 256), 256, 0, stream>>>(args, row_window, windows, z, y);
  LS_CUDA_TRY_LAUNCH("short_conv");
  return ok_status();
}

Status commit_conv(const ConvCommit* commits, int count, const bf16* z, int64_t z_rows, int width, int kernel,
                   int conv_layers, bf16* history, cudaStream_t stream) {
  if (count == 0 || conv_layers == 0) return ok_status();
  commit_conv_kernel<<<blocks_for(int64_t{count} * conv_layers * width, 256), 256, 0, stream>>>(
      commits, count, z, z_rows, width, kernel, conv_layers, history);
  LS_CUDA_TRY_LAUNCH("commit_conv");
  return ok_status();
}

Status gather_rows(const bf16* src, const int32_t* index, int64_t n, int width, int index_divisor, bf16* dst,
                   cudaStream_t stream) {
  if (n == 0) return ok_status();
  gather_rows_kernel<<<blocks_for(n * width, 256), 256, 0, stream>>>(src, index, n, width, index_divisor, dst);
  LS_CUDA_TRY_LAUNCH("gather_rows");
  return ok_status();
}

Status plan_experts(const int32_t* chosen, int64_t slot_count, int experts, int32_t* offsets, int32_t* order,
                    cudaStream_t stream) {
  const int warps = experts < 32 ? experts : 32;
  plan_experts_kernel<<<1, warps * 32, sizeof(int32_t) * experts, stream>>>(chosen, slot_count, experts, offsets,
                                                                            order);
  LS_CUDA_TRY_LAUNCH("plan_experts");
  return ok_status();
}

Status expert_gemm(const bf16* x, const int32_t* offsets, int experts, int64_t max_rows_per_expert, const bf16* w,
                   int64_t n, int64_t k, bf16* y, cudaStream_t stream) {
  if (k % 8 != 0)
    return Status(ErrorCode::InvalidArgument, "expert_gemm: K " + std::to_string(k) + " is not a multiple of 8");
  if (max_rows_per_expert == 0) return ok_status();
  const int64_t cols_per_cta = kExpertWarps * kExpertColsPerWarp;
  const dim3 grid(static_cast<unsigned>((n + cols_per_cta - 1) / cols_per_cta), static_cast<unsigned>(experts),
                  static_cast<unsigned>(std::min<int64_t>(kExpertMaxChunksInFlight,
                                                          (max_rows_per_expert + kExpertRows - 1) / kExpertRows)));
  expert_gemm_kernel<<<grid, kExpertWarps * 32, 0, stream>>>(x, offsets, w, n, k, y);
  LS_CUDA_TRY_LAUNCH("expert_gemm");
  return ok_status();
}

Status scatter_weighted(const bf16* out, const int32_t* order, const float* weights, int64_t slot_count, int width,
                        bf16* slots, cudaStream_t stream) {
  if (slot_count == 0) return ok_status();
  scatter_weighted_kernel<<<blocks_for(slot_count * width, 256), 256, 0, stream>>>(out, order, weights, slot_count,
                                                                                   width, slots);
  LS_CUDA_TRY_LAUNCH("scatter_weighted");
  return ok_status();
}

}  // namespace ls::lfm2::gpu
