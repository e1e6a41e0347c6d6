// The keyed sampler on the device: one block per row computes exactly compute::draw_token (greedy argmax, or Gumbel
// max over the top-k / top-p / min-p survivors with the same splitmix64 keys), doubles where the CPU uses doubles.
//
// Candidate order is the CPU's (larger logit first, ties to the lower id) as one 64-bit key per id. The CPU's top-p
// cut is defined by one-by-one sums (the normaliser in id order, the kept mass in probability order). The default
// path (sampler_walk.cuh) finds top-k and the top-p cut by a radix walk over the keys with tree sums, and takes the
// top-p cut only where error bounds prove the one-by-one sums cut at the same key; elsewhere (planted near-ties,
// a fraction ~1e-6 of flat rows) it adds the sums one by one, as the `legacy` path does for every row.
#include <cuda_bf16.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compute/cuda/kernels.h"
#include "compute/cuda/keyed_draw.cuh"
#include "compute/cuda/sampler_split.cuh"
#include "compute/cuda/sampler_walk.cuh"

namespace ls::cuda {
namespace {

using keyed::gumbel;

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

// Sorts s.chunk_keys[0, kChunk) descending (bitonic; unused slots hold 0 and sink to the end).
__device__ void sort_chunk_descending(Shared& s) {
  for (int size = 2; size <= kChunk; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < kChunk; i += kThreads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const bool descending = (i & size) == 0;
        const uint64_t a = s.chunk_keys[i], b = s.chunk_keys[j];
        if (descending ? a < b : a > b) {
          s.chunk_keys[i] = b;
          s.chunk_keys[j] = a;
        }
      }
    }
  __syncthreads();
}

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

// Kernel variants (SamplerKernel, kernels.h): `legacy` (every sum one by one, select by 8-bit radix passes, every
// survivor's noise computed), `bounded` (sampler_walk.cuh), `split` (sampler_split.cuh), and planted faults the
// tests must catch: the bound band set to zero (tree or float sums decide near-ties alone), the top-p cut one
// candidate late.
enum Mode : int {
  kLegacy = 0,
  kBounded = 1,
  kBoundedBandPlantedZero = 2,
  kBoundedCutPlantedLate = 3,
  kSplit = 4,
  kSplitBandPlantedZero = 5
};
constexpr int kDefaultMode = kBounded;  // batch s8A: every sampler test green, a flat top-p row 8.54 -> 0.37 ms
static_assert(kSplit == static_cast<int>(SamplerKernel::Split) &&
                  kSplitBandPlantedZero == static_cast<int>(SamplerKernel::SplitBandPlantedZero),
              "the kernel variants are SamplerKernel's numbers");

// The legacy row: counts by block votes, top-k and the top-p walk by one-by-one sums, every survivor's noise.
__device__ int32_t legacy_row(const float* row, int vocab, const RowDraw& draw, Shared& s) {
  const bool use_top_k = draw.top_k > 0 && draw.top_k < vocab;
  const bool use_top_p = draw.top_p < 1.0f;
  const bool use_min_p = draw.min_p > 0.0f;
  Filter filter;
  filter.temperature = draw.temperature;
  if (use_top_k) {
    unsigned int alive = 0;
    for (int base = 0; base < vocab; base += kThreads) {
      const int id = base + threadIdx.x;
      alive += block_count(id < vocab && !isnan(row[id]), s);
    }
    if (alive > static_cast<unsigned int>(draw.top_k))
      filter.min_key = select_rank(row, vocab, filter, static_cast<unsigned int>(draw.top_k - 1), s);
  }
  if (use_top_p || use_min_p) {
    Best mine{0.0, -1};
    for (int id = threadIdx.x; id < vocab; id += kThreads)
      if (filter.keeps(row[id], id)) mine = better(mine, Best{row[id], id});
    const Best top = block_best(mine, s);
    filter.max_logit = top.id < 0 ? 0.0 : top.value;
  }
  if (use_top_p) {
    unsigned int alive = 0;
    for (int base = 0; base < vocab; base += kThreads) {
      const int id = base + threadIdx.x;
      alive += block_count(id < vocab && filter.keeps(row[id], id), s);
    }
    top_p_one_by_one(row, vocab, filter, alive, draw.top_p, s);
  }
  filter.use_min_p = use_min_p;
  filter.min_p = draw.min_p;
  Best mine{0.0, -1};
  for (int id = threadIdx.x; id < vocab; id += kThreads) {
    const float logit = row[id];
    if (!filter.keeps(logit, id)) continue;
    const double scaled = static_cast<double>(logit) / static_cast<double>(draw.temperature);
    mine = better(mine, Best{scaled + gumbel(draw.seed, draw.position, id), id});
  }
  const Best all = block_best(mine, s);
  return all.id >= 0 ? all.id : greedy_row(row, vocab, s);
}

// The bounded row: top-k by the rank walk, the top-p cut by the mass walk where its bounds decide (one by one
// where they do not), min-p by bands, and the noise only of candidates whose u can still win.
template <int kMode>
__device__ int32_t bounded_row(const float* row, int vocab, const RowDraw& draw, Shared& s) {
  const bool use_top_k = draw.top_k > 0 && draw.top_k < vocab;
  const bool use_top_p = draw.top_p < 1.0f;
  Filter filter;
  filter.temperature = draw.temperature;
  SetStats stats = set_stats(row, vocab, filter, s);
  if (use_top_k && stats.count > static_cast<unsigned int>(draw.top_k)) {
    uint64_t key = 0;
    const unsigned int rank = static_cast<unsigned int>(draw.top_k - 1);
    const int state = run_walk<false>(row, vocab, filter, stats, rank, 0.0, false, key, s);
    filter.min_key = state == kFound ? key : select_rank(row, vocab, filter, rank, s);
    stats = set_stats(row, vocab, filter, s);
  }
  // The largest survivor survives every filter: its logit is the max for the weights and the noise bound.
  filter.max_logit = stats.count == 0 ? 0.0 : static_cast<double>(row[key_id(stats.max_key)]);
  if (use_top_p && stats.count > 1) {
    uint64_t cut = 0;
    const int state = run_walk<true>(row, vocab, filter, stats, 0, static_cast<double>(draw.top_p),
                                     kMode == kBoundedBandPlantedZero, cut, s);
    if (state == kFound) {
      filter.min_key = kMode == kBoundedCutPlantedLate ? next_key_below(row, vocab, filter, cut, s) : cut;
    } else {
      top_p_one_by_one(row, vocab, filter, stats.count, draw.top_p, s);
    }
  }
  if (draw.min_p > 0.0f) filter.set_min_p(draw.min_p);
  const double scaled_max = filter.max_logit / static_cast<double>(draw.temperature);
  const Best all = block_best(pruned_gumbel_best(row, vocab, filter, draw, scaled_max), s);
  return all.id >= 0 ? all.id : greedy_row(row, vocab, s);
}

template <int kMode>
__global__ void __launch_bounds__(kThreads) draw_kernel(const float* logits, int vocab, const RowDraw* draws,
                                                        int32_t* out_tokens) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  Shared& s = *reinterpret_cast<Shared*>(shared_raw);
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  const RowDraw draw = draws[r];
  int32_t token = 0;
  if (draw.temperature <= 0.0f) {
    token = greedy_row(row, vocab, s);
  } else if constexpr (kMode == kLegacy) {
    token = legacy_row(row, vocab, draw, s);
  } else if (draw.top_p < 1.0f || (draw.top_k > 0 && draw.top_k < vocab)) {
    token = bounded_row<kMode>(row, vocab, draw, s);
  } else {
    // No cut to find (no filter, or min-p alone): legacy's single pass over the row was as fast for one row and
    // 2.7-3.9x faster for 132 rows at once in batch s8B (0.116 / 0.173 ms against 0.449 / 0.459).
    token = legacy_row(row, vocab, draw, s);
  }
  if (threadIdx.x == 0) out_tokens[r] = token;
}

