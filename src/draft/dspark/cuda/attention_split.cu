// Block attention, split variant: the tile CTA (attention_tile.cu) spread over key chunks so that few requests still
// fill the device: per-chunk stats, then per-chunk probabilities times values, then the chunks' partials added in
// chunk order; three launches, or (session 7) one cooperative launch with a barrier of each (request, KV head)'s
// chunk CTAs between the phases: the same arithmetic in the same order, so the same bits. Session 8: each variant
// also with its loads batched (SplitAttentionScratch::batched_loads), again the same bits.
#include <algorithm>
#include <cmath>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/device_steps.cuh"

#include "draft/dspark/cuda/attention_tile.cuh"

namespace ls::dspark::cuda {
namespace {

using namespace attention_tiles;

// Split: the CTA (request, KV head, chunk) sweeps keys [begin, end) of its chunk in 32-key tiles (16-byte loads).
// kValues false: the chunk's row max and sum of exponentials in one sweep (the total rescaled whenever a tile raises
// the max) -> stats. kValues true: the row's max and total from every chunk's stats (total = sum over chunks in
// order of t_c exp(m_c - max)), then the probabilities (rounded to bf16) times values over the chunk -> partials.
// The stats are read through L2 (the cooperative kernel reads what other CTAs of its own launch wrote).
// kResident (the one-launch kernel with batched loads): the two sweeps run in one CTA, so a chunk of at most one
// tile keeps its queries, keys and values in shared memory from the stats sweep (which loads the values too) to the
// values sweep, which then loads nothing but the stats.
template <int kHeadDim, bool kValues, bool kBatched, bool kResident = false>
__device__ __forceinline__ void split_chunk_sweep(const bf16_t* q, const DeviceBlockRequest* requests, int gamma,
                                                  AttentionDims dims, int layer, int chunks, int chunk,
                                                  int pair_index, float* stats, float* partials, float* shared) {
  constexpr int kStride = kHeadDim + 1;
  constexpr int kOutputsPerThread = kMaxTileRows * kHeadDim / kTileThreads;
  const int group = dims.heads / dims.kv_heads;
  const int rows = gamma * group;
  float* query = shared;
  float* keys_tile = query + rows * kHeadDim;
  float* values_tile = keys_tile + kTileKeys * kStride;
  float* probabilities = values_tile + kTileKeys * kStride;
  float* row_max = probabilities + rows * kTileKeys;
  float* row_total = row_max + rows;
  const int request_index = pair_index / dims.kv_heads;
  const int kv_head = pair_index % dims.kv_heads;
  const DeviceBlockRequest request = requests[request_index];
  const int kv_size = dims.kv_heads * kHeadDim;
  const int64_t layer_offset = static_cast<int64_t>(layer) * request.capacity * kv_size + kv_head * kHeadDim;
  const bf16_t* keys = request.keys + layer_offset;
  const bf16_t* values = request.values + layer_offset;
  const int64_t key_count = request.length + gamma;
  const int64_t chunk_keys = (key_count + chunks - 1) / chunks;
  const int64_t begin = min(key_count, chunk * chunk_keys);
  const int64_t end = min(key_count, begin + chunk_keys);
  float2* chunk_stats = reinterpret_cast<float2*>(stats) + static_cast<int64_t>(pair_index) * chunks * rows;
  auto global_row = [&](int r) {
    const int slot = r / group, g = r % group;
    return (static_cast<int64_t>(request_index) * gamma + slot) * dims.heads + kv_head * group + g;
  };
  const bool resident = kResident && end - begin <= kTileKeys;  // the same for every thread of the CTA
  if (kValues && resident) {
    // The stats sweep left the queries and the chunk's keys and values in shared memory.
  } else if constexpr (kBatched) {
    // 16-byte loads: eight query values a thread (at most two loads a thread: rows <= 64, head_dim <= 64).
    constexpr int kEights = kHeadDim / 8;
    for (int index = threadIdx.x; index < rows * kEights; index += blockDim.x) {
      const int r = index / kEights, d8 = (index % kEights) * 8;
      float eight[8];
      load_eight(q + global_row(r) * kHeadDim + d8, eight);
#pragma unroll
      for (int i = 0; i < 8; ++i) query[r * kHeadDim + d8 + i] = eight[i];
    }
  } else {
    for (int index = threadIdx.x; index < rows * kHeadDim; index += blockDim.x) {
      query[index] = __bfloat162float(q[global_row(index / kHeadDim) * kHeadDim + index % kHeadDim]);
    }
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    if (kValues && kBatched) {
      // Every chunk's stats loaded at once, then the old loops' arithmetic in chunk order.
      float2 stat[kMaxSplitChunks];
#pragma unroll
      for (int c = 0; c < kMaxSplitChunks; ++c) {
        stat[c] = c < chunks ? __ldcg(&chunk_stats[c * rows + r]) : make_float2(-INFINITY, 0.0f);
      }
      float largest = -INFINITY;
#pragma unroll
      for (int c = 0; c < kMaxSplitChunks; ++c) {
        if (c < chunks) largest = fmaxf(largest, stat[c].x);
      }
      float total = 0.0f;
#pragma unroll
      for (int c = 0; c < kMaxSplitChunks; ++c) {
        if (c < chunks && stat[c].y > 0.0f) total += stat[c].y * expf(stat[c].x - largest);
      }
      row_max[r] = largest;
      row_total[r] = total;
    } else if (kValues) {
      float largest = -INFINITY;
      for (int c = 0; c < chunks; ++c) largest = fmaxf(largest, __ldcg(&chunk_stats[c * rows + r]).x);
      float total = 0.0f;
      for (int c = 0; c < chunks; ++c) {
        const float2 stat = __ldcg(&chunk_stats[c * rows + r]);
        if (stat.y > 0.0f) total += stat.y * expf(stat.x - largest);
      }
      row_max[r] = largest;
      row_total[r] = total;
    } else {
      row_max[r] = -INFINITY;
      row_total[r] = 0.0f;
    }
  }
  float accumulated[kOutputsPerThread];
  for (int k = 0; k < kOutputsPerThread; ++k) accumulated[k] = 0.0f;
  for (int64_t first = begin; first < end; first += kTileKeys) {
    const int count = end - first < kTileKeys ? static_cast<int>(end - first) : kTileKeys;
    __syncthreads();  // the last tile's readers are done
    // 16-byte loads: 8 bf16 of one key (or value) row a thread (the values in the stats sweep too when resident).
    constexpr int kChunks = kHeadDim / 8;
    const bool load_values = kValues || resident;
    for (int index = threadIdx.x; !(kValues && resident) && index < count * kChunks; index += blockDim.x) {
      const int j = index / kChunks, c8 = (index % kChunks) * 8;
      const int64_t at = (first + j) * kv_size + c8;
      float eight[8];
      load_eight(keys + at, eight);
#pragma unroll
      for (int i = 0; i < 8; ++i) keys_tile[j * kStride + c8 + i] = eight[i];
      if (load_values) {
        load_eight(values + at, eight);
#pragma unroll
        for (int i = 0; i < 8; ++i) values_tile[j * kStride + c8 + i] = eight[i];
      }
    }
    __syncthreads();
    for (int pair = threadIdx.x; pair < rows * kTileKeys; pair += blockDim.x) {
      const int r = pair / kTileKeys, j = pair % kTileKeys;
      float value = kValues ? 0.0f : -INFINITY;
      if (j < count) {
        float sum = 0.0f;
#pragma unroll
        for (int dim = 0; dim < kHeadDim; ++dim) sum += query[r * kHeadDim + dim] * keys_tile[j * kStride + dim];
        const float score = round_bf16(round_bf16(sum) * dims.scale);
        value = kValues ? round_bf16(expf(score - row_max[r]) / row_total[r]) : score;
      }
      probabilities[pair] = value;
    }
    __syncthreads();
    if constexpr (kValues) {
      add_tile_values<kHeadDim>(accumulated, rows, count, probabilities, values_tile);
    } else {
      // Stats, one sweep: the row max so far, the total rescaled to it, then this tile's exponentials added.
      for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        float largest = row_max[r];
        for (int j = 0; j < count; ++j) largest = fmaxf(largest, probabilities[r * kTileKeys + j]);
        row_total[r] *= expf(row_max[r] - largest);
        row_max[r] = largest;
      }
      __syncthreads();
      for (int pair = threadIdx.x; pair < rows * kTileKeys; pair += blockDim.x) {
        const int r = pair / kTileKeys, j = pair % kTileKeys;
        probabilities[pair] = j < count ? expf(probabilities[pair] - row_max[r]) : 0.0f;
      }
      __syncthreads();
      for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        float total = row_total[r];
        for (int j = 0; j < count; ++j) total += probabilities[r * kTileKeys + j];
        row_total[r] = total;
      }
    }
  }
  __syncthreads();
  if (!kValues) {
    for (int r = threadIdx.x; r < rows; r += blockDim.x) chunk_stats[chunk * rows + r] = make_float2(row_max[r], row_total[r]);
    return;
  }
  float* out = partials + (static_cast<int64_t>(pair_index) * chunks + chunk) * rows * kHeadDim;
#pragma unroll
  for (int k = 0; k < kOutputsPerThread; ++k) {
    const int output = threadIdx.x + k * kTileThreads;
    if (output >= rows * kHeadDim) break;
    out[output] = accumulated[k];
  }
}

