// Block attention, grouped row variant (session 19): the row kernel's arithmetic (attention_row.cu: the split's
// chunks of L = ceil(keys / chunks) keys, 32-key tiles, one-sweep stats, the chunk-ordered combine, each chunk's
// partial from zero in key order and the partials added in chunk order, so the split's bits) with the query heads that
// share a KV head in one CTA: kGroupHeads groups of 256 threads, group g the row kernel's CTA for query head
// head_block x kGroupHeads + g. The row kernel's 36 CTAs a KV head (4 heads x 9 rows at the 1.2B drafter) each copy
// the head's K / V from L2 (288 x 35 KB = 10 MB a layer at 137 keys, 29 MB at 393); here each (KV head, row) copies
// them once for its heads (72 CTAs of 1024 threads at group 4: 2.5 MB at 137 keys), and the stage holds up to 512
// keys (the lanes' 1-stream contexts reach ~400; the row kernel's 160 left the rest to per-key L2 loads).
// 3 heads a CTA too (the nano drafter's 6 / 2). Also: the V rows in their own copy group (the scores wait for K only),
// and a group's chunk stats kept in registers by the lanes that combine them (one barrier fewer).
#include <algorithm>
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

constexpr int kGroupThreads = 256;  // a query head's threads (the row kernel's CTA)
constexpr int kGroupWindow = 2048;  // scores a group holds (multiple of 32): more keys take several windows
using row_steps::kStageStride;
using row_steps::kValueTasks;

// K / V rows staged per CTA: 512 at 3 or 4 heads (one CTA an SM, 193 / 209 KB of shared memory at head_dim 64), 256 at
// 2 (two 512-thread CTAs an SM, 105 KB each).
template <int kGroupHeads>
constexpr int group_stage_keys() {
  return kGroupHeads >= 3 ? 512 : 256;
}

// The dynamic shared memory of a CTA, in floats then bf16: partials [G][32][hd], scores [G][window], query [G][hd],
// then the stage (K rows, then V rows) [2][stage keys][stride].
template <int kHeadDim, int kGroupHeads>
constexpr size_t group_float_count() {
  return static_cast<size_t>(kGroupHeads) * (kMaxSplitChunks * kHeadDim + kGroupWindow + kHeadDim);
}
template <int kHeadDim, int kGroupHeads>
constexpr size_t group_shared_bytes() {
  return sizeof(float) * group_float_count<kHeadDim, kGroupHeads>() +
         sizeof(bf16_t) * 2 * group_stage_keys<kGroupHeads>() * kStageStride<kHeadDim>;
}

