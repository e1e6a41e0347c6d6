// The split draw (session 10, samp10; sampling.cu's `split` kernel): a row's draw spread over CTAs of kSplitIds ids
// each, the way the drafter's split pick spreads its first round (scan_kernels.cu), so a sampled row costs about
// what a greedy one does instead of one CTA walking 65536 ids several times. Each chunk CTA loads its ids once into
// registers and leaves a partial: its greedy best (its max logit), and for a sampled row either its own top-k keys
// (top-k up to kSplitTopK) or its pruned Gumbel max with float weight sums relative to its own max (top-p). The CTA
// that finishes a row last (a ticket counter per row, reset by that CTA) combines them in chunk order:
// - greedy: the best of the bests;
// - top-k set: the row's top-k set merged from the chunks' (each list sorted; a key's rank is its place in its own
//   list plus the keys above it in the others), then draw_token's own arithmetic over that set;
// - otherwise (dpick9's verified draw): the winner is the Gumbel max of all candidates; min-p is checked on it, top-p
//   by its float mass above against top_p x the rescaled total outside keyed::top_p_band, by the CPU's one-by-one
//   sums inside it; a cut winner cuts every key at or below it, so the max is taken again over the keys above it;
// - top-k above kSplitTopK: the whole row by the bounded path (sampling.cu), in that last CTA.
// Included by sampling.cu only, after sampler_walk.cuh.
#pragma once

#include <cstdint>

#include "compute/cuda/keyed_draw.cuh"
#include "compute/cuda/sampler_walk.cuh"

namespace ls::cuda {
namespace {

constexpr int kSplitIds = 4096;                     // ids a chunk CTA draws over
constexpr int kSplitSlots = kSplitIds / kThreads;   // ids a thread holds in registers
constexpr int kSplitTopK = 64;                      // top-k up to this is merged from the chunks' own top-k keys
constexpr int kSplitMergeKeys = kChunk - kSplitTopK;  // the merge's room in s.chunk_keys (the set after it)
static_assert(kSplitSlots == 8, "two float4 a thread");

// One chunk's share of a row's draw.
struct ChunkPartial {
  Best greedy;                 // the chunk's first max (its max logit); id -1 when every logit is NaN
  Best winner;                 // the chunk's Gumbel max (rows drawn the verified way)
  double total, error, count;  // float weights relative to the chunk's max, their error bound, their number (top-p)
  int top_count;               // keys in `top` (top-k set rows)
  uint64_t top[kSplitTopK];    // the chunk's own min(top_k, candidates) largest order keys, descending
};

__host__ __device__ __forceinline__ int split_chunks(int vocab) { return (vocab + kSplitIds - 1) / kSplitIds; }

enum SplitRow : int { kSplitGreedy = 0, kSplitWhole = 1, kSplitTopKSet = 2, kSplitVerified = 3 };
__device__ __forceinline__ int split_row_kind(const RowDraw& d, int vocab, int chunks) {
  if (d.temperature <= 0.0f) return kSplitGreedy;
  if (!(d.top_k > 0 && d.top_k < vocab)) return kSplitVerified;
  return d.top_k <= kSplitTopK && chunks <= 256 && chunks * d.top_k <= kSplitMergeKeys ? kSplitTopKSet : kSplitWhole;
}

// A chunk's ids [begin, end): slot j of a thread is id begin + 4 (t + kThreads (j / 4)) + j % 4 from float4 loads
// where the chunk and row allow, else begin + t + kThreads j.
struct ChunkIds {
  int64_t begin, end;
  bool quads;
  __device__ int64_t id(int j) const {
    const int64_t t = threadIdx.x;
    return quads ? begin + 4 * (t + kThreads * (j >> 2)) + (j & 3) : begin + t + static_cast<int64_t>(kThreads) * j;
  }
};

// The chunk's logits in registers, NaN past its end (both loads issued before either is used).
__device__ __forceinline__ void load_chunk(const float* row, const ChunkIds& c, float (&v)[kSplitSlots]) {
  const float nan = __int_as_float(0x7fffffff);
  if (c.quads) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    float4 x[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int64_t q = c.begin / 4 + threadIdx.x + kThreads * k;
      x[k] = 4 * q < c.end ? row4[q] : make_float4(nan, nan, nan, nan);
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      v[4 * k] = x[k].x;
      v[4 * k + 1] = x[k].y;
      v[4 * k + 2] = x[k].z;
      v[4 * k + 3] = x[k].w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kSplitSlots; ++j) {
      const int64_t id = c.id(j);
      v[j] = id < c.end ? row[id] : nan;
    }
  }
}

// The key of descending rank `rank` among the block's keys in registers (0 = no key; unique otherwise): 8-bit
// digits, warp-aggregated counts, until the keys in play fit 256; then those are gathered and ranked by counting.
__device__ uint64_t select_in_registers(const uint64_t (&keys)[kSplitSlots], unsigned int rank, Shared& s) {
  const int lane = threadIdx.x & 31;
  uint64_t prefix = 0, mask = 0;
  for (int shift = 56;; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) s.histogram[b] = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kSplitSlots; ++j) {
      const uint64_t key = keys[j];
      const int digit = key != 0 && (key & mask) == prefix ? static_cast<int>((key >> shift) & 0xff) : -1;
      const unsigned int peers = __match_any_sync(0xffffffffu, digit);
      if (digit >= 0 && lane == __ffs(peers) - 1) atomicAdd(&s.histogram[digit], static_cast<unsigned int>(__popc(peers)));
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // lane L holds digits 255 - 8 L down to 248 - 8 L
      unsigned int counts[8], mine = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) mine += counts[i] = s.histogram[255 - 8 * lane - i];
      unsigned int through = mine;
      for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned int up = __shfl_up_sync(0xffffffffu, through, offset);
        if (lane >= offset) through += up;
      }
      unsigned int above = through - mine;
      if (rank >= above && rank < through) {
        for (int i = 0; i < 8; ++i) {
          if (rank < above + counts[i]) {
            s.select_prefix = prefix | (static_cast<uint64_t>(255 - 8 * lane - i) << shift);
            s.select_rank = rank - above;
            s.count = counts[i];
            break;
          }
          above += counts[i];
        }
      }
    }
    __syncthreads();
    prefix = s.select_prefix;
    rank = static_cast<unsigned int>(s.select_rank);
    const unsigned int in_play = s.count;
    mask |= 0xffull << shift;
    __syncthreads();
    if (in_play <= 256 || shift == 0) break;
  }
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kSplitSlots; ++j)
    if (keys[j] != 0 && (keys[j] & mask) == prefix) s.chunk_keys[atomicAdd(&s.count, 1u)] = keys[j];
  __syncthreads();
  const unsigned int gathered = s.count;
  for (unsigned int i = threadIdx.x; i < gathered; i += kThreads) {
    unsigned int greater = 0;
    for (unsigned int j = 0; j < gathered; ++j) greater += s.chunk_keys[j] > s.chunk_keys[i];
    if (greater == rank) s.select_prefix = s.chunk_keys[i];
  }
  __syncthreads();
  const uint64_t key = s.select_prefix;
  __syncthreads();
  return key;
}

