// The device sampler's shared state and its fast pieces (sampling.cu): the level walk (a radix descent over the
// candidates' order keys, 4 bits a level, by rank for top-k or by probability mass for top-p, with the top-p cut
// proven equal to the one-by-one sums' cut by error bounds) and the pruned Gumbel max. Included by sampling.cu only.
#pragma once

#include <cstdint>

#include "compute/cuda/keyed_draw.cuh"
#include "compute/cuda/kernels.h"

namespace ls::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 2048;  // candidates sorted / summed per round in shared memory; the walk's list size
constexpr int kBins = 16;     // one 4-bit digit per walk level

using keyed::Best;
using keyed::better;
using keyed::order_key;

enum WalkState : int { kWalking = 0, kFound = 1, kUndecided = 2 };
enum WalkSource : int { kFromRow = 0, kGatherFromRow = 1, kFromList = 2 };

// The level walk's state (written by thread 0 between passes): the keys still in play share `prefix` on `mask`.
struct Walk {
  uint64_t prefix, mask;
  uint64_t parent_and, parent_or;  // AND / OR of the keys the current digit window was chosen from
  uint64_t key;                    // the answer once found
  double mass_above;               // mass of the candidates above the keys in play (by mass)
  double key_mass;                 // the answer's weight
  double goal, low, high;          // by mass: p * total, and the band the bounds leave undecided
  unsigned int rank;               // by rank: descending rank among the keys in play
  unsigned int alive;              // candidates in the walked set
  unsigned int list_size;
  int shift, source, state, level;
};

struct Shared {
  unsigned int histogram[256];
  Best best[kWarps];
  double partial[kWarps];
  uint64_t key_and[kWarps];
  uint64_t key_or[kWarps];
  uint64_t key_max[kWarps];
  unsigned int bin_count[kWarps][kBins];
  double bin_mass[kWarps][kBins];
  unsigned int total_count[kBins];  // the bins summed over warps (warp 0's lanes, one bin each)
  double total_mass[kBins];
  uint64_t total_and, total_or;
  Walk walk;
  uint64_t select_prefix;
  uint64_t select_rank;
  unsigned int count;
  uint64_t chunk_keys[kChunk];
  double chunk_weights[kChunk];
  double scalar;
  int flag;
};

static_assert(sizeof(Shared) <= 48 * 1024, "the draw fits the default shared memory (no opt-in call)");

// The row's filters so far: NaN never survives; then keys >= top-k cut and >= top-p cut; then min-p.
struct Filter {
  uint64_t min_key = 0;  // top-k and top-p cut
  bool use_min_p = false;
  double max_logit = 0;
  double temperature = 1;
  double min_p = 0;
  // min-p without exp where the logit is clearly in or out: logit - max above keep_above keeps, below drop_below
  // drops (each 2e-9 from log(min_p) T; exp's and the products' roundings are ~1e-15 of that).
  bool min_p_bands = false;
  double keep_above = 0, drop_below = 0;
  __device__ double weight(float logit) const { return exp((static_cast<double>(logit) - max_logit) / temperature); }
  __device__ void set_min_p(double value) {
    use_min_p = true;
    min_p = value;
    const double log_min_p = log(value);
    keep_above = (log_min_p + 2e-9) * temperature;
    drop_below = (log_min_p - 2e-9) * temperature;
    min_p_bands = isfinite(keep_above) && isfinite(drop_below);
  }
  __device__ bool keeps(float logit, int32_t id) const {
    if (isnan(logit) || order_key(logit, id) < min_key) return false;
    if (!use_min_p) return true;
    if (min_p_bands) {
      const double above = static_cast<double>(logit) - max_logit;
      if (above > keep_above) return true;
      if (above < drop_below) return false;
    }
    return !(weight(logit) < min_p);
  }
};

