// Block attention, row variant (session 12): one CTA per (request, query head, block row) with the split's chunk
// arithmetic (attention_split.cu / attention_head.cu: chunks of L = ceil(keys / chunks) keys, 32-key tiles inside
// each chunk, per-chunk one-sweep stats, the combine in chunk order, each chunk's partial from zero in key order and
// the partials added in chunk order), so the split's bits. Where the head kernel walks a head's 9 rows through one
// chain of CTA-wide steps (one thread runs every key of a row's values, ~22 us a layer at one request), every step
// here is short: a thread per key for the scores, a thread per chunk for the stats, a thread per (chunk, 4 dims) for
// the values' partials (two a thread), a thread per dimension for the chunk-ordered sum. Rows are independent in the
// arithmetic, so the grid is count x heads x gamma CTAs; K / V come from L2 once per row CTA (fine at one request and
// short contexts: 288 CTAs x 2 x 146 keys x 128 B = 11 MB at the 1.2B drafter's context 137).
#include <atomic>
#include <cmath>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/attention_row_steps.cuh"
#include "draft/dspark/cuda/attention_tile.cuh"
#include "draft/dspark/cuda/device_steps.cuh"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {
namespace {

using attention_tiles::add_chunk_tiles;
using attention_tiles::combine_chunk_stats;
using attention_tiles::key_span;
using attention_tiles::KeySpan;
using attention_tiles::load_eight;
using attention_tiles::window_end;

// 256 threads at <= 64 registers: four CTAs an SM, so a 1-stream grid (288 CTAs at the 1.2B drafter) is resident at
// once (512 threads at 128 registers took one CTA an SM: three waves).
constexpr int kRowCtaThreads = 256;
constexpr int kRowWindow = 4096;  // scores a CTA holds (multiple of 32): more keys take several windows
using row_steps::kStageStride;
using row_steps::kValueTasks;

// Staged (session 12; the only variant since session 13): the first kRowStageKeys keys' K and V rows copied into
// shared memory at the start with 16-byte cp.async copies that cover whole lines (a warp's copies 4 lines at a time,
// where a thread per key touches 32 lines a load), rows padded to kHeadDim + 8 (a quarter warp's 16-byte reads of 8
// rows hit 8 bank groups). 3 CTAs an SM: a 1-stream grid is still resident at once.
constexpr int kRowStageKeys = 160;
template <int kHeadDim>
constexpr size_t row_stage_bytes() {
  return sizeof(bf16_t) * 2 * kRowStageKeys * kStageStride<kHeadDim>;
}

struct RowShared {
  float* query;  // [hd]
  float* scores;  // [kRowWindow]
  const bf16_t* staged_keys;    // [staged, stride]
  const bf16_t* staged_values;  // [staged, stride]
  int staged;
};

// The chunk's max and sum of exponentials over its tiles inside [first, last) (thread c < chunks): the split's
// one-sweep stats, the multiply and the adds kept apart as the split's shared-memory steps keep them.
__device__ __forceinline__ void chunk_stats(const float* scores, float* chunk_max, float* chunk_total, int chunks,
                                            int chunk_keys, int key_count, int first, int last) {
  const int c = threadIdx.x;
  if (c >= chunks) return;
  const int begin = min(key_count, c * chunk_keys), end = min(key_count, begin + chunk_keys);
  const int low = max(begin, first), high = min(end, last);
  if (low >= high) return;
  float most = chunk_max[c], total = chunk_total[c];
  add_chunk_tiles(scores - first, low, high, most, total);
  chunk_max[c] = most;
  chunk_total[c] = total;
}

template <int kHeadDim>
__global__ void __launch_bounds__(kRowCtaThreads, 3) attention_row_kernel(const bf16_t* q,
                                                                    const DeviceBlockRequest* requests, int gamma,
                                                                    AttentionDims dims, int layer, int chunks,
                                                                    bf16_t* out, int planted) {
  // The next kernel (the o_proj GEMM, launched programmatic at one request) may start loading its weights; it
  // waits for this grid's completion before reading the outputs.
  let_next_kernel_start();
  constexpr int kEights = kHeadDim / 8, kQuads = kHeadDim / 4;
  __shared__ __align__(16) float query[kHeadDim];
  __shared__ __align__(16) float scores[kRowWindow];
  __shared__ float chunk_max[kMaxSplitChunks], chunk_total[kMaxSplitChunks], row_stats[2];
  __shared__ __align__(16) float partials[kMaxSplitChunks * kHeadDim];
  extern __shared__ __align__(16) bf16_t stage[];  // K rows, then V rows [kRowStageKeys, stride]
  const int r = blockIdx.x % gamma, head = (blockIdx.x / gamma) % dims.heads;
  const int request_index = blockIdx.x / gamma / dims.heads;
  const DeviceBlockRequest request = requests[request_index];
  const KeySpan span = key_span(request, dims, kHeadDim, layer, head, gamma, chunks);
  const bf16_t *keys = span.keys, *values = span.values;
  const int kv_size = span.kv_size, key_count = span.key_count, chunk_keys = span.chunk_keys;
  const int64_t output_row = (static_cast<int64_t>(request_index) * gamma + r) * dims.heads + head;
  if (threadIdx.x < chunks) {
    chunk_max[threadIdx.x] = -INFINITY;
    chunk_total[threadIdx.x] = 0.0f;
  }
  const int staged = min(key_count, kRowStageKeys);
  const RowShared s{query, scores, stage, stage + kRowStageKeys * kStageStride<kHeadDim>, staged};
  // The staged rows' 16-byte pieces, every copy issued before the query loads.
  const int pieces = staged * kEights;
  for (int index = threadIdx.x; index < 2 * pieces; index += blockDim.x) {
    const int which = index / pieces, key = (index % pieces) / kEights, eight = index % kEights;
    const bf16_t* from = (which ? values : keys) + static_cast<int64_t>(key) * kv_size + 8 * eight;
    const unsigned int to = static_cast<unsigned int>(__cvta_generic_to_shared(
        stage + (which * kRowStageKeys + key) * kStageStride<kHeadDim> + 8 * eight));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from) : "memory");
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  if (threadIdx.x < kEights) load_eight(q + output_row * kHeadDim + 8 * threadIdx.x, query + 8 * threadIdx.x);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  // Sweep 1: scores, then each chunk's stats, window by window.
  int windows = 0;
  for (int first = 0, last = 0; first < key_count; first = last, ++windows) {
    last = window_end(first, key_count, chunk_keys, kRowWindow);
    row_steps::score_keys<kHeadDim, kRowCtaThreads>(s.query, s.scores, keys, kv_size, s.staged_keys, s.staged,
                                                     dims.scale, first, last, threadIdx.x);
    __syncthreads();
    chunk_stats(scores, chunk_max, chunk_total, chunks, chunk_keys, key_count, first, last);
    __syncthreads();  // stats read the scores the next window overwrites
  }
  // The row's max and total from the chunks' stats in chunk order (the head kernel's combine, one warp).
  static_assert(kMaxSplitChunks <= 32 && kMaxSplitChunks * kQuads <= kValueTasks * kRowCtaThreads);
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const float most = lane < chunks ? chunk_max[lane] : -INFINITY;
    const float part = lane < chunks ? chunk_total[lane] : 0.0f;
    float largest, total;
    combine_chunk_stats(most, part, largest, total);
    if (lane == 0) {
      row_stats[0] = largest;
      row_stats[1] = total;
    }
  }
  __syncthreads();
  // Sweep 2: probabilities (bf16), then each (chunk, 4 dims) task adds its chunk's keys in key order from zero; a
  // thread's two tasks (chunks c and c + 16) load their next kValueBatch V rows together.
  const float row_max = row_stats[0], row_total = row_stats[1];
  row_steps::ValueTasks tasks = row_steps::value_tasks<kHeadDim, kRowCtaThreads>(threadIdx.x, chunks, chunk_keys,
                                                                                 key_count);
  for (int first = 0, last = 0; first < key_count; first = last) {
    last = window_end(first, key_count, chunk_keys, kRowWindow);
    if (windows > 1) {
      row_steps::score_keys<kHeadDim, kRowCtaThreads>(s.query, s.scores, keys, kv_size, s.staged_keys, s.staged,
                                                      dims.scale, first, last, threadIdx.x);
      __syncthreads();
    }
    for (int j = first + static_cast<int>(threadIdx.x); j < last; j += blockDim.x) {
      scores[j - first] = round_bf16(expf(scores[j - first] - row_max) / row_total);
    }
    __syncthreads();
    row_steps::add_window_values<kHeadDim>(tasks, scores, values, kv_size, s.staged_values, s.staged, first, last);
    __syncthreads();  // the next window's scores overwrite these probabilities
  }
  row_steps::store_partials<kHeadDim>(tasks, partials, chunks);
  __syncthreads();
  if (threadIdx.x < kHeadDim) {
    row_steps::sum_partials<kHeadDim>(partials, chunks, planted, threadIdx.x, out + output_row * kHeadDim);
  }
}

}  // namespace