// The output row (request, slot, head) of row r of a (request, KV head) pair, in units of head_dim.
__device__ __forceinline__ int64_t pair_output_row(int pair_index, int r, int gamma, AttentionDims dims) {
  const int group = dims.heads / dims.kv_heads;
  const int request_index = pair_index / dims.kv_heads, kv_head = pair_index % dims.kv_heads;
  const int slot = r / group, g = r % group;
  return (static_cast<int64_t>(request_index) * gamma + slot) * dims.heads + kv_head * group + g;
}

// The chunks' partials of one output added in chunk order (from `first`, `stride` apart), rounded by the caller;
// batched: every load issued before the first add (the same sum).
template <bool kBatched>
__device__ __forceinline__ float add_chunk_partials(const float* first, int64_t stride, int chunks) {
  float sum = 0.0f;
  if constexpr (kBatched) {
    float part[kMaxSplitChunks];
#pragma unroll
    for (int c = 0; c < kMaxSplitChunks; ++c) part[c] = c < chunks ? __ldcg(first + c * stride) : 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxSplitChunks; ++c) {
      if (c < chunks) sum += part[c];
    }
  } else {
    for (int c = 0; c < chunks; ++c) sum += __ldcg(first + c * stride);
  }
  return sum;
}

template <int kHeadDim, bool kValues, bool kBatched>
__global__ void __launch_bounds__(kTileThreads) attention_split_kernel(const bf16_t* q,
                                                                       const DeviceBlockRequest* requests, int gamma,
                                                                       AttentionDims dims, int layer, int chunks,
                                                                       float* stats, float* partials,
                                                                       unsigned int* tickets, bf16_t* combined) {
  let_next_kernel_start();  // the next sweep (or the o_proj GEMM) may start
  wait_for_previous_kernel();  // after a programmatic launch: queries, caches and stats are complete
  extern __shared__ float shared[];
  const int chunk = blockIdx.x % chunks;
  const int pair_index = blockIdx.x / chunks;  // request * kv_heads + kv_head
  split_chunk_sweep<kHeadDim, kValues, kBatched>(q, requests, gamma, dims, layer, chunks, chunk, pair_index, stats,
                                                 partials, shared);
  if (!kValues || !tickets) return;
  // The pair's last CTA adds the chunks' partials in chunk order and rounds once (attention_combine_kernel's sums).
  const int rows = gamma * (dims.heads / dims.kv_heads);
  __shared__ int last;
  __threadfence();  // this chunk's partials are visible device-wide before its ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&tickets[pair_index], 1u) == static_cast<unsigned int>(chunks) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) tickets[pair_index] = 0;  // ready for the next launch
  const float* first_chunk = partials + static_cast<int64_t>(pair_index) * chunks * rows * kHeadDim;
  for (int output = threadIdx.x; output < rows * kHeadDim; output += blockDim.x) {
    const float sum = add_chunk_partials<kBatched>(first_chunk + output, static_cast<int64_t>(rows) * kHeadDim, chunks);
    combined[pair_output_row(pair_index, output / kHeadDim, gamma, dims) * kHeadDim + output % kHeadDim] =
        __float2bfloat16_rn(sum);
  }
}