__device__ Best block_best(Best mine, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, mine.value, offset), __shfl_xor_sync(0xffffffffu, mine.id, offset)};
    mine = better(mine, other);
  }
  const int warp = threadIdx.x >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.best[warp] = mine;
  __syncthreads();
  Best all = s.best[0];
  for (int w = 1; w < kThreads / 32; ++w) all = better(all, s.best[w]);
  return all;
}

__device__ unsigned int block_count(bool mine, Shared& s) {
  unsigned int votes = __popc(__ballot_sync(0xffffffffu, mine));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.partial[threadIdx.x >> 5] = votes;
  __syncthreads();
  unsigned int total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += static_cast<unsigned int>(s.partial[w]);
  return total;
}

// The block's sum of one double a thread: warp butterflies, then the warps in a fixed order.
__device__ double block_sum(double mine, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.partial[threadIdx.x >> 5] = mine;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kWarps; ++w) total += s.partial[w];
  return total;
}

// Count, AND, OR and largest key of the candidates `filter` keeps (count 0: AND ~0, OR 0, max 0).
struct SetStats {
  unsigned int count = 0;
  uint64_t all_and = ~0ull, all_or = 0, max_key = 0;
};

__device__ uint64_t warp_and(uint64_t x) {
  return (static_cast<uint64_t>(__reduce_and_sync(0xffffffffu, static_cast<unsigned>(x >> 32))) << 32) |
         __reduce_and_sync(0xffffffffu, static_cast<unsigned>(x));
}
__device__ uint64_t warp_or(uint64_t x) {
  return (static_cast<uint64_t>(__reduce_or_sync(0xffffffffu, static_cast<unsigned>(x >> 32))) << 32) |
         __reduce_or_sync(0xffffffffu, static_cast<unsigned>(x));
}
__device__ uint64_t warp_max(uint64_t x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Calls visit(id, logit) for this thread's share of the row, 16 ids per round from loads issued together (four
// float4 where the row allows, else 16 floats), so the loads' latency overlaps (one block per row has only 16 warps
// to hide it). Every lane of a warp visits equally often: slots past the row visit id >= vocab with a NaN logit.
template <typename Visit>
__device__ __forceinline__ void for_row(const float* row, int vocab, const Visit& visit) {
  constexpr int kLoads = 4;
  const float nan = __int_as_float(0x7fffffff);
  if ((vocab & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int quads = vocab / 4;
    for (int base = 0; base < quads; base += kThreads * kLoads) {
      float4 v[kLoads];
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int q = base + k * kThreads + static_cast<int>(threadIdx.x);
        v[k] = q < quads ? row4[q] : make_float4(nan, nan, nan, nan);
      }
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int id = 4 * (base + k * kThreads + static_cast<int>(threadIdx.x));
        visit(id, v[k].x);
        visit(id + 1, v[k].y);
        visit(id + 2, v[k].z);
        visit(id + 3, v[k].w);
      }
    }
  } else {
    for (int base = 0; base < vocab; base += kThreads * 4 * kLoads) {
      float v[4 * kLoads];
#pragma unroll
      for (int k = 0; k < 4 * kLoads; ++k) {
        const int id = base + k * kThreads + static_cast<int>(threadIdx.x);
        v[k] = id < vocab ? row[id] : nan;
      }
#pragma unroll
      for (int k = 0; k < 4 * kLoads; ++k) visit(base + k * kThreads + static_cast<int>(threadIdx.x), v[k]);
    }
  }
}