// The verified draw of a row whose chunks took the first round (sampler_split.cuh): the winner, min-p on it, top-p
// by its float mass above outside the band (one by one inside it), the max again above a cut winner.
template <int kMode>
__device__ int32_t verified_row(const float* row, int vocab, const RowDraw& draw, const ChunkPartial* parts,
                                int chunks, Best greedy, Shared& s) {
  const double temperature = draw.temperature, max_logit = greedy.value;
  double total = 0, error = 0, count = 0;  // chunk order, each chunk's sums rescaled from its max to the row's
  Best winner{0.0, -1};
  for (int c = 0; c < chunks; ++c) {
    const double chunk_max = __ldcg(&parts[c].greedy.value);
    if (__ldcg(&parts[c].greedy.id) < 0) continue;  // every logit NaN
    const double scale = exp((chunk_max - max_logit) / temperature);
    total += scale * __ldcg(&parts[c].total);
    error += scale * __ldcg(&parts[c].error);
    count += __ldcg(&parts[c].count);
    winner = better(winner, Best{__ldcg(&parts[c].winner.value), __ldcg(&parts[c].winner.id)});
  }
  const bool use_top_p = draw.top_p < 1.0f;
  Filter min_p;
  min_p.temperature = temperature;
  min_p.max_logit = max_logit;
  if (draw.min_p > 0.0f) min_p.set_min_p(draw.min_p);
  for (;;) {
    if (winner.id < 0) return greedy.id;  // nothing survives: draw_token takes the greedy token
    const float winner_logit = row[winner.id];
    const uint64_t winner_key = order_key(winner_logit, winner.id);
    bool keeps = min_p.keeps(winner_logit, winner.id);
    if (keeps && use_top_p) {
      double above = 0, above_error = 0;
      mass_above(row, vocab, winner_key, max_logit, 1.0 / temperature, above, above_error, s);
      const double target = static_cast<double>(draw.top_p) * total;
      const double band =
          kMode == kSplitBandPlantedZero ? 0.0 : keyed::top_p_band(above_error, error, draw.top_p, count, total);
      const bool decidable = total > 0 && isfinite(total);
      if (decidable && above + band < target) {
        keeps = true;
      } else if (decidable && above - band >= target) {
        keeps = false;
      } else {
        Filter exact;
        exact.temperature = temperature;
        exact.max_logit = max_logit;
        top_p_one_by_one(row, vocab, exact, static_cast<unsigned int>(count), draw.top_p, s);
        keeps = winner_key >= exact.min_key;
      }
    }
    if (keeps) return winner.id;
    // Top-p or min-p cuts the winner, so every key at or below it: the max again over the keys above it (min-p
    // applied there too, so it cuts at most once).
    Filter above_winner = min_p;
    above_winner.min_key = winner_key + 1;
    winner = block_best(pruned_gumbel_best(row, vocab, above_winner, draw, max_logit / temperature), s);
  }
}