template <int kHeadDim, int kGroupHeads>
__global__ void __launch_bounds__(kGroupThreads* kGroupHeads, kGroupHeads >= 3 ? 1 : 2)
    attention_row_group_kernel(const bf16_t* q, const DeviceBlockRequest* requests, int gamma, AttentionDims dims,
                               int layer, int chunks, bf16_t* out, int planted) {
  // The o_proj GEMM (launched programmatic at one request) may start loading its weights; it waits for this grid.
  let_next_kernel_start();
  constexpr int kEights = kHeadDim / 8, kQuads = kHeadDim / 4;
  constexpr int kStageKeys = group_stage_keys<kGroupHeads>();
  constexpr int kStride = kStageStride<kHeadDim>;
  extern __shared__ __align__(16) float shared[];
  const int group = threadIdx.x / kGroupThreads, t = threadIdx.x % kGroupThreads;
  float* partials = shared + group * kMaxSplitChunks * kHeadDim;
  float* scores = shared + kGroupHeads * kMaxSplitChunks * kHeadDim + group * kGroupWindow;
  float* query = shared + kGroupHeads * (kMaxSplitChunks * kHeadDim + kGroupWindow) + group * kHeadDim;
  bf16_t* stage = reinterpret_cast<bf16_t*>(shared + group_float_count<kHeadDim, kGroupHeads>());
  bf16_t* staged_keys = stage;
  bf16_t* staged_values = stage + kStageKeys * kStride;
  __shared__ float row_stats[kGroupHeads][2];
  const int r = blockIdx.x % gamma;
  const int head_blocks = dims.heads / kGroupHeads;
  const int head = (blockIdx.x / gamma) % head_blocks * kGroupHeads + group;
  const int request_index = blockIdx.x / gamma / head_blocks;
  const DeviceBlockRequest request = requests[request_index];
  const KeySpan span = key_span(request, dims, kHeadDim, layer, head, gamma, chunks);
  const bf16_t *keys = span.keys, *values = span.values;  // every group's: its heads share the KV head
  const int kv_size = span.kv_size, key_count = span.key_count, chunk_keys = span.chunk_keys;
  const int64_t output_row = (static_cast<int64_t>(request_index) * gamma + r) * dims.heads + head;
  // The staged rows' 16-byte pieces by every thread of the CTA: K's copies, then V's in a second group.
  const int staged = min(key_count, kStageKeys);
  const int pieces = staged * kEights;
  for (int which = 0; which < 2; ++which) {
    const bf16_t* from_rows = which ? values : keys;
    bf16_t* to_rows = which ? staged_values : staged_keys;
    for (int index = threadIdx.x; index < pieces; index += blockDim.x) {
      const int key = index / kEights, eight = index % kEights;
      const bf16_t* from = from_rows + static_cast<int64_t>(key) * kv_size + 8 * eight;
      const unsigned int to =
          static_cast<unsigned int>(__cvta_generic_to_shared(to_rows + key * kStride + 8 * eight));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from) : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  if (t < kEights) load_eight(q + output_row * kHeadDim + 8 * t, query + 8 * t);
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // this thread's K copies (V may still be on the way)
  __syncthreads();
  // Sweep 1: scores, then each chunk's stats (lane c of the group's first warp holds chunk c's), window by window.
  float chunk_most = -INFINITY, chunk_total = 0.0f;
  int windows = 0;
  for (int first = 0, last = 0; first < key_count; first = last, ++windows) {
    last = window_end(first, key_count, chunk_keys, kGroupWindow);
    row_steps::score_keys<kHeadDim, kGroupThreads>(query, scores, keys, kv_size, staged_keys, staged, dims.scale,
                                                   first, last, t);
    __syncthreads();
    if (t < chunks) {
      const int begin = min(key_count, t * chunk_keys), end = min(key_count, begin + chunk_keys);
      const int low = max(begin, first), high = min(end, last);
      if (low < high) add_chunk_tiles(scores - first, low, high, chunk_most, chunk_total);
    }
    if (last < key_count) __syncthreads();  // the stats read the scores the next window overwrites
  }
  // The row's max and total from the chunks' stats in chunk order (the row kernel's combine, the same warp).
  static_assert(kMaxSplitChunks <= 32 && kMaxSplitChunks * kQuads <= kValueTasks * kGroupThreads);
  if (t < 32) {
    const float most = t < chunks ? chunk_most : -INFINITY;
    const float part = t < chunks ? chunk_total : 0.0f;
    float largest, total;
    combine_chunk_stats(most, part, largest, total);
    if (t == 0) {
      row_stats[group][0] = largest;
      row_stats[group][1] = total;
    }
  }
  __syncthreads();
  // Sweep 2: probabilities (bf16), then each (chunk, 4 dims) task adds its chunk's keys in key order from zero; a
  // thread's two tasks (chunks c and c + 16) load their next kValueBatch V rows together.
  const float row_max = row_stats[group][0], row_total = row_stats[group][1];
  row_steps::ValueTasks tasks = row_steps::value_tasks<kHeadDim, kGroupThreads>(t, chunks, chunk_keys, key_count);
  for (int first = 0, last = 0; first < key_count; first = last) {
    last = window_end(first, key_count, chunk_keys, kGroupWindow);
    if (windows > 1) {
      row_steps::score_keys<kHeadDim, kGroupThreads>(query, scores, keys, kv_size, staged_keys, staged, dims.scale,
                                                     first, last, t);
      __syncthreads();
    }
    for (int j = first + t; j < last; j += kGroupThreads) {
      scores[j - first] = round_bf16(expf(scores[j - first] - row_max) / row_total);
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");  // this thread's V copies, before the barrier
    __syncthreads();
    row_steps::add_window_values<kHeadDim>(tasks, scores, values, kv_size, staged_values, staged, first, last);
    __syncthreads();  // the next window's scores overwrite these probabilities
  }
  row_steps::store_partials<kHeadDim>(tasks, partials, chunks);
  __syncthreads();
  if (t < kHeadDim) row_steps::sum_partials<kHeadDim>(partials, chunks, planted, t, out + output_row * kHeadDim);
}

// The kernel's dynamic shared memory allowed once per head size and group (from the support check, outside any
// capture, or at the first launch).
template <int kHeadDim, int kGroupHeads>
Status allow_group() {
  static std::atomic<bool> allowed{false};
  if (allowed.load()) return ok_status();
  LS_CUDA_TRY(cudaFuncSetAttribute(attention_row_group_kernel<kHeadDim, kGroupHeads>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(group_shared_bytes<kHeadDim, kGroupHeads>())));
  allowed.store(true);
  return ok_status();
}

Status allow_group_shared(int head_dim, int group_heads) {
  if (group_heads == 2) return head_dim == 32 ? allow_group<32, 2>() : allow_group<64, 2>();
  if (group_heads == 3) return head_dim == 32 ? allow_group<32, 3>() : allow_group<64, 3>();
  return head_dim == 32 ? allow_group<32, 4>() : allow_group<64, 4>();
}

template <int kHeadDim, int kGroupHeads>
Status launch_group(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma, AttentionDims dims,
                    int layer, int chunks, bf16_t* out, cudaStream_t stream, int planted) {
  LS_RETURN_IF_ERROR((allow_group<kHeadDim, kGroupHeads>()));
  const dim3 grid(static_cast<unsigned int>(count * (dims.heads / kGroupHeads) * gamma));
  attention_row_group_kernel<kHeadDim, kGroupHeads>
      <<<grid, kGroupThreads * kGroupHeads, group_shared_bytes<kHeadDim, kGroupHeads>(), stream>>>(
          q, requests, gamma, dims, layer, chunks, out, planted);
  LS_CUDA_TRY_LAUNCH("block_attention_row_group");
  return ok_status();
}

// The shared memory a CTA needs, 0 for a group it is not built for.
size_t group_bytes(int head_dim, int group_heads) {
  if (group_heads == 2) return head_dim == 32 ? group_shared_bytes<32, 2>() : group_shared_bytes<64, 2>();
  if (group_heads == 3) return head_dim == 32 ? group_shared_bytes<32, 3>() : group_shared_bytes<64, 3>();
  if (group_heads == 4) return head_dim == 32 ? group_shared_bytes<32, 4>() : group_shared_bytes<64, 4>();
  return 0;
}

// Whether the kernel is built for `group_heads` query heads a CTA and they share one KV head.
bool group_shape_taken(int gamma, AttentionDims dims, int group_heads) {
  return block_attention_row_supported(gamma, dims) && group_heads >= 2 && group_heads <= 4 &&
         (dims.heads / dims.kv_heads) % group_heads == 0;
}

}  // namespace

bool block_attention_row_group_supported(int gamma, AttentionDims dims, int group_heads) {
  if (!group_shape_taken(gamma, dims, group_heads)) return false;
  // The device's opt-in shared memory a CTA, asked once per device (the drafter asks first when the switch is set,
  // outside any capture).
  constexpr int kDevices = 16;
  static std::atomic<int> most_bytes[kDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) {
    cudaGetLastError();
    return false;
  }
  if (most_bytes[device].load() == 0) {
    int most = 0;
    if (cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    most_bytes[device].store(std::max(most, 1));
  }
  // Static shared memory (the row stats) on top of the dynamic layout.
  if (group_bytes(dims.head_dim, group_heads) + 64 > static_cast<size_t>(most_bytes[device].load())) return false;
  return allow_group_shared(dims.head_dim, group_heads).ok();
}

Status block_attention_row_group(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                                 AttentionDims dims, int layer, int chunks, int group_heads, bf16_t* out,
                                 cudaStream_t stream, bool planted_first_chunk) {
  if (count == 0) return ok_status();
  if (!group_shape_taken(gamma, dims, group_heads)) {
    return Status(ErrorCode::UnsupportedDraftShape,
                  "the grouped row attention kernel does not take block " + std::to_string(gamma) + " at head_dim " +
                      std::to_string(dims.head_dim) + " with " + std::to_string(group_heads) + " of " +
                      std::to_string(dims.kv_heads > 0 ? dims.heads / dims.kv_heads : 0) + " query heads a KV head");
  }
  const int used = attention_tiles::used_attention_chunks(count, dims.kv_heads, chunks);
  const int planted = planted_first_chunk ? 1 : 0;
  if (group_heads == 2) {
    return dims.head_dim == 32 ? launch_group<32, 2>(q, requests, count, gamma, dims, layer, used, out, stream, planted)
                               : launch_group<64, 2>(q, requests, count, gamma, dims, layer, used, out, stream, planted);
  }
  if (group_heads == 3) {
    return dims.head_dim == 32 ? launch_group<32, 3>(q, requests, count, gamma, dims, layer, used, out, stream, planted)
                               : launch_group<64, 3>(q, requests, count, gamma, dims, layer, used, out, stream, planted);
  }
  return dims.head_dim == 32 ? launch_group<32, 4>(q, requests, count, gamma, dims, layer, used, out, stream, planted)
                             : launch_group<64, 4>(q, requests, count, gamma, dims, layer, used, out, stream, planted);
}

}  // namespace ls::dspark::cuda