__device__ SetStats set_stats(const float* row, int vocab, const Filter& filter, Shared& s) {
  SetStats mine;
  for_row(row, vocab, [&](int id, float logit) {
    if (!filter.keeps(logit, id)) return;
    const uint64_t key = order_key(logit, id);
    ++mine.count;
    mine.all_and &= key;
    mine.all_or |= key;
    mine.max_key = max(mine.max_key, key);
  });
  const unsigned int count = __reduce_add_sync(0xffffffffu, mine.count);
  const uint64_t a = warp_and(mine.all_and), o = warp_or(mine.all_or), m = warp_max(mine.max_key);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    const int warp = threadIdx.x >> 5;
    s.bin_count[warp][0] = count;
    s.key_and[warp] = a;
    s.key_or[warp] = o;
    s.key_max[warp] = m;
  }
  __syncthreads();
  SetStats all;
  for (int w = 0; w < kWarps; ++w) {
    all.count += s.bin_count[w][0];
    all.all_and &= s.key_and[w];
    all.all_or |= s.key_or[w];
    all.max_key = max(all.max_key, s.key_max[w]);
  }
  __syncthreads();
  return all;
}

// One thread's per-digit counts (and masses) of the keys in play, with their AND / OR.
template <bool kMass>
struct BinSums {
  unsigned int count[kBins];
  double mass[kBins];
  uint64_t all_and = ~0ull, all_or = 0;
  __device__ BinSums() {
#pragma unroll
    for (int b = 0; b < kBins; ++b) count[b] = 0, mass[b] = 0;
  }
  __device__ void add(uint64_t key, int digit, double weight) {
#pragma unroll
    for (int b = 0; b < kBins; ++b)
      if (digit == b) {
        ++count[b];
        if constexpr (kMass) mass[b] += weight;
      }
    all_and &= key;
    all_or |= key;
  }
  // Per warp into s.bin_count / s.bin_mass / s.key_and / s.key_or (lane 0's butterfly sums: a fixed order).
  __device__ void store(Shared& s) {
    const int warp = threadIdx.x >> 5;
    const bool lead = (threadIdx.x & 31) == 0;
#pragma unroll
    for (int b = 0; b < kBins; ++b) {
      const unsigned int c = __reduce_add_sync(0xffffffffu, count[b]);
      double m = 0;
      if constexpr (kMass) {
        m = mass[b];
        for (int offset = 16; offset > 0; offset >>= 1) m += __shfl_xor_sync(0xffffffffu, m, offset);
      }
      if (lead) {
        s.bin_count[warp][b] = c;
        s.bin_mass[warp][b] = m;
      }
    }
    const uint64_t a = warp_and(all_and), o = warp_or(all_or);
    if (lead) {
      s.key_and[warp] = a;
      s.key_or[warp] = o;
    }
  }
};

// One level of the walk over the keys in play (from the row, from the row while gathering them into the list, or
// from the list); ends with the per-warp bins stored and the block synchronised.
template <bool kMass>
__device__ void walk_pass(const float* row, int vocab, const Filter& filter, Shared& s) {
  const Walk w = s.walk;
  BinSums<kMass> sums;
  if (w.source == kFromList) {
    for (unsigned int i = threadIdx.x; i < w.list_size; i += kThreads) {
      const uint64_t key = s.chunk_keys[i];
      if ((key & w.mask) != w.prefix) continue;
      sums.add(key, static_cast<int>((key >> w.shift) & (kBins - 1)), kMass ? s.chunk_weights[i] : 0.0);
    }
  } else {
    const bool gather = w.source == kGatherFromRow;
    for_row(row, vocab, [&](int id, float logit) {
      bool in = false;
      uint64_t key = 0;
      double weight = 0;
      if (filter.keeps(logit, id)) {  // NaN past the row
        key = order_key(logit, id);
        in = (key & w.mask) == w.prefix;
        if (kMass && in) weight = filter.weight(logit);
      }
      if (in) sums.add(key, static_cast<int>((key >> w.shift) & (kBins - 1)), weight);
      if (!gather) return;
      const unsigned int votes = __ballot_sync(0xffffffffu, in);  // one slot reservation per warp
      if (votes == 0) return;
      const unsigned int lane = threadIdx.x & 31, leader = __ffs(votes) - 1;
      unsigned int at = 0;
      if (lane == leader) at = atomicAdd(&s.count, static_cast<unsigned int>(__popc(votes)));
      at = __shfl_sync(0xffffffffu, at, leader) + __popc(votes & ((1u << lane) - 1u));
      if (in && at < kChunk) {
        s.chunk_keys[at] = key;
        s.chunk_weights[at] = weight;
      }
    });
  }
  __syncthreads();
  sums.store(s);
  __syncthreads();
}