// Spin bound of the cooperative kernel's pair barriers (~0.1 s at 1.98 GHz): a CTA that never arrives (which the
// cooperative launch rules out) breaks the kernel for good (NaN outputs, so every draft fails by name) instead of
// hanging the device.
constexpr long long kPairSpinCycles = 200000000LL;

// Thread 0 arrives at the pair's counter and waits for `target` arrivals (acquire); false if it timed out.
__device__ __forceinline__ bool pair_barrier(unsigned int* counter, unsigned int target) {
  __shared__ int passed;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this CTA's stats / partials before its arrival
    atomicAdd(counter, 1u);
    const long long start = clock64();
    unsigned int seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target && clock64() - start < kPairSpinCycles);
    passed = seen >= target;
  }
  __syncthreads();
  return passed != 0;
}

// The split variant in one cooperative launch (every CTA resident): the stats sweep, a barrier of the pair's chunk
// CTAs, the values sweep, a second barrier, then chunk c adds its share of the pair's outputs over the chunks in
// chunk order (the combine launch's sums). barriers: [pairs] counters (each reset by the pair's last CTA to leave)
// and a sticky broken flag at [pairs].
template <int kHeadDim, bool kBatched>
__global__ void __launch_bounds__(kTileThreads) attention_cooperative_kernel(const bf16_t* q,
                                                                             const DeviceBlockRequest* requests,
                                                                             int gamma, AttentionDims dims, int layer,
                                                                             int chunks, float* stats, float* partials,
                                                                             unsigned int* barriers, int pairs,
                                                                             bf16_t* out) {
  extern __shared__ float shared[];
  const int chunk = blockIdx.x % chunks;
  const int pair_index = blockIdx.x / chunks;
  const int rows = gamma * (dims.heads / dims.kv_heads);
  const int outputs = rows * kHeadDim;
  const int share = (outputs + chunks - 1) / chunks;
  const int share_begin = min(outputs, chunk * share), share_end = min(outputs, share_begin + share);
  unsigned int* counter = barriers + pair_index;
  unsigned int* broken = barriers + pairs;
  bool ok = __ldcg(broken) == 0;
  if (ok) {
    split_chunk_sweep<kHeadDim, false, kBatched, kBatched>(q, requests, gamma, dims, layer, chunks, chunk, pair_index,
                                                           stats, partials, shared);
    ok = pair_barrier(counter, chunks);
  }
  if (ok) {
    split_chunk_sweep<kHeadDim, true, kBatched, kBatched>(q, requests, gamma, dims, layer, chunks, chunk, pair_index,
                                                          stats, partials, shared);
    ok = pair_barrier(counter, 2 * chunks);
  }
  let_next_kernel_start();  // the o_proj GEMM may start loading its weights
  const float* first_chunk = partials + static_cast<int64_t>(pair_index) * chunks * outputs;
  for (int output = share_begin + threadIdx.x; output < share_end; output += blockDim.x) {
    const float sum = ok ? add_chunk_partials<kBatched>(first_chunk + output, outputs, chunks) : NAN;
    out[pair_output_row(pair_index, output / kHeadDim, gamma, dims) * kHeadDim + output % kHeadDim] =
        __float2bfloat16_rn(sum);
  }
  if (threadIdx.x != 0) return;
  if (!ok) {
    atomicExch(broken, 1u);
    return;
  }
  // Every CTA of the pair passed both barriers before the last third arrival: reset for the next launch.
  if (atomicAdd(counter, 1u) == 3u * chunks - 1) atomicExch(counter, 0u);
}

