// The keyed sampler on the device: each kernel computes exactly compute::draw_token (greedy argmax, or Gumbel max
// over the top-k / top-p / min-p survivors with the same splitmix64 keys), doubles where the CPU uses doubles.
//
// Candidate order is the CPU's (larger logit first, ties to the lower id) as one 64-bit key per id. The CPU's top-p
// cut is defined by one-by-one sums (the normaliser in id order, the kept mass in probability order). The bounded
// path (one block a row, sampler_walk.cuh) finds top-k and the top-p cut by a radix walk over the keys with tree
// sums, and takes the top-p cut only where error bounds prove the one-by-one sums cut at the same key; elsewhere
// (planted near-ties, a fraction ~1e-6 of flat rows) it adds the sums one by one (sampler_exact.cuh), as the
// `legacy` path does for every row. The split path (sampler_split.cuh) spreads a row over CTAs and checks only
// the Gumbel winner against top-p and min-p.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compute/cuda/kernels.h"
#include "compute/cuda/keyed_draw.cuh"
#include "compute/cuda/sampler_exact.cuh"
#include "compute/cuda/sampler_split.cuh"
#include "compute/cuda/sampler_walk.cuh"

namespace ls::cuda {
namespace {

using keyed::gumbel;

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
// Split since batch s10B (interleaved A/B, synth 1.2B): plain sampled decoding 980 / 2810 / 10345 -> 1075 / 3647 /
// 12589 tok/s at 1 / 4 / 16 streams, greedy 1-1.5 % faster at 1-64 streams; a flat top-p row 0.333 -> 0.052 ms.
// LS_SAMPLER=bounded keeps the one-CTA-a-row walk (batch s8A).
constexpr int kDefaultMode = kSplit;
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
__device__ __noinline__ int32_t verified_row(const float* row, int vocab, const RowDraw& draw,
                                             const ChunkPartial* parts, int chunks, Best greedy, Shared& s) {
  const double temperature = draw.temperature, max_logit = greedy.value;
  const bool use_top_p = draw.top_p < 1.0f;
  Best mine{0.0, -1};  // the winner: the best of the chunks' (a total order: any grouping)
  for (int c = threadIdx.x; c < chunks; c += kThreads)
    if (__ldcg(&parts[c].greedy.id) >= 0) mine = better(mine, Best{__ldcg(&parts[c].winner.value), __ldcg(&parts[c].winner.id)});
  Best winner = block_best(mine, s);
  double total = 0, error = 0, count = 0;  // chunk order, each chunk's sums rescaled from its max to the row's
  if (use_top_p) {
    for (int c = threadIdx.x; c < chunks; c += kThreads) {  // each chunk's scale by its own thread
      const bool some = __ldcg(&parts[c].greedy.id) >= 0;  // else every logit NaN: nothing to add
      const double scale = some ? exp((__ldcg(&parts[c].greedy.value) - max_logit) / temperature) : 0.0;
      s.chunk_weights[3 * c] = some ? scale * __ldcg(&parts[c].total) : 0.0;
      s.chunk_weights[3 * c + 1] = some ? scale * __ldcg(&parts[c].error) : 0.0;
      s.chunk_weights[3 * c + 2] = some ? __ldcg(&parts[c].count) : 0.0;
    }
    __syncthreads();
    for (int c = 0; c < chunks; ++c) {
      total += s.chunk_weights[3 * c];
      error += s.chunk_weights[3 * c + 1];
      count += s.chunk_weights[3 * c + 2];
    }
    __syncthreads();
  }
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

// The row's draw by its last chunk CTA, from every chunk's partial (out of line: its registers and spills stay
// here, off the chunk work).
template <int kMode>
__device__ __noinline__ int32_t finish_split_row(const float* row, int vocab, const RowDraw& draw, int kind,
                                                 const ChunkPartial* parts, int chunks, Shared& s) {
  Best mine{0.0, -1};
  for (int c = threadIdx.x; c < chunks; c += kThreads)
    mine = better(mine, Best{__ldcg(&parts[c].greedy.value), __ldcg(&parts[c].greedy.id)});
  const Best best = block_best(mine, s);
  if (best.id < 0) return 0;  // every logit NaN: draw_token's greedy token 0
  if (kind == kSplitGreedy) return best.id;
  if (kind == kSplitWhole) return bounded_row<kBounded>(row, vocab, draw, s);
  if (kind == kSplitTopKSet) {
    const int n = merge_top_keys(parts, chunks, draw.top_k, s);
    return small_set_draw(row, s.chunk_keys + kSplitMergeKeys, n, draw, best.value, best.id, s);
  }
  return verified_row<kMode>(row, vocab, draw, parts, chunks, best, s);
}

// The split draw: grid (group of `per_cta` chunks of kSplitIds ids, row); each chunk leaves its partial, the row's
// last CTA (a ticket) draws. Many rows take several chunks a CTA (fewer CTAs to schedule and fence). Two CTAs an SM
// at least: the out-of-line finish spills rather than costing the chunk work its occupancy.
template <int kMode>
__global__ void __launch_bounds__(kThreads, 2) split_draw_kernel(const float* logits, int vocab, const RowDraw* draws,
                                                              int32_t* out_tokens, ChunkPartial* partials,
                                                              unsigned int* tickets, int chunks, int per_cta) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  Shared& s = *reinterpret_cast<Shared*>(shared_raw);
  const int64_t r = blockIdx.y;
  const float* row = logits + r * vocab;
  const RowDraw draw = draws[r];
  const int kind = split_row_kind(draw, vocab, chunks);
  ChunkPartial* parts = partials + r * chunks;
  for (int c = blockIdx.x * per_cta; c < chunks && c < (blockIdx.x + 1) * per_cta; ++c) {
    ChunkIds ids;
    ids.begin = static_cast<int64_t>(c) * kSplitIds;
    ids.end = min(static_cast<int64_t>(vocab), ids.begin + kSplitIds);
    ids.quads = ((ids.begin | ids.end) & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0;
    float v[kSplitSlots];
    load_chunk(row, ids, v);
    Best mine{0.0, -1};
#pragma unroll
    for (int j = 0; j < kSplitSlots; ++j)
      if (!isnan(v[j])) mine = better(mine, Best{v[j], static_cast<int32_t>(ids.id(j))});
    const Best greedy = block_best(mine, s);
    ChunkPartial* out = parts + c;
    if (kind == kSplitTopKSet) {
      uint64_t keys[kSplitSlots];
#pragma unroll
      for (int j = 0; j < kSplitSlots; ++j) keys[j] = isnan(v[j]) ? 0 : order_key(v[j], ids.id(j));
      chunk_top_keys(keys, draw.top_k, out, s);
    } else if (kind == kSplitVerified && greedy.id >= 0) {
      chunk_gumbel_round(v, ids, draw, greedy.value, draw.top_p < 1.0f, out, s);
    }
    if (threadIdx.x == 0) out->greedy = greedy;
    __syncthreads();  // shared memory is the next chunk's
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    s.flag = atomicAdd(&tickets[r], 1u) == gridDim.x - 1;
    __threadfence();
  }
  __syncthreads();
  if (!s.flag) return;  // uniform: the row's last CTA goes on
  if (threadIdx.x == 0) tickets[r] = 0;
  const int32_t token = finish_split_row<kMode>(row, vocab, draw, kind, parts, chunks, s);
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
  // About two CTAs an SM (the kernel's occupancy) in one wave: several chunks a CTA once rows x chunks exceed it
  // (batch s10A: 64 rows of 16 chunks, one a CTA, took 0.039 ms greedy against the one-CTA-a-row kernel's 0.023).
  static const int sms = [] {
    int device = 0, count = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return count > 0 ? count : 1;
  }();
  const int chunks = split_chunks(vocab);
  const int64_t slots = 2 * static_cast<int64_t>(sms);
  const int per_cta = static_cast<int>(std::min<int64_t>(chunks, std::max<int64_t>(1, (rows * chunks + slots - 1) / slots)));
  const dim3 grid(static_cast<unsigned>((chunks + per_cta - 1) / per_cta), static_cast<unsigned>(rows));
  split_draw_kernel<kMode><<<grid, kThreads, sizeof(Shared), stream>>>(logits, vocab, draws, out_tokens, partials,
                                                                      tickets, chunks, per_cta);
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