// Warp 0 after a pass: its lanes total the bins over the warps, then lane 0 picks the digit holding the rank / the
// mass goal, narrows the keys in play and ends the walk when one key is left (by mass: decided only if the bounds
// put the goal off both its sides).
template <bool kMass>
__device__ void walk_step(Shared& s) {
  const int lane = threadIdx.x & 31;
  if (lane < kBins) {
    unsigned int c = 0;
    double m = 0;
    for (int warp = 0; warp < kWarps; ++warp) {
      c += s.bin_count[warp][lane];
      if constexpr (kMass) m += s.bin_mass[warp][lane];
    }
    s.total_count[lane] = c;
    s.total_mass[lane] = m;
  } else if (lane == kBins) {
    uint64_t a = ~0ull, o = 0;
    for (int warp = 0; warp < kWarps; ++warp) a &= s.key_and[warp], o |= s.key_or[warp];
    s.total_and = a;
    s.total_or = o;
  }
  __syncwarp();
  if (lane != 0) return;
  Walk& w = s.walk;
  const unsigned int* count = s.total_count;
  const double* mass = s.total_mass;
  const uint64_t a = s.total_and, o = s.total_or;
  unsigned int n = 0;
  double pass_mass = 0;  // the bins' sum, best digit first
  for (int b = kBins - 1; b >= 0; --b) {
    n += count[b];
    pass_mass += mass[b];
  }
  if (w.source == kGatherFromRow) {
    w.list_size = s.count;
    w.source = kFromList;
  }
  if constexpr (kMass) {
    if (w.level == 0) {
      // total = the bins' sum; the one-by-one sums differ from any tree over the same n terms by at most
      // 2 (n - 1) u sum, the goal's and the band's products by a few u more: (8 n + 64) u total covers them.
      const double total = pass_mass;
      if (!(total > 0) || !isfinite(total) || n != w.alive) {
        w.state = kUndecided;
        return;
      }
      const double band = w.high * (8.0 * n + 64.0) * 0x1p-53 * total;  // w.high holds 1, or 0 when planted
      w.goal = w.goal * total;                                           // w.goal holds top_p
      w.low = w.goal - band;
      w.high = w.goal + band;
    }
  }
  ++w.level;
  if (n == 0) {
    w.state = kUndecided;
    return;
  }
  int chosen = -1;
  if (n > 1) {
    double acc = w.mass_above;
    unsigned int above = 0;
    for (int b = kBins - 1; b >= 0; --b) {
      if (count[b] == 0) continue;
      if (kMass ? acc + mass[b] >= w.goal : w.rank < above + count[b]) {
        chosen = b;
        break;
      }
      acc += mass[b];
      above += count[b];
    }
    if (chosen < 0) {
      w.state = kUndecided;
      return;
    }
    if constexpr (kMass) w.mass_above = acc;
    else w.rank -= above;
    w.prefix |= static_cast<uint64_t>(chosen) << w.shift;
    w.mask |= static_cast<uint64_t>(kBins - 1) << w.shift;
    w.parent_and = a;
    w.parent_or = o;
  }
  const uint64_t varying = (a ^ o) & ~w.mask;
  if (n == 1 || varying == 0) {  // one key left: all its bits are known
    w.key = n == 1 ? a : w.prefix | (a & ~w.mask);
    w.key_mass = n == 1 ? pass_mass : mass[chosen];
    w.state = kFound;
    if (kMass && !(w.mass_above + w.key_mass >= w.high && w.mass_above <= w.low)) w.state = kUndecided;
    return;
  }
  const int top = 63 - __clzll(static_cast<long long>(varying));
  w.shift = top >= 3 ? top - 3 : 0;
  if (w.source == kFromRow && count[chosen] <= static_cast<unsigned int>(kChunk)) {
    w.source = kGatherFromRow;
    s.count = 0;
  }
  if (w.level > 80) w.state = kUndecided;  // never: each level fixes at least one varying bit
}

