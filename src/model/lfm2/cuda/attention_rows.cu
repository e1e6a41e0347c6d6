// CUDA attention of the target, the scalar row kernel: one CTA per (row, head), three passes with the CPU's roundings
// (kept as the reference and for head_dim the tile kernel does not take).
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

#include <string>

#include "compute/cuda/cuda_util.h"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

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
__global__ void attention_rows_kernel(const bf16* q, const int32_t* row_window, const WindowInfo* windows,
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

}  // namespace

Status attention_rows(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                      const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream) {
  if (shape.head_dim > kMaxHeadDim || shape.head_dim % 8 != 0 || shape.heads % shape.kv_heads != 0)
    return Status(ErrorCode::InvalidArgument, "attention: head_dim " + std::to_string(shape.head_dim) +
                                                  " above 128 or not a multiple of 8, or heads not a multiple of kv_heads");
  if (rows == 0) return ok_status();
  attention_rows_kernel<<<dim3(static_cast<unsigned>(rows), shape.heads), kAttnWarps * 32, 0, stream>>>(
      q, row_window, windows, pages, shape, layer, out);
  LS_CUDA_TRY_LAUNCH("attention rows");
  return ok_status();
}

}  // namespace ls::lfm2::gpu
