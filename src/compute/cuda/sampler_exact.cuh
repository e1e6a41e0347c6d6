// The sampler's exact pieces (sampling.cu): the radix select by rank, the bitonic chunk sort, the greedy row, and
// the top-p cut by the CPU's own one-by-one sums (the `legacy` row's walk, and the bounded and split draws'
// fallback where their bounds cannot decide). Included by sampling.cu only, after sampler_walk.cuh.
#pragma once

#include <cstdint>

#include "compute/cuda/keyed_draw.cuh"
#include "compute/cuda/sampler_walk.cuh"

namespace ls::cuda {
namespace {

// The key of the candidate with descending rank `rank` (0 = best) among those `filter` keeps (8 passes of 8 bits).
__device__ uint64_t select_rank(const float* row, int vocab, const Filter& filter, unsigned int rank, Shared& s) {
  uint64_t prefix = 0, prefix_mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) s.histogram[b] = 0;
    __syncthreads();
    for (int id = threadIdx.x; id < vocab; id += kThreads) {
      const float logit = row[id];
      if (!filter.keeps(logit, id)) continue;
      const uint64_t key = order_key(logit, id);
      if ((key & prefix_mask) == prefix) atomicAdd(&s.histogram[(key >> shift) & 0xff], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int above = 0;
      int digit = 255;
      for (; digit > 0; --digit) {
        if (rank < above + s.histogram[digit]) break;
        above += s.histogram[digit];
      }
      s.select_prefix = prefix | (static_cast<uint64_t>(digit) << shift);
      s.select_rank = rank - above;
    }
    __syncthreads();
    prefix = s.select_prefix;
    rank = static_cast<unsigned int>(s.select_rank);
    prefix_mask |= 0xffull << shift;
    __syncthreads();
  }
  return prefix;
}

// Sorts s.chunk_keys[0, kChunk) descending (unused slots hold 0 and sink to the end).
__device__ void sort_chunk_descending(Shared& s) { keyed::sort_descending<kChunk, kThreads>(s.chunk_keys); }

__device__ int32_t key_id(uint64_t key) { return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key)); }

__device__ int32_t greedy_row(const float* row, int vocab, Shared& s) {
  Best mine{0.0, -1};
  if ((vocab & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int q = threadIdx.x; q < vocab / 4; q += kThreads) {
      const float4 v = row4[q];
      const float values[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!isnan(values[e])) mine = better(mine, Best{values[e], q * 4 + e});
    }
  } else {
    for (int id = threadIdx.x; id < vocab; id += kThreads)
      if (!isnan(row[id])) mine = better(mine, Best{row[id], id});
  }
  const Best all = block_best(mine, s);
  return all.id < 0 ? 0 : all.id;
}

// The top-p cut as the CPU defines it, by one-by-one sums: the normaliser over the `alive` survivors in ascending
// id order, then the survivors best-first, kChunk at a time, until the running mass reaches top_p * normaliser.
// Sets filter.min_key to the last kept key (unchanged when the mass never reaches it).
__device__ void top_p_one_by_one(const float* row, int vocab, Filter& filter, unsigned int alive, float top_p,
                                 Shared& s) {
  // Few survivors (top-k) are first packed in id order so the one thread adds only them.
  double total = 0;
  if (alive <= static_cast<unsigned int>(kChunk)) {
    unsigned int packed = 0;
    for (int base = 0; base < vocab; base += kThreads) {
      const int id = base + threadIdx.x;
      const bool keep = id < vocab && filter.keeps(row[id], id);
      const unsigned int votes = __ballot_sync(0xffffffffu, keep);
      __syncthreads();
      if ((threadIdx.x & 31) == 0) s.partial[threadIdx.x >> 5] = __popc(votes);
      __syncthreads();
      unsigned int before = packed;
      for (int w = 0; w < (threadIdx.x >> 5); ++w) before += static_cast<unsigned int>(s.partial[w]);
      if (keep) {
        const unsigned int at = before + __popc(votes & ((1u << (threadIdx.x & 31)) - 1u));
        s.chunk_weights[at] = filter.weight(row[id]);
      }
      for (int w = 0; w < kWarps; ++w) packed += static_cast<unsigned int>(s.partial[w]);
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (unsigned int i = 0; i < alive; ++i) total += s.chunk_weights[i];
  } else {
    for (int base = 0; base < vocab; base += kChunk) {
      __syncthreads();
      for (int i = threadIdx.x; i < kChunk; i += kThreads) {
        const int id = base + i;
        s.chunk_weights[i] = id < vocab && filter.keeps(row[id], id) ? filter.weight(row[id]) : -1.0;
      }
      __syncthreads();
      if (threadIdx.x == 0)
        for (int i = 0; i < kChunk; ++i)
          if (s.chunk_weights[i] >= 0) total += s.chunk_weights[i];
    }
  }
  if (threadIdx.x == 0) {
    s.scalar = static_cast<double>(top_p) * total;
    s.flag = 0;
  }
  __syncthreads();
  const double target = s.scalar;
  double mass = 0;  // thread 0's running sum
  uint64_t upper = ~0ull, cut = 0;
  bool done = false;
  for (unsigned int first = 0; first < alive && !done; first += kChunk) {
    const unsigned int last = min(alive, first + kChunk) - 1;
    const uint64_t lower = select_rank(row, vocab, filter, last, s);
    for (int i = threadIdx.x; i < kChunk; i += kThreads) s.chunk_keys[i] = 0;
    if (threadIdx.x == 0) s.count = 0;
    __syncthreads();
    for (int id = threadIdx.x; id < vocab; id += kThreads) {
      if (!filter.keeps(row[id], id)) continue;
      const uint64_t key = order_key(row[id], id);
      if (key >= lower && (first == 0 || key < upper)) s.chunk_keys[atomicAdd(&s.count, 1u)] = key;
    }
    sort_chunk_descending(s);
    const int n = static_cast<int>(last - first + 1);
    for (int i = threadIdx.x; i < n; i += kThreads) s.chunk_weights[i] = filter.weight(row[key_id(s.chunk_keys[i])]);
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 0; i < n; ++i) {
        mass += s.chunk_weights[i];
        if (mass >= target) {
          s.chunk_keys[0] = s.chunk_keys[i];
          s.flag = 1;
          break;
        }
      }
    }
    __syncthreads();
    done = s.flag != 0;
    if (done) cut = s.chunk_keys[0];
    upper = lower;
    __syncthreads();
  }
  if (done) filter.min_key = cut;
}

// The largest candidate key below `key` (`key` itself when none): the planted late cut.
__device__ uint64_t next_key_below(const float* row, int vocab, const Filter& filter, uint64_t key, Shared& s) {
  uint64_t mine = 0;
  for (int id = threadIdx.x; id < vocab; id += kThreads)
    if (filter.keeps(row[id], id) && order_key(row[id], id) < key) mine = max(mine, order_key(row[id], id));
  mine = warp_max(mine);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.key_max[threadIdx.x >> 5] = mine;
  __syncthreads();
  uint64_t below = 0;
  for (int w = 0; w < kWarps; ++w) below = max(below, s.key_max[w]);
  __syncthreads();
  return below == 0 ? key : below;
}

}  // namespace
}  // namespace ls::cuda
