// Shared pieces of the drafter's tile-based block attention (attention_tile.cu, attention_split.cu): tile sizes,
// 16-byte K/V loads, the probabilities-times-values step and the shared-memory layout.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda::attention_tiles {

inline constexpr int kTileKeys = 32;
inline constexpr int kTileThreads = 256;
inline constexpr int kMaxTileRows = 64;  // block slots x query heads per KV head
inline constexpr int kMaxTileHeadDim = 64;

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

// Keys a window of scores covers from `first` (the head and row kernels): whole chunks when a chunk fits (first is
// then a chunk start), else whole 32-key tiles of one chunk (first is then the chunk's start plus a multiple of the
// window), so no tile of any chunk straddles two windows.
__device__ __forceinline__ int window_end(int first, int key_count, int chunk_keys, int window) {
  if (chunk_keys <= window) return min(key_count, first + (window / chunk_keys) * chunk_keys);
  const int chunk_end = min(key_count, (first / chunk_keys + 1) * chunk_keys);
  return min(chunk_end, first + window);
}

// Host side of the head and row launches: the chunks a launch uses (split_attention_chunks for `count` requests, or
// a pin of at most that) and the refusal of a shape the kernel does not take.
inline int used_attention_chunks(int count, int kv_heads, int pinned) {
  const int automatic = split_attention_chunks(count, kv_heads);
  return pinned > 0 ? std::min(pinned, automatic) : automatic;
}
inline Status unsupported_attention_shape(const char* kernel, int gamma, int head_dim) {
  return Status(ErrorCode::UnsupportedDraftShape, std::string("the ") + kernel +
                                                      " attention kernel does not take block " +
                                                      std::to_string(gamma) + " at head_dim " +
                                                      std::to_string(head_dim));
}

// One (request, KV head)'s view of a layer's caches for the head and row kernels: its K / V rows (kv_size apart),
// the keys attended (context + block) and the split's chunk length for `chunks` chunks.
struct KeySpan {
  const bf16_t* keys;
  const bf16_t* values;
  int kv_size;
  int key_count;
  int chunk_keys;
};
__device__ __forceinline__ KeySpan key_span(const DeviceBlockRequest& request, AttentionDims dims, int head_dim,
                                            int layer, int head, int gamma, int chunks) {
  const int kv_head = head / (dims.heads / dims.kv_heads);
  const int kv_size = dims.kv_heads * head_dim;
  const int64_t layer_offset = static_cast<int64_t>(layer) * request.capacity * kv_size + kv_head * head_dim;
  const int key_count = static_cast<int>(request.length) + gamma;
  return KeySpan{request.keys + layer_offset, request.values + layer_offset, kv_size, key_count,
                 (key_count + chunks - 1) / chunks};
}

// A chunk's stats over its 32-key tiles in [low, high) of `score` (indexed by key), from (most, total): the split's
// one-sweep stats (per tile: the max so far, the total rescaled to it, the tile's exponentials added in key order),
// the multiply and the adds kept apart as the split's shared-memory steps keep them (head and row kernels).
__device__ __forceinline__ void add_chunk_tiles(const float* score, int low, int high, float& most, float& total) {
  for (int tile = low; tile < high; tile += kTileKeys) {
    const int count = min(kTileKeys, high - tile);
    float largest = most;
    for (int j = 0; j < count; ++j) largest = fmaxf(largest, score[tile + j]);
    total = __fmul_rn(total, expf(most - largest));
    most = largest;
    for (int j = 0; j < count; ++j) total = __fadd_rn(total, expf(score[tile + j] - most));
  }
}

// A row's max and total from its chunks' stats in chunk order (the split's combine), by a whole warp: lane c holds
// chunk c's (most, part) (chunks <= 32; -inf and 0 past them); the max over the lanes (the order of a max does not
// matter: a zero's sign never changes exp(x - max)); each chunk's exponential by its lane, then the total's adds in
// chunk order by every lane. All 32 lanes are read (past the chunks a part is 0 and adds nothing), so the loop
// unrolls and its shuffles issue ahead of the dependent adds.
__device__ __forceinline__ void combine_chunk_stats(float most, float part, float& largest, float& total) {
  largest = most;
  for (int offset = 16; offset > 0; offset /= 2) {
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  }
  const float scaled = part > 0.0f ? expf(most - largest) : 0.0f;
  total = 0.0f;
#pragma unroll
  for (int c = 0; c < 32; ++c) {
    const float stat_total = __shfl_sync(0xffffffffu, part, c), exponential = __shfl_sync(0xffffffffu, scaled, c);
    if (stat_total > 0.0f) total += stat_total * exponential;
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
inline constexpr size_t tile_shared_bytes(int rows, int head_dim) {
  return sizeof(float) * (static_cast<size_t>(rows) * head_dim + 2 * kTileKeys * (head_dim + 1) +
                          static_cast<size_t>(rows) * kTileKeys + 2 * rows);
}

}  // namespace ls::dspark::cuda::attention_tiles