// The chunk's min(k, candidates) largest keys, descending, into out->top and out->top_count.
__device__ void chunk_top_keys(const uint64_t (&keys)[kSplitSlots], int k, ChunkPartial* out, Shared& s) {
  unsigned int mine = 0;
#pragma unroll
  for (int j = 0; j < kSplitSlots; ++j) mine += keys[j] != 0;
  const unsigned int n = static_cast<unsigned int>(block_sum(static_cast<double>(mine), s));
  const uint64_t bottom = n > static_cast<unsigned int>(k) ? select_in_registers(keys, k - 1, s) : 1;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kSplitSlots; ++j)
    if (keys[j] != 0 && keys[j] >= bottom) s.chunk_keys[atomicAdd(&s.count, 1u)] = keys[j];
  __syncthreads();
  const unsigned int m = s.count;
  for (unsigned int i = threadIdx.x; i < m; i += kThreads) {
    unsigned int greater = 0;
    for (unsigned int j = 0; j < m; ++j) greater += s.chunk_keys[j] > s.chunk_keys[i];
    out->top[greater] = s.chunk_keys[i];
  }
  if (threadIdx.x == 0) out->top_count = static_cast<int>(m);
}

// The chunk's pruned Gumbel max over its candidates and, with `sums`, their float weights relative to its max.
__device__ void chunk_gumbel_round(const float (&v)[kSplitSlots], const ChunkIds& c, const RowDraw& draw,
                                   double chunk_max, bool sums, ChunkPartial* out, Shared& s) {
  const double temperature = draw.temperature, inverse = 1.0 / temperature, scaled_max = chunk_max / temperature;
  const uint64_t row_key = keyed::row_key(draw.seed, draw.position);
  Best mine{0.0, -1};
  double reach = 2.0, total = 0, error = 0, count = 0;
#pragma unroll
  for (int j = 0; j < kSplitSlots; ++j) {
    const float logit = v[j];
    if (isnan(logit)) continue;
    const int32_t id = static_cast<int32_t>(c.id(j));
    if (sums) {
      const keyed::FloatWeight w = keyed::float_weight(logit, chunk_max, inverse);
      total += w.weight;
      error += w.error;
      count += 1;
    }
    const uint64_t bits = keyed::uniform_bits(row_key, id);
    if (1.0 - keyed::uniform_of_bits(bits) > reach) continue;
    const Best next = better(mine, Best{static_cast<double>(logit) / temperature + keyed::gumbel_of_bits(bits), id});
    if (next.id != mine.id) {
      mine = next;
      reach = gumbel_reach(mine.value - scaled_max);
    }
  }
  const Best winner = block_best(mine, s);
  if (sums) {
    total = block_sum(total, s);
    error = block_sum(error, s);
    count = block_sum(count, s);
  }
  if (threadIdx.x == 0) {
    out->winner = winner;
    out->total = total;
    out->error = error;
    out->count = count;
  }
}

