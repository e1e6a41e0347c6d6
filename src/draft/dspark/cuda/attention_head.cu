// Block attention, head variant (session 9): one CTA per (request, query head) over every key of its request, with
// the split's chunk arithmetic (attention_split.cu: the same chunks of L = ceil(keys / chunks) keys, the same 32-key
// tiles inside each chunk, the same per-chunk stats, the same combine and the same chunk-ordered sum of partials), so
// the split's bits, in one launch with no barrier between CTAs and no global round trip: the scores are computed once
// into shared memory (twice when the keys do not fit one window, as the split does), the stats of each (row, chunk)
// by one thread, the values in key order per output with the chunks' partials added as each chunk ends.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/attention_tile.cuh"
#include "draft/dspark/cuda/device_steps.cuh"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {
namespace {

using attention_tiles::add_chunk_tiles;
using attention_tiles::combine_chunk_stats;
using attention_tiles::key_span;
using attention_tiles::KeySpan;
using attention_tiles::kTileKeys;
using attention_tiles::load_eight;
using attention_tiles::window_end;

constexpr int kHeadThreads = 256;
// K (or V) rows staged in shared memory at a time: 128 (session 9) or 256 (session 10: up to 247 context rows at
// block 9 in one trip each; a template parameter, the same bits).
constexpr int kStageKeys = 128;
constexpr int kWindowFloats = 8192;  // scores a CTA holds: [gamma, window], window = this / gamma (multiple of 32)
constexpr int kMaxGroupRows = 10;    // query rows one thread scores against its key (each key read once per group)
constexpr int kMaxQuadsPerThread = 2;  // 4-dim output quads a thread accumulates: gamma x head_dim / 4 <= 512

// Everything one CTA works on (floats, in this order): its queries [gamma, hd], a K/V stage [kStageKeys, hd + 4]
// (16-byte rows; lanes walking keys hit every bank once per quarter warp), scores [gamma, window + 1] (the odd
// stride spreads rows over banks), per (row, chunk) max and total [gamma, chunks] each, per row max and total [gamma]
// each.
struct HeadShared {
  float* query;
  float* stage;
  float* scores;
  float* chunk_max;
  float* chunk_total;
  float* row_max;
  float* row_total;
};

__host__ __device__ inline size_t head_shared_floats(int gamma, int head_dim, int chunks, int window, int stage) {
  return static_cast<size_t>(gamma) * head_dim + static_cast<size_t>(stage) * (head_dim + 4) +
         static_cast<size_t>(gamma) * (window + 1) + 2 * static_cast<size_t>(gamma) * chunks +
         2 * static_cast<size_t>(gamma);
}

// Rows [piece, piece + count) of a [keys, kv_size] cache slice into the stage: every 16-byte load a thread makes
// issued before the first store (the stores could alias the loads, so a load-store loop waits out each load in turn).
template <int kHeadDim, int kStage>
__device__ __forceinline__ void stage_rows(float* stage, const bf16_t* from, int kv_size, int piece, int count) {
  constexpr int kStride = kHeadDim + 4, kEights = kHeadDim / 8;
  constexpr int kLoads = kStage * kEights / kHeadThreads;  // blockDim.x == kHeadThreads
  uint4 raw[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int index = threadIdx.x + k * kHeadThreads;
    if (index < count * kEights) {
      const int j = index / kEights, c8 = (index % kEights) * 8;
      raw[k] = *reinterpret_cast<const uint4*>(from + static_cast<int64_t>(piece + j) * kv_size + c8);
    }
  }
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int index = threadIdx.x + k * kHeadThreads;
    if (index < count * kEights) {
      const int j = index / kEights, c8 = (index % kEights) * 8;
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[k]);
      const float2 a = __bfloat1622float2(pairs[0]), b = __bfloat1622float2(pairs[1]);
      const float2 c = __bfloat1622float2(pairs[2]), d = __bfloat1622float2(pairs[3]);
      float4* to = reinterpret_cast<float4*>(stage + j * kStride + c8);
      to[0] = make_float4(a.x, a.y, b.x, b.y);
      to[1] = make_float4(c.x, c.y, d.x, d.y);
    }
  }
}