// The split draw: grid (chunk of kSplitIds ids, row); each chunk CTA leaves its partial, the row's last one draws.
// Two CTAs an SM at least: the registers the rare paths of the last CTA (bounded_row, the fallbacks) want would
// leave one, and the chunk work needs few.
template <int kMode>
__global__ void __launch_bounds__(kThreads, 2) split_draw_kernel(const float* logits, int vocab, const RowDraw* draws,
                                                              int32_t* out_tokens, ChunkPartial* partials,
                                                              unsigned int* tickets) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  Shared& s = *reinterpret_cast<Shared*>(shared_raw);
  const int64_t r = blockIdx.y;
  const int chunks = static_cast<int>(gridDim.x);
  const float* row = logits + r * vocab;
  const RowDraw draw = draws[r];
  const int kind = split_row_kind(draw, vocab, chunks);
  ChunkIds ids;
  ids.begin = static_cast<int64_t>(blockIdx.x) * kSplitIds;
  ids.end = min(static_cast<int64_t>(vocab), ids.begin + kSplitIds);
  ids.quads = ((ids.begin | ids.end) & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  float v[kSplitSlots];
  load_chunk(row, ids, v);
  Best mine{0.0, -1};
#pragma unroll
  for (int j = 0; j < kSplitSlots; ++j)
    if (!isnan(v[j])) mine = better(mine, Best{v[j], static_cast<int32_t>(ids.id(j))});
  const Best greedy = block_best(mine, s);
  ChunkPartial* parts = partials + r * chunks;
  ChunkPartial* out = parts + blockIdx.x;
  if (kind == kSplitTopKSet) {
    uint64_t keys[kSplitSlots];
#pragma unroll
    for (int j = 0; j < kSplitSlots; ++j) keys[j] = isnan(v[j]) ? 0 : order_key(v[j], ids.id(j));
    chunk_top_keys(keys, draw.top_k, out, s);
  } else if (kind == kSplitVerified && greedy.id >= 0) {
    chunk_gumbel_round(v, ids, draw, greedy.value, draw.top_p < 1.0f, out, s);
  }
  if (threadIdx.x == 0) out->greedy = greedy;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    s.flag = atomicAdd(&tickets[r], 1u) == static_cast<unsigned int>(chunks - 1);
    __threadfence();
  }
  __syncthreads();
  if (!s.flag) return;  // uniform: the row's last chunk CTA goes on
  if (threadIdx.x == 0) tickets[r] = 0;
  Best best{0.0, -1};
  for (int c = 0; c < chunks; ++c) best = better(best, Best{__ldcg(&parts[c].greedy.value), __ldcg(&parts[c].greedy.id)});
  int32_t token = best.id < 0 ? 0 : best.id;
  if (kind != kSplitGreedy && best.id >= 0) {
    if (kind == kSplitWhole) {
      token = bounded_row<kBounded>(row, vocab, draw, s);
    } else if (kind == kSplitTopKSet) {
      const int n = merge_top_keys(parts, chunks, draw.top_k, s);
      token = small_set_draw(row, s.chunk_keys + kSplitMergeKeys, n, draw, best.value, best.id, s);
    } else {
      token = verified_row<kMode>(row, vocab, draw, parts, chunks, best, s);
    }
  }
  if (threadIdx.x == 0) out_tokens[r] = token;
}