// The walk over the candidates `filter` keeps (`stats` of them, at least 2): by rank (`rank`, 0 = best) or by mass
// (`top_p`: the first key where the mass of it and all above reaches top_p * total). kFound leaves the key in
// `key`. `planted` (by mass) zeroes the bound band: the tree sums decide alone.
template <bool kMass>
__device__ int run_walk(const float* row, int vocab, const Filter& filter, const SetStats& stats, unsigned int rank,
                        double top_p, bool planted, uint64_t& key, Shared& s) {
  if (threadIdx.x == 0) {
    Walk& w = s.walk;
    w.prefix = w.mask = 0;
    w.parent_and = stats.all_and;
    w.parent_or = stats.all_or;
    w.key = 0;
    w.mass_above = w.key_mass = 0;
    w.goal = top_p;
    w.high = planted ? 0.0 : 1.0;
    w.low = 0;
    w.rank = rank;
    w.alive = stats.count;
    w.list_size = 0;
    const uint64_t varying = stats.all_and ^ stats.all_or;
    const int top = varying == 0 ? 0 : 63 - __clzll(static_cast<long long>(varying));
    w.shift = top >= 3 ? top - 3 : 0;
    w.source = stats.count <= static_cast<unsigned int>(kChunk) ? kGatherFromRow : kFromRow;
    w.state = varying == 0 ? kUndecided : kWalking;
    w.level = 0;
    s.count = 0;
  }
  for (;;) {
    __syncthreads();
    if (s.walk.state != kWalking) break;
    walk_pass<kMass>(row, vocab, filter, s);
    if (threadIdx.x < 32) walk_step<kMass>(s);
  }
  const int state = s.walk.state;
  key = s.walk.key;
  __syncthreads();
  return state;
}

// The largest 1 - u whose Gumbel noise -log(-log u) can still reach `gap` (a margin of 1e-6 + 1e-9 |gap| below
// it, far more than the roundings of the scores, the gap and this bound); NaN when `gap` is NaN (nothing skipped).
__device__ double gumbel_reach(double gap) {
  const double g = gap - 1e-6 - 1e-9 * fabs(gap);
  return -expm1(-exp(-g)) * (1.0 + 1e-12);
}

// The Gumbel max (logit / T + noise, ties to the lower id) over the candidates `filter` keeps, where every
// candidate's logit / T is at most `scaled_max`: a candidate's noise is computed only if its u is large enough to
// beat the thread's best so far (u's bits are a cheap hash; the logs are not). Any visiting order gives the same
// answer: a skipped candidate scores strictly below the best, and `better` orders (score, id) totally.
__device__ Best pruned_gumbel_best(const float* row, int vocab, const Filter& filter, const RowDraw& draw,
                                   double scaled_max) {
  const uint64_t key = keyed::row_key(draw.seed, draw.position);
  const double temperature = draw.temperature;
  Best mine{0.0, -1};
  double reach = 2.0;  // 1 - u above this cannot win; 2 = every candidate is computed
  for_row(row, vocab, [&](int id, float logit) {
    if (!filter.keeps(logit, id)) return;
    const uint64_t bits = keyed::uniform_bits(key, id);
    if (1.0 - keyed::uniform_of_bits(bits) > reach) return;
    const double scaled = static_cast<double>(logit) / temperature;
    const Best next = better(mine, Best{scaled + keyed::gumbel_of_bits(bits), id});
    if (next.id != mine.id) {
      mine = next;
      reach = gumbel_reach(mine.value - scaled_max);
    }
  });
  return mine;
}

}  // namespace
}  // namespace ls::cuda