// One thread per output (request, slot, head, dim): the chunks' partials added in chunk order, rounded once.
template <bool kBatched>
__global__ void attention_combine_kernel(const float* partials, int count, int gamma, AttentionDims dims, int chunks,
                                         bf16_t* out) {
  let_next_kernel_start();  // the next GEMM may start loading its weights
  wait_for_previous_kernel();  // after a programmatic launch: every chunk's partials are complete
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int hd = dims.head_dim;
  const int64_t outputs = static_cast<int64_t>(count) * gamma * dims.heads * hd;
  if (index >= outputs) return;
  const int dim = static_cast<int>(index % hd);
  const int head = static_cast<int>((index / hd) % dims.heads);
  const int64_t block_row = index / (static_cast<int64_t>(hd) * dims.heads);
  const int request_index = static_cast<int>(block_row / gamma), slot = static_cast<int>(block_row % gamma);
  const int group = dims.heads / dims.kv_heads, rows = gamma * group;
  const int kv_head = head / group, r = slot * group + head % group;
  const float* from = partials + ((static_cast<int64_t>(request_index) * dims.kv_heads + kv_head) * chunks) * rows * hd +
                      static_cast<int64_t>(r) * hd + dim;
  out[index] = __float2bfloat16_rn(add_chunk_partials<kBatched>(from, static_cast<int64_t>(rows) * hd, chunks));
}

}  // namespace