// The kernel variant: LS_SAMPLER read once (sampler_kernel_named), or set_sampler_kernel.
std::atomic<int> sampler_mode{static_cast<int>(sampler_kernel_named(std::getenv("LS_SAMPLER")))};

template <int kMode>
void launch(const float* logits, int64_t rows, int vocab, const RowDraw* draws, int32_t* out_tokens,
            cudaStream_t stream) {
  draw_kernel<kMode><<<static_cast<unsigned>(rows), kThreads, sizeof(Shared), stream>>>(logits, vocab, draws,
                                                                                        out_tokens);
}

size_t split_partial_bytes(int64_t rows, int vocab) {
  return static_cast<size_t>(rows) * split_chunks(vocab) * sizeof(ChunkPartial);
}

template <int kMode>
void launch_split(const float* logits, int64_t rows, int vocab, const RowDraw* draws, int32_t* out_tokens,
                  const DrawScratch& scratch, cudaStream_t stream) {
  // A ticket per reserved row (zeroed at allocation; each row's last CTA zeroes its own again), then the partials.
  auto* base = static_cast<unsigned char*>(scratch.data());
  auto* tickets = reinterpret_cast<unsigned int*>(base);
  auto* partials = reinterpret_cast<ChunkPartial*>(base + DrawScratch::ticket_bytes(scratch.rows()));
  const dim3 grid(static_cast<unsigned>(split_chunks(vocab)), static_cast<unsigned>(rows));
  split_draw_kernel<kMode><<<grid, kThreads, sizeof(Shared), stream>>>(logits, vocab, draws, out_tokens, partials,
                                                                      tickets);
}

}  // namespace