// scores [r, k - first] = bf16(bf16(q_r . key_k) x scale) for keys [first, last): the split's score arithmetic
// (fp32 products added in dimension order from zero), a thread per (key, group of rows) reading its key four
// dimensions at a time, the keys staged kStage at a time.
template <int kHeadDim, int kStage>
__device__ __forceinline__ void score_window(const HeadShared& s, const bf16_t* keys, int kv_size, int gamma,
                                             int stride, float scale, int first, int last) {
  constexpr int kStride = kHeadDim + 4;
  const int groups = (gamma + kMaxGroupRows - 1) / kMaxGroupRows;
  const int group_rows = (gamma + groups - 1) / groups;
  for (int piece = first; piece < last; piece += kStage) {
    const int count = min(kStage, last - piece);
    __syncthreads();  // the stage's last readers are done
    stage_rows<kHeadDim, kStage>(s.stage, keys, kv_size, piece, count);
    __syncthreads();
    for (int task = threadIdx.x; task < groups * count; task += blockDim.x) {
      const int group = task / count, j = task % count;
      const int r0 = group * group_rows, rows = min(gamma - r0, group_rows);
      float sum[kMaxGroupRows];
#pragma unroll
      for (int i = 0; i < kMaxGroupRows; ++i) sum[i] = 0.0f;
      const float* key = s.stage + j * kStride;
#pragma unroll 4
      for (int dim = 0; dim < kHeadDim; dim += 4) {
        const float4 k = *reinterpret_cast<const float4*>(key + dim);
#pragma unroll
        for (int i = 0; i < kMaxGroupRows; ++i) {
          if (i < rows) {
            const float4 q = *reinterpret_cast<const float4*>(s.query + (r0 + i) * kHeadDim + dim);
            sum[i] += q.x * k.x;
            sum[i] += q.y * k.y;
            sum[i] += q.z * k.z;
            sum[i] += q.w * k.w;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kMaxGroupRows; ++i) {
        if (i < rows) s.scores[(r0 + i) * stride + (piece - first) + j] = round_bf16(round_bf16(sum[i]) * scale);
      }
    }
  }
  __syncthreads();
}

// Each (row, chunk)'s max and sum of exponentials over the chunk's tiles inside [first, last), one thread each: the
// split's one-sweep stats (per tile: the max so far, the total rescaled to it, the tile's exponentials added in key
// order), the multiply and the adds kept apart as the split's shared-memory steps keep them.
__device__ __forceinline__ void window_stats(const HeadShared& s, int gamma, int chunks, int chunk_keys,
                                             int key_count, int stride, int first, int last) {
  for (int index = threadIdx.x; index < gamma * chunks; index += blockDim.x) {
    const int r = index / chunks, c = index % chunks;
    const int begin = min(key_count, c * chunk_keys), end = min(key_count, begin + chunk_keys);
    const int low = max(begin, first), high = min(end, last);
    if (low >= high) continue;
    float most = s.chunk_max[index], total = s.chunk_total[index];
    add_chunk_tiles(s.scores + r * stride - first, low, high, most, total);
    s.chunk_max[index] = most;
    s.chunk_total[index] = total;
  }
}

template <int kHeadDim, int kQuadsPerThread, int kStage>
__global__ void __launch_bounds__(kHeadThreads, 2) attention_head_kernel(const bf16_t* q,
                                                                      const DeviceBlockRequest* requests, int gamma,
                                                                      AttentionDims dims, int layer, int chunks,
                                                                      int window, bf16_t* out) {
  // The next kernel (the o_proj GEMM, launched programmatic at one request) may start loading its weights on the SMs
  // this grid leaves idle; it waits for this grid's completion before reading the outputs.
  let_next_kernel_start();
  extern __shared__ float4 shared_quads[];
  constexpr int kStride = kHeadDim + 4, kEights = kHeadDim / 8, kQuads = kHeadDim / 4;
  const int stride = window + 1;
  HeadShared s;
  s.query = reinterpret_cast<float*>(shared_quads);
  s.stage = s.query + gamma * kHeadDim;  // 16-byte aligned: gamma * hd is a multiple of 4
  s.scores = s.stage + kStage * kStride;
  s.chunk_max = s.scores + gamma * stride;
  s.chunk_total = s.chunk_max + gamma * chunks;
  s.row_max = s.chunk_total + gamma * chunks;
  s.row_total = s.row_max + gamma;
  const int request_index = blockIdx.x / dims.heads, head = blockIdx.x % dims.heads;
  const KeySpan span = key_span(requests[request_index], dims, kHeadDim, layer, head, gamma, chunks);
  const bf16_t *keys = span.keys, *values = span.values;
  const int kv_size = span.kv_size, key_count = span.key_count, chunk_keys = span.chunk_keys;
  auto output_row = [&](int r) { return (static_cast<int64_t>(request_index) * gamma + r) * dims.heads + head; };
  for (int index = threadIdx.x; index < gamma * kEights; index += blockDim.x) {
    const int r = index / kEights, d8 = (index % kEights) * 8;
    float eight[8];
    load_eight(q + output_row(r) * kHeadDim + d8, eight);
#pragma unroll
    for (int i = 0; i < 8; ++i) s.query[r * kHeadDim + d8 + i] = eight[i];
  }
  for (int index = threadIdx.x; index < gamma * chunks; index += blockDim.x) {
    s.chunk_max[index] = -INFINITY;
    s.chunk_total[index] = 0.0f;
  }
  // Sweep 1: scores, then each (row, chunk)'s stats, window by window (score_window's first barrier publishes the
  // queries and the cleared stats).
  int windows = 0;
  for (int first = 0, last = 0; first < key_count; first = last, ++windows) {
    last = window_end(first, key_count, chunk_keys, window);
    score_window<kHeadDim, kStage>(s, keys, kv_size, gamma, stride, dims.scale, first, last);
    window_stats(s, gamma, chunks, chunk_keys, key_count, stride, first, last);
    __syncthreads();  // stats read the scores the next window overwrites
  }
  // The row's max and total from its chunks' stats in chunk order (the split's combine), a warp per row.
  static_assert(kMaxSplitChunks <= 32);
  for (int r = threadIdx.x / 32; r < gamma; r += blockDim.x / 32) {
    const int lane = threadIdx.x % 32;
    const float most = lane < chunks ? s.chunk_max[r * chunks + lane] : -INFINITY;
    const float part = lane < chunks ? s.chunk_total[r * chunks + lane] : 0.0f;
    float largest, total;
    combine_chunk_stats(most, part, largest, total);
    if (lane == 0) {
      s.row_max[r] = largest;
      s.row_total[r] = total;
    }
  }
  __syncthreads();
  // Sweep 2: probabilities (bf16) times values, a thread per (row, 4 dims): per output the chunk's partial from
  // zero in key order, added to the output's sum (from zero, chunk order) when the chunk ends. (Chunks past the last
  // key hold no key: their zero partials would not change the sum.)
  const int tasks = gamma * kQuads;
  float partial[kQuadsPerThread][4], sum[kQuadsPerThread][4];
#pragma unroll
  for (int t = 0; t < kQuadsPerThread; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[t][i] = sum[t][i] = 0.0f;
  }
  int chunk_end = chunk_keys;
  for (int first = 0, last = 0; first < key_count; first = last) {
    last = window_end(first, key_count, chunk_keys, window);
    if (windows > 1) {
      score_window<kHeadDim, kStage>(s, keys, kv_size, gamma, stride, dims.scale, first, last);
    }
    const int span = last - first;
    for (int index = threadIdx.x; index < gamma * span; index += blockDim.x) {
      const int r = index / span, j = index % span;
      float* score = &s.scores[r * stride + j];
      *score = round_bf16(expf(*score - s.row_max[r]) / s.row_total[r]);
    }
    for (int piece = first; piece < last; piece += kStage) {
      const int count = min(kStage, last - piece);
      __syncthreads();  // the probabilities are written and the stage's last readers are done
      stage_rows<kHeadDim, kStage>(s.stage, values, kv_size, piece, count);
      __syncthreads();
      for (int key = piece; key < piece + count;) {
        const int stop = min(piece + count, chunk_end);
#pragma unroll
        for (int t = 0; t < kQuadsPerThread; ++t) {
          const int task = threadIdx.x + t * blockDim.x;
          if (task >= tasks) break;
          const int r = task / kQuads, d4 = (task % kQuads) * 4;
          const float* probability = s.scores + r * stride - first;
          float a = partial[t][0], b = partial[t][1], c = partial[t][2], d = partial[t][3];
#pragma unroll 4
          for (int j = key; j < stop; ++j) {
            const float p = probability[j];
            const float4 v = *reinterpret_cast<const float4*>(s.stage + (j - piece) * kStride + d4);
            a += p * v.x;
            b += p * v.y;
            c += p * v.z;
            d += p * v.w;
          }
          partial[t][0] = a;
          partial[t][1] = b;
          partial[t][2] = c;
          partial[t][3] = d;
        }
        key = stop;
        if (key == chunk_end) {
#pragma unroll
          for (int t = 0; t < kQuadsPerThread; ++t) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              sum[t][i] += partial[t][i];
              partial[t][i] = 0.0f;
            }
          }
          chunk_end += chunk_keys;
        }
      }
    }
    __syncthreads();  // the next window's scores overwrite these probabilities
  }
#pragma unroll
  for (int t = 0; t < kQuadsPerThread; ++t) {
    const int task = threadIdx.x + t * blockDim.x;
    if (task >= tasks) break;
    const int r = task / kQuads, d4 = (task % kQuads) * 4;
    bf16_t* to = out + output_row(r) * kHeadDim + d4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      to[i] = __float2bfloat16_rn(sum[t][i] + partial[t][i]);  // the last chunk's partial when it ended short
    }
  }
}