int split_attention_chunks(int count, int kv_heads) {
  // At most two CTAs per SM of an H200 (132 SMs) over all (request, KV head) pairs, 1..32 chunks: rounded down since
  // session 8, so the one-launch grid is resident at once for 2, 4, 8, 16 and 32 requests too (s8B, context 128 /
  // 512, graphed block pass: 2 streams 16 chunks 0.448 / 0.517 ms against 17's three launches 0.484 / 0.539, 4
  // streams 8 chunks 0.456 / 0.593 against 9's 0.520 / 0.655; 1 stream keeps 32).
  const int pairs = std::max(1, count * kv_heads);
  return std::clamp(264 / pairs, 1, kMaxSplitChunks);
}

int64_t split_attention_stat_floats(int requests, int gamma, AttentionDims dims) {
  int64_t most = 0;
  for (int count = 1; count <= requests; ++count)
    most = std::max<int64_t>(most, static_cast<int64_t>(count) * split_attention_chunks(count, dims.kv_heads));
  return most * dims.kv_heads * gamma * (dims.heads / dims.kv_heads) * 2;
}

int64_t split_attention_partial_floats(int requests, int gamma, AttentionDims dims) {
  return split_attention_stat_floats(requests, gamma, dims) / 2 * dims.head_dim;
}

Status block_attention_split(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                             AttentionDims dims, int layer, SplitAttentionScratch scratch, bf16_t* out,
                             cudaStream_t stream) {
  if (count == 0) return ok_status();
  if (!block_attention_tile_supported(gamma, dims)) {
    return Status(ErrorCode::UnsupportedDraftShape, "the split attention kernel does not take block " +
                                                        std::to_string(gamma) + " x group " +
                                                        std::to_string(dims.heads / dims.kv_heads) + " at head_dim " +
                                                        std::to_string(dims.head_dim));
  }
  const int automatic = split_attention_chunks(count, dims.kv_heads);
  const int chunks = scratch.chunks > 0 ? std::min(scratch.chunks, automatic) : automatic;
  const int rows = gamma * (dims.heads / dims.kv_heads);
  const size_t bytes = tile_shared_bytes(rows, dims.head_dim);
  const dim3 grid(count * dims.kv_heads * chunks);
  const int64_t outputs = static_cast<int64_t>(count) * gamma * dims.heads * dims.head_dim;
  // Plain launches, or each one overlapping the previous kernel's tail (scratch.programmatic).
  auto launch = [&](auto kernel, dim3 blocks, int threads, size_t shared, auto... args) -> Status {
    if (scratch.programmatic) {
      return ls::cuda::launch_programmatic(kernel, blocks, threads, static_cast<int>(shared), stream, args...);
    }
    kernel<<<blocks, threads, shared, stream>>>(args...);
    LS_CUDA_TRY_LAUNCH("block_attention_split");
    return ok_status();
  };
  unsigned int* tickets = scratch.tickets;
  // The sweeps for a head size and load pattern, then (without tickets) the combine launch.
  auto sweeps = [&](auto stats_kernel, auto values_kernel, auto combine_kernel) -> Status {
    LS_RETURN_IF_ERROR(launch(stats_kernel, grid, kTileThreads, bytes, q, requests, gamma, dims, layer, chunks,
                              scratch.stats, scratch.partials, static_cast<unsigned int*>(nullptr),
                              static_cast<bf16_t*>(nullptr)));
    LS_RETURN_IF_ERROR(launch(values_kernel, grid, kTileThreads, bytes, q, requests, gamma, dims, layer, chunks,
                              scratch.stats, scratch.partials, tickets, out));
    if (tickets) return ok_status();
    return launch(combine_kernel, dim3(static_cast<unsigned int>((outputs + 255) / 256)), 256, 0,
                  static_cast<const float*>(scratch.partials), count, gamma, dims, chunks, out);
  };
  constexpr int kHd = kMaxTileHeadDim;
  if (scratch.batched_loads) {
    if (dims.head_dim == 32) {
      return sweeps(attention_split_kernel<32, false, true>, attention_split_kernel<32, true, true>,
                    attention_combine_kernel<true>);
    }
    return sweeps(attention_split_kernel<kHd, false, true>, attention_split_kernel<kHd, true, true>,
                  attention_combine_kernel<true>);
  }
  if (dims.head_dim == 32) {
    return sweeps(attention_split_kernel<32, false, false>, attention_split_kernel<32, true, false>,
                  attention_combine_kernel<false>);
  }
  return sweeps(attention_split_kernel<kHd, false, false>, attention_split_kernel<kHd, true, false>,
                attention_combine_kernel<false>);
}