bool block_attention_row_supported(int gamma, AttentionDims dims) {
  return gamma >= 1 && gamma <= kMaxDeviceBlock && dims.kv_heads > 0 && dims.heads % dims.kv_heads == 0 &&
         (dims.head_dim == 32 || dims.head_dim == 64);
}

Status block_attention_row(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                           AttentionDims dims, int layer, int chunks, bf16_t* out, cudaStream_t stream,
                           bool planted_first_chunk) {
  if (count == 0) return ok_status();
  if (!block_attention_row_supported(gamma, dims)) {
    return attention_tiles::unsupported_attention_shape("row", gamma, dims.head_dim);
  }
  const int used = attention_tiles::used_attention_chunks(count, dims.kv_heads, chunks);
  const dim3 grid(static_cast<unsigned int>(count * dims.heads * gamma));
  const int planted = planted_first_chunk ? 1 : 0;
  auto launch = [&](auto kernel, size_t bytes) -> Status {
    // The stage's dynamic shared memory allowed once (the first launch of a drafter runs eagerly, before any
    // capture).
    static std::atomic<bool> allowed[2];
    if (!allowed[dims.head_dim == 32 ? 0 : 1].exchange(true)) {
      LS_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    }
    kernel<<<grid, kRowCtaThreads, bytes, stream>>>(q, requests, gamma, dims, layer, used, out, planted);
    return ok_status();
  };
  LS_RETURN_IF_ERROR(dims.head_dim == 32 ? launch(attention_row_kernel<32>, row_stage_bytes<32>())
                                         : launch(attention_row_kernel<64>, row_stage_bytes<64>()));
  LS_CUDA_TRY_LAUNCH("block_attention_row");
  return ok_status();
}

}  // namespace ls::dspark::cuda