SamplerKernel sampler_kernel_named(const char* value) {
  if (value != nullptr && std::strcmp(value, "legacy") == 0) return SamplerKernel::Legacy;
  if (value != nullptr && std::strcmp(value, "bounded") == 0) return SamplerKernel::Bounded;
  if (value != nullptr && std::strcmp(value, "split") == 0) return SamplerKernel::Split;
  return static_cast<SamplerKernel>(kDefaultMode);
}
void set_sampler_kernel(SamplerKernel kernel) { sampler_mode.store(static_cast<int>(kernel)); }
SamplerKernel sampler_kernel() { return static_cast<SamplerKernel>(sampler_mode.load()); }

size_t DrawScratch::ticket_bytes(int64_t rows) { return (static_cast<size_t>(rows) * sizeof(unsigned int) + 255) / 256 * 256; }

size_t DrawScratch::bytes_needed(int64_t rows, int vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  return ticket_bytes(rows) + split_partial_bytes(rows, vocab);
}

Status DrawScratch::reserve(int64_t rows, int vocab) {
  if (rows < 0 || vocab < 0) return Status(ErrorCode::InvalidArgument, "DrawScratch::reserve of negative size");
  if (rows <= rows_ && bytes_needed(rows_, vocab) <= buffer_.bytes()) return ok_status();
  const int64_t keep = rows > rows_ ? rows : rows_;
  const size_t needed = bytes_needed(keep, vocab);
  rows_ = 0;
  LS_RETURN_IF_ERROR(buffer_.allocate(needed));
  LS_CUDA_TRY(cudaMemset(buffer_.data(), 0, needed));  // the split draw's tickets start at zero
  rows_ = keep;
  return ok_status();
}

Status draw_rows(const float* logits, int64_t rows, int vocab, const RowDraw* draws, int32_t* out_tokens,
                 const DrawScratch& scratch, cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  if (vocab <= 0 || rows > 0x7fffffff)
    return Status(ErrorCode::InvalidArgument,
                  "draw_rows: rows " + std::to_string(rows) + ", vocab " + std::to_string(vocab));
  int mode = sampler_mode.load(std::memory_order_relaxed);
  // The split draw needs its scratch (reserved for at least these rows) and a grid row per row.
  const bool split_fits = rows <= scratch.rows() && rows <= 65535 &&
                          scratch.bytes() >= DrawScratch::ticket_bytes(scratch.rows()) + split_partial_bytes(rows, vocab);
  if ((mode == kSplit || mode == kSplitBandPlantedZero) && !split_fits) mode = kBounded;
  switch (mode) {
    case kLegacy: launch<kLegacy>(logits, rows, vocab, draws, out_tokens, stream); break;
    case kBoundedBandPlantedZero: launch<kBoundedBandPlantedZero>(logits, rows, vocab, draws, out_tokens, stream); break;
    case kBoundedCutPlantedLate: launch<kBoundedCutPlantedLate>(logits, rows, vocab, draws, out_tokens, stream); break;
    case kSplit: launch_split<kSplit>(logits, rows, vocab, draws, out_tokens, scratch, stream); break;
    case kSplitBandPlantedZero:
      launch_split<kSplitBandPlantedZero>(logits, rows, vocab, draws, out_tokens, scratch, stream);
      break;
    default: launch<kBounded>(logits, rows, vocab, draws, out_tokens, stream);
  }
  LS_CUDA_TRY_LAUNCH("draw_kernel");
  return ok_status();
}

}  // namespace ls::cuda