namespace {

using CooperativeKernel = void (*)(const bf16_t*, const DeviceBlockRequest*, int, AttentionDims, int, int, float*,
                                   float*, unsigned int*, int, bf16_t*);

// The cooperative kernel for a head size and load pattern.
CooperativeKernel cooperative_kernel(int head_dim, bool batched) {
  if (head_dim == 32) return batched ? attention_cooperative_kernel<32, true> : attention_cooperative_kernel<32, false>;
  constexpr int kHd = kMaxTileHeadDim;
  return batched ? attention_cooperative_kernel<kHd, true> : attention_cooperative_kernel<kHd, false>;
}

// CTAs of the cooperative kernel one SM holds (0: not known yet or not launchable), per head size: the fewer of the
// two load patterns' (so a fit holds for either).
int cooperative_resident(int head_dim, size_t bytes) {
  int fewest = 0;
  for (const bool batched : {false, true}) {
    int resident = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, cooperative_kernel(head_dim, batched), kTileThreads,
                                                      bytes) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    fewest = batched ? std::min(fewest, resident) : resident;
  }
  return fewest;
}

}  // namespace

bool block_attention_cooperative_supported(int count, int gamma, AttentionDims dims, int chunks) {
  if (count <= 0 || !block_attention_tile_supported(gamma, dims)) return false;
  const int automatic = split_attention_chunks(count, dims.kv_heads);
  const int used = chunks > 0 ? std::min(chunks, automatic) : automatic;
  const int rows = gamma * (dims.heads / dims.kv_heads);
  const size_t bytes = tile_shared_bytes(rows, dims.head_dim);
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return static_cast<int64_t>(cooperative_resident(dims.head_dim, bytes)) * sms >=
         static_cast<int64_t>(count) * dims.kv_heads * used;
}

Status block_attention_cooperative(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                                   AttentionDims dims, int layer, SplitAttentionScratch scratch, bf16_t* out,
                                   cudaStream_t stream) {
  if (count == 0) return ok_status();
  // Residency is the cooperative launch's own check (a grid too large fails the launch); the caller asks
  // block_attention_cooperative_supported() beforehand, outside any capture.
  if (scratch.barriers == nullptr || !block_attention_tile_supported(gamma, dims)) {
    return Status(ErrorCode::UnsupportedDraftShape,
                  "the one-launch split attention does not take block " + std::to_string(gamma) + " x group " +
                      std::to_string(dims.heads / dims.kv_heads) + " at head_dim " + std::to_string(dims.head_dim) +
                      (scratch.barriers == nullptr ? " without barrier counters" : ""));
  }
  const int automatic = split_attention_chunks(count, dims.kv_heads);
  const int chunks = scratch.chunks > 0 ? std::min(scratch.chunks, automatic) : automatic;
  const int rows = gamma * (dims.heads / dims.kv_heads);
  const int pairs = count * dims.kv_heads;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned int>(pairs * chunks));
  config.blockDim = dim3(kTileThreads);
  config.dynamicSmemBytes = tile_shared_bytes(rows, dims.head_dim);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, cooperative_kernel(dims.head_dim, scratch.batched_loads), q, requests, gamma,
                                 dims, layer, chunks, scratch.stats, scratch.partials, scratch.barriers, pairs, out));
  return ok_status();
}

}  // namespace ls::dspark::cuda
