// Block attention, tile variant: one CTA per (request, KV head) serves all block slots x query heads of that group
// from K/V tiles in shared memory (the warp variant reads every key once per slot and head).
//
// Three sweeps over keys 0 .. p+gamma-1 in 32-key tiles: row maxima, sums of exponentials, then probabilities times
// values. Every sum over keys runs one key after another in key order (the CPU's order); each score is the CPU's
// (raw and scaled scores rounded to bf16), probabilities are rounded to bf16, the output once. The split variant
// (below) spreads one such CTA over key chunks; choose_block_attention() picks it where the tile shapes fit.
#include <algorithm>
#include <cmath>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/device_steps.cuh"

namespace ls::dspark::cuda {
namespace {

constexpr int kTileKeys = 32;
constexpr int kTileThreads = 256;
constexpr int kMaxTileRows = 64;  // block slots x query heads per KV head
constexpr int kMaxTileHeadDim = 64;

// Eight bf16 values (16 bytes, aligned) as floats.
__device__ __forceinline__ void load_eight(const bf16_t* from, float* to) {
  const uint4 raw = *reinterpret_cast<const uint4*>(from);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __bfloat1622float2(pairs[i]);
    to[2 * i] = pair.x;
    to[2 * i + 1] = pair.y;
  }
}

// accumulated += probabilities [rows, tile] x values_tile [count, hd + 1] for this thread's outputs (j ascending).
template <int kHeadDim, int kOutputsPerThread>
__device__ __forceinline__ void add_tile_values(float (&accumulated)[kOutputsPerThread], int rows, int count,
                                                const float* probabilities, const float* values_tile) {
#pragma unroll
  for (int k = 0; k < kOutputsPerThread; ++k) {
    const int output = threadIdx.x + k * kTileThreads;
    if (output >= rows * kHeadDim) break;
    const int r = output / kHeadDim, dim = output % kHeadDim;
    float sum = accumulated[k];
    for (int j = 0; j < count; ++j) sum += probabilities[r * kTileKeys + j] * values_tile[j * (kHeadDim + 1) + dim];
    accumulated[k] = sum;
  }
}

// Shared memory: query [rows, hd], keys and values [tile, hd + 1] (padded: no bank conflicts when lanes walk keys),
// probabilities [rows, tile], then row maxima and totals [rows].
constexpr size_t tile_shared_bytes(int rows, int head_dim) {
  return sizeof(float) * (static_cast<size_t>(rows) * head_dim + 2 * kTileKeys * (head_dim + 1) +
                          static_cast<size_t>(rows) * kTileKeys + 2 * rows);
}

template <int kHeadDim>
__global__ void __launch_bounds__(kTileThreads) attention_tile_kernel(const bf16_t* q, const DeviceBlockRequest* requests,
                                                                      int gamma, AttentionDims dims, int layer,
                                                                      bf16_t* out) {
  let_next_kernel_start();  // the next GEMM may start loading its weights
  constexpr int kStride = kHeadDim + 1;
  constexpr int kOutputsPerThread = kMaxTileRows * kHeadDim / kTileThreads;
  extern __shared__ float shared[];
  const int group = dims.heads / dims.kv_heads;
  const int rows = gamma * group;  // row r = slot * group + g, query head kv_head * group + g
  float* query = shared;
  float* keys_tile = query + rows * kHeadDim;
  float* values_tile = keys_tile + kTileKeys * kStride;
  float* probabilities = values_tile + kTileKeys * kStride;
  float* row_max = probabilities + rows * kTileKeys;
  float* row_total = row_max + rows;
  const int request_index = blockIdx.x / dims.kv_heads;
  const int kv_head = blockIdx.x % dims.kv_heads;
  const DeviceBlockRequest request = requests[request_index];
  const int kv_size = dims.kv_heads * kHeadDim;
  const int64_t layer_offset = static_cast<int64_t>(layer) * request.capacity * kv_size + kv_head * kHeadDim;
  const bf16_t* keys = request.keys + layer_offset;
  const bf16_t* values = request.values + layer_offset;
  const int64_t key_count = request.length + gamma;
  auto global_row = [&](int r) {  // index of (block row, query head) in q / out, in units of head_dim
    const int slot = r / group, g = r % group;
    return (static_cast<int64_t>(request_index) * gamma + slot) * dims.heads + kv_head * group + g;
  };
  for (int index = threadIdx.x; index < rows * kHeadDim; index += blockDim.x) {
    query[index] = __bfloat162float(q[global_row(index / kHeadDim) * kHeadDim + index % kHeadDim]);
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    row_max[r] = -INFINITY;
    row_total[r] = 0.0f;
  }
  float accumulated[kOutputsPerThread];
  for (int k = 0; k < kOutputsPerThread; ++k) accumulated[k] = 0.0f;
  for (int sweep = 0; sweep < 3; ++sweep) {
    for (int64_t first = 0; first < key_count; first += kTileKeys) {
      const int count = key_count - first < kTileKeys ? static_cast<int>(key_count - first) : kTileKeys;
      __syncthreads();  // the last tile's readers are done; row statistics of the last sweep are complete
      for (int index = threadIdx.x; index < count * kHeadDim; index += blockDim.x) {
        const int j = index / kHeadDim, dim = index % kHeadDim;
        const int64_t at = (first + j) * kv_size + dim;
        keys_tile[j * kStride + dim] = __bfloat162float(keys[at]);
        if (sweep == 2) values_tile[j * kStride + dim] = __bfloat162float(values[at]);
      }
      __syncthreads();
      for (int pair = threadIdx.x; pair < rows * kTileKeys; pair += blockDim.x) {
        const int r = pair / kTileKeys, j = pair % kTileKeys;
        float value = sweep == 0 ? -INFINITY : 0.0f;
        if (j < count) {
          float sum = 0.0f;
#pragma unroll
          for (int dim = 0; dim < kHeadDim; ++dim) sum += query[r * kHeadDim + dim] * keys_tile[j * kStride + dim];
          const float score = round_bf16(round_bf16(sum) * dims.scale);
          if (sweep == 0) value = score;
          else if (sweep == 1) value = expf(score - row_max[r]);
          else value = round_bf16(expf(score - row_max[r]) / row_total[r]);
        }
        probabilities[pair] = value;
      }
      __syncthreads();
      if (sweep < 2) {
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
          float running = sweep == 0 ? row_max[r] : row_total[r];
          for (int j = 0; j < count; ++j) {
            const float value = probabilities[r * kTileKeys + j];
            running = sweep == 0 ? fmaxf(running, value) : running + value;
          }
          if (sweep == 0) row_max[r] = running;
          else row_total[r] = running;
        }
      } else {
        add_tile_values<kHeadDim>(accumulated, rows, count, probabilities, values_tile);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kOutputsPerThread; ++k) {
    const int output = threadIdx.x + k * kTileThreads;
    if (output >= rows * kHeadDim) break;
    out[global_row(output / kHeadDim) * kHeadDim + output % kHeadDim] = __float2bfloat16_rn(accumulated[k]);
  }
}

// Split: the CTA (request, KV head, chunk) sweeps keys [begin, end) of its chunk in 32-key tiles (16-byte loads).
// kValues false: the chunk's row max and sum of exponentials in one sweep (the total rescaled whenever a tile raises
// the max) -> stats. kValues true: the row's max and total from every chunk's stats (total = sum over chunks in
// order of t_c exp(m_c - max)), then the probabilities (rounded to bf16) times values over the chunk -> partials.
template <int kHeadDim, bool kValues>
__global__ void __launch_bounds__(kTileThreads) attention_split_kernel(const bf16_t* q,
                                                                       const DeviceBlockRequest* requests, int gamma,
                                                                       AttentionDims dims, int layer, int chunks,
                                                                       float* stats, float* partials,
                                                                       unsigned int* tickets, bf16_t* combined) {
  if (kValues) let_next_kernel_start();  // the o_proj GEMM may start loading its weights
  constexpr int kStride = kHeadDim + 1;
  constexpr int kOutputsPerThread = kMaxTileRows * kHeadDim / kTileThreads;
  extern __shared__ float shared[];
  const int group = dims.heads / dims.kv_heads;
  const int rows = gamma * group;
  float* query = shared;
  float* keys_tile = query + rows * kHeadDim;
  float* values_tile = keys_tile + kTileKeys * kStride;
  float* probabilities = values_tile + kTileKeys * kStride;
  float* row_max = probabilities + rows * kTileKeys;
  float* row_total = row_max + rows;
  const int chunk = blockIdx.x % chunks;
  const int pair_index = blockIdx.x / chunks;  // request * kv_heads + kv_head
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
  for (int index = threadIdx.x; index < rows * kHeadDim; index += blockDim.x) {
    query[index] = __bfloat162float(q[global_row(index / kHeadDim) * kHeadDim + index % kHeadDim]);
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    if (kValues) {
      float largest = -INFINITY;
      for (int c = 0; c < chunks; ++c) largest = fmaxf(largest, chunk_stats[c * rows + r].x);
      float total = 0.0f;
      for (int c = 0; c < chunks; ++c) {
        const float2 stat = chunk_stats[c * rows + r];
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
    // 16-byte loads: 8 bf16 of one key (or value) row a thread.
    constexpr int kChunks = kHeadDim / 8;
    for (int index = threadIdx.x; index < count * kChunks; index += blockDim.x) {
      const int j = index / kChunks, c8 = (index % kChunks) * 8;
      const int64_t at = (first + j) * kv_size + c8;
      float eight[8];
      load_eight(keys + at, eight);
#pragma unroll
      for (int i = 0; i < 8; ++i) keys_tile[j * kStride + c8 + i] = eight[i];
      if (kValues) {
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
  if (!tickets) return;
  // The pair's last CTA adds the chunks' partials in chunk order and rounds once (attention_combine_kernel's sums).
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
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c) sum += __ldcg(first_chunk + static_cast<int64_t>(c) * rows * kHeadDim + output);
    combined[global_row(output / kHeadDim) * kHeadDim + output % kHeadDim] = __float2bfloat16_rn(sum);
  }
}

// One thread per output (request, slot, head, dim): the chunks' partials added in chunk order, rounded once.
__global__ void attention_combine_kernel(const float* partials, int count, int gamma, AttentionDims dims, int chunks,
                                         bf16_t* out) {
  let_next_kernel_start();  // the next GEMM may start loading its weights
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
  float sum = 0.0f;
  for (int c = 0; c < chunks; ++c) sum += from[static_cast<int64_t>(c) * rows * hd];
  out[index] = __float2bfloat16_rn(sum);
}

}  // namespace

int split_attention_chunks(int count, int kv_heads) {
  // About two CTAs per SM of an H200 (132 SMs) over all (request, KV head) pairs, at most 32 chunks.
  const int pairs = std::max(1, count * kv_heads);
  return std::clamp((264 + pairs - 1) / pairs, 1, 32);
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
  const dim3 grid(count * dims.kv_heads * chunks), block(kTileThreads);
  if (dims.head_dim == 32) {
    attention_split_kernel<32, false><<<grid, block, bytes, stream>>>(q, requests, gamma, dims, layer, chunks,
                                                                      scratch.stats, scratch.partials, nullptr,
                                                                      nullptr);
    attention_split_kernel<32, true><<<grid, block, bytes, stream>>>(q, requests, gamma, dims, layer, chunks,
                                                                     scratch.stats, scratch.partials,
                                                                     scratch.tickets, out);
  } else {
    attention_split_kernel<kMaxTileHeadDim, false><<<grid, block, bytes, stream>>>(
        q, requests, gamma, dims, layer, chunks, scratch.stats, scratch.partials, nullptr, nullptr);
    attention_split_kernel<kMaxTileHeadDim, true><<<grid, block, bytes, stream>>>(
        q, requests, gamma, dims, layer, chunks, scratch.stats, scratch.partials, scratch.tickets, out);
  }
  LS_CUDA_TRY_LAUNCH("block_attention_split sweeps");
  if (scratch.tickets) return ok_status();
  const int64_t outputs = static_cast<int64_t>(count) * gamma * dims.heads * dims.head_dim;
  attention_combine_kernel<<<static_cast<int>((outputs + 255) / 256), 256, 0, stream>>>(scratch.partials, count,
                                                                                         gamma, dims, chunks, out);
  LS_CUDA_TRY_LAUNCH("block_attention_split combine");
  return ok_status();
}

bool block_attention_tile_supported(int gamma, AttentionDims dims) {
  const int rows = gamma * (dims.heads / dims.kv_heads);
  return rows <= kMaxTileRows && (dims.head_dim == 32 || dims.head_dim == 64) &&
         tile_shared_bytes(rows, dims.head_dim) <= 48 * 1024;
}

Status block_attention_tile(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                            AttentionDims dims, int layer, bf16_t* out, cudaStream_t stream) {
  if (count == 0) return ok_status();
  if (!block_attention_tile_supported(gamma, dims)) {
    return Status(ErrorCode::UnsupportedDraftShape, "the tile attention kernel does not take block " +
                                                        std::to_string(gamma) + " x group " +
                                                        std::to_string(dims.heads / dims.kv_heads) + " at head_dim " +
                                                        std::to_string(dims.head_dim));
  }
  const int rows = gamma * (dims.heads / dims.kv_heads);
  const size_t bytes = tile_shared_bytes(rows, dims.head_dim);
  const dim3 grid(count * dims.kv_heads), block(kTileThreads);
  if (dims.head_dim == 32) {
    attention_tile_kernel<32><<<grid, block, bytes, stream>>>(q, requests, gamma, dims, layer, out);
  } else {
    attention_tile_kernel<kMaxTileHeadDim><<<grid, block, bytes, stream>>>(q, requests, gamma, dims, layer, out);
  }
  LS_CUDA_TRY_LAUNCH("block_attention_tile");
  return ok_status();
}

}  // namespace ls::dspark::cuda
