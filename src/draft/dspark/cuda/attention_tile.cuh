// Shared pieces of the drafter's tile-based block attention (attention_tile.cu, attention_split.cu): tile sizes,
// 16-byte K/V loads, the probabilities-times-values step and the shared-memory layout.
#pragma once

#include <cuda_bf16.h>

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