int head_window(int gamma) { return std::max(kTileKeys, kWindowFloats / gamma / kTileKeys * kTileKeys); }

}  // namespace

bool block_attention_head_supported(int gamma, AttentionDims dims) {
  return gamma >= 1 && gamma <= kMaxDeviceBlock && dims.kv_heads > 0 && dims.heads % dims.kv_heads == 0 &&
         (dims.head_dim == 32 || dims.head_dim == 64) &&
         gamma * dims.head_dim / 4 <= kHeadThreads * kMaxQuadsPerThread;
}

Status block_attention_head(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                            AttentionDims dims, int layer, int chunks, bf16_t* out, cudaStream_t stream,
                            int stage_keys) {
  if (count == 0) return ok_status();
  if (!block_attention_head_supported(gamma, dims)) {
    return attention_tiles::unsupported_attention_shape("head", gamma, dims.head_dim);
  }
  const int used = attention_tiles::used_attention_chunks(count, dims.kv_heads, chunks);
  const int window = head_window(gamma);
  if (stage_keys != kStageKeys && stage_keys != 2 * kStageKeys) {
    return Status(ErrorCode::InvalidArgument, "head attention stages of " + std::to_string(stage_keys) +
                                                  " keys (128 or 256)");
  }
  const bool wide = stage_keys == 2 * kStageKeys;
  const size_t bytes = sizeof(float) * head_shared_floats(gamma, dims.head_dim, used, window, stage_keys);
  const int threads = kHeadThreads;
  const dim3 grid(static_cast<unsigned int>(count * dims.heads));
  // The shared-memory limit raised once per head size to the most asked so far (the first launch of a shape runs
  // eagerly, before any capture of it).
  static std::atomic<size_t> allowed[8];
  auto launch = [&](auto kernel) -> Status {
    std::atomic<size_t>& limit = allowed[(dims.head_dim == 32 ? 0 : 1) +
                                         (gamma * dims.head_dim / 4 <= kHeadThreads ? 0 : 2) + (wide ? 4 : 0)];
    if (bytes > limit.load()) {
      LS_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      limit.store(bytes);
    }
    kernel<<<grid, threads, bytes, stream>>>(q, requests, gamma, dims, layer, used, window, out);
    LS_CUDA_TRY_LAUNCH("block_attention_head");
    return ok_status();
  };
  // One 4-dim output quad a thread where gamma x head_dim / 4 fits the CTA (the 1.2B drafter's 9 x 16), else two.
  constexpr int kWide = 2 * kStageKeys;
  if (gamma * dims.head_dim / 4 <= kHeadThreads) {
    if (wide) {
      return dims.head_dim == 32 ? launch(attention_head_kernel<32, 1, kWide>)
                                 : launch(attention_head_kernel<64, 1, kWide>);
    }
    return dims.head_dim == 32 ? launch(attention_head_kernel<32, 1, kStageKeys>)
                               : launch(attention_head_kernel<64, 1, kStageKeys>);
  }
  if (wide) {
    return dims.head_dim == 32 ? launch(attention_head_kernel<32, 2, kWide>)
                               : launch(attention_head_kernel<64, 2, kWide>);
  }
  return dims.head_dim == 32 ? launch(attention_head_kernel<32, 2, kStageKeys>)
                             : launch(attention_head_kernel<64, 2, kStageKeys>);
}

}  // namespace ls::dspark::cuda