// The number of keys above `key` in a descending list of n.
__device__ __forceinline__ int keys_above(const uint64_t* list, int n, uint64_t key) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (list[mid] > key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The row's top-k set from the chunks' lists (each sorted descending) into s.chunk_keys[kSplitMergeKeys + rank],
// descending; returns its size (top_k, or every candidate when there are fewer).
__device__ int merge_top_keys(const ChunkPartial* parts, int chunks, int k, Shared& s) {
  for (int at = threadIdx.x; at < chunks * k; at += kThreads) {
    const int c = at / k, j = at % k;
    const int n = __ldcg(&parts[c].top_count);
    if (j == 0) s.histogram[c] = static_cast<unsigned int>(n);
    s.chunk_keys[at] = j < n ? __ldcg(&parts[c].top[j]) : 0;
  }
  __syncthreads();
  int total = 0;
  for (int c = 0; c < chunks; ++c) total += static_cast<int>(s.histogram[c]);
  for (int at = threadIdx.x; at < chunks * k; at += kThreads) {
    const int c = at / k, j = at % k;
    if (j >= static_cast<int>(s.histogram[c])) continue;
    const uint64_t key = s.chunk_keys[at];
    int rank = j;
    for (int other = 0; other < chunks && rank < k; ++other)
      if (other != c) rank += keys_above(s.chunk_keys + other * k, static_cast<int>(s.histogram[other]), key);
    if (rank < k) s.chunk_keys[kSplitMergeKeys + rank] = key;
  }
  __syncthreads();
  return total < k ? total : k;
}

// draw_token over a known set: keys [0, n) its order keys, descending (n <= kSplitTopK), with the CPU's own
// arithmetic: double weights from the row's max, the normaliser one by one in id order, the kept prefix best-first,
// min-p, the Gumbel max (ties to the lower id); `greedy` when nothing survives.
__device__ int32_t small_set_draw(const float* row, const uint64_t* keys, int n, const RowDraw& draw,
                                  double max_logit, int32_t greedy, Shared& s) {
  const double temperature = draw.temperature;
  const int j = threadIdx.x;
  keyed::SetMember m{-1, 0.0f, 0.0};
  if (j < n) m = keyed::set_member(row, keys, n, j, max_logit, temperature, s.chunk_weights, kSplitTopK);
  __syncthreads();
  if (threadIdx.x == 0) s.flag = keyed::set_kept(s.chunk_weights, kSplitTopK, n, draw.top_p);
  __syncthreads();
  const int kept = s.flag;
  Best mine{0.0, -1};
  if (j < kept && !(draw.min_p > 0.0f && m.weight < static_cast<double>(draw.min_p)))
    mine = Best{static_cast<double>(m.logit) / temperature + keyed::gumbel(draw.seed, draw.position, m.id), m.id};
  const Best best = block_best(mine, s);
  return best.id < 0 ? greedy : best.id;
}

// The float mass (weights relative to the row's max) of the candidates above `key`, and its error bound.
__device__ void mass_above(const float* row, int vocab, uint64_t key, double max_logit, double inverse,
                           double& above, double& above_error, Shared& s) {
  double mass = 0, error = 0;
  for_row(row, vocab, [&](int id, float logit) {
    if (isnan(logit) || order_key(logit, id) <= key) return;
    const keyed::FloatWeight w = keyed::float_weight(logit, max_logit, inverse);
    mass += w.weight;
    error += w.error;
  });
  above = block_sum(mass, s);
  above_error = block_sum(error, s);
}

}  // namespace
}  // namespace ls::cuda
