// The verified keyed draw (session 9) and draft_pick, the variant switch of a row's draw (scan_pick.cuh has the
// radix one). Included by CUDA sources only; internal linkage per file.
#pragma once

#include <cmath>
#include <cstdint>

#include "draft/dspark/cuda/scan_pick.cuh"

namespace ls::dspark::cuda {
namespace {

// ---- The verified keyed draw (session 9) ----
//
// draw_token keeps top-k, then top-p (a prefix in candidate order: candidate c survives iff the CPU's one-by-one
// mass of the candidates above it is below top_p x the one-by-one normaliser), then min-p, and draws the Gumbel max
// of the survivors. So: take the pruned Gumbel max over the top-k and min-p survivors first; if top-p keeps that
// winner it is the draw; if top-p cuts it, it cuts every key at or below it too, so exclude those and take the max
// again (the winner is a survivor with chance >= top_p, so ~1.1 rounds). Whether top-p keeps the winner is decided
// by float weights summed in double with a bound on every error (weights, sums, products) against the CPU's
// one-by-one sums of double weights; where the bound cannot decide (the target within ~1e-6 of the mass above the
// winner) by those one-by-one sums themselves. Two passes over the row for most rows instead of the radix
// variant's ~10 passes of double exps and a noise per survivor.

// Calls visit(id, logit) for this thread's ids in [begin, end) of the row (blockDim.x == Threads), loaded from L2
// (the fused step's last CTA reads rows other CTAs wrote), 4 ids a round from a float4 where the range allows (the
// next float4 loaded before the 4 visits). Kept lean: the pick's registers count in every kernel that holds it.
template <int Threads, typename Visit>
__device__ __forceinline__ void for_ids(const float* row, int64_t begin, int64_t end, const Visit& visit) {
  if (((begin | end) & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int64_t quads = end / 4;
    int64_t q = begin / 4 + threadIdx.x;
    float4 next = q < quads ? __ldcg(row4 + q) : make_float4(0, 0, 0, 0);
#pragma unroll 1
    for (; q < quads; q += Threads) {
      const float4 v = next;
      if (q + Threads < quads) next = __ldcg(row4 + q + Threads);
      const int64_t first = 4 * q;
      visit(first, v.x);
      visit(first + 1, v.y);
      visit(first + 2, v.z);
      visit(first + 3, v.w);
    }
  } else {
    for (int64_t id = begin + threadIdx.x; id < end; id += Threads) visit(id, __ldcg(row + id));
  }
}
template <int Threads, typename Visit>
__device__ __forceinline__ void for_ids(const float* row, int64_t vocab, const Visit& visit) {
  for_ids<Threads>(row, int64_t{0}, vocab, visit);
}

// The CPU's normaliser: the candidates' (keys >= floor) double weights added one by one in id order (warp 0 adds;
// a non-candidate adds +0, which leaves the sum's bits alone).
template <int Threads>
__device__ double one_by_one_total(const float* row, int64_t vocab, uint64_t floor, double max_logit,
                                   double temperature, PickScratch& s) {
  if (threadIdx.x < kWarp) {
    double total = 0;
    for (int64_t base = 0; base < vocab; base += kWarp) {
      const int64_t id = base + threadIdx.x;
      const float logit = id < vocab ? __ldcg(row + id) : NAN;
      double weight = 0;
      if (!isnan(logit) && order_key(logit, id) >= floor) weight = exp((static_cast<double>(logit) - max_logit) / temperature);
      for (int lane = 0; lane < kWarp; ++lane) total += __shfl_sync(0xffffffffu, weight, lane);
    }
    if (threadIdx.x == 0) s.exact = total;
  }
  __syncthreads();
  const double total = s.exact;
  __syncthreads();
  return total;
}

// Sorts s.batch descending (empty slots hold 0 and sink to the end).
template <int Threads>
__device__ void sort_batch_descending(PickScratch& s) {
  ls::cuda::keyed::sort_descending<kBatchKeys, Threads>(s.batch);
}

// Like for_ids over the whole row, but every lane of a warp visits equally often (ids past the row with a NaN
// logit), for warp-wide votes inside `visit`.
template <int Threads, typename Visit>
__device__ __forceinline__ void for_ids_uniform(const float* row, int64_t begin, int64_t vocab, const Visit& visit) {
  if (((begin | vocab) & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int64_t quads = vocab / 4;
    for (int64_t base = begin / 4; base < quads; base += Threads) {
      const int64_t q = base + threadIdx.x;
      const float4 v = q < quads ? __ldcg(row4 + q) : make_float4(NAN, NAN, NAN, NAN);
      visit(4 * q, v.x);
      visit(4 * q + 1, v.y);
      visit(4 * q + 2, v.z);
      visit(4 * q + 3, v.w);
    }
  } else {
    for (int64_t base = begin; base < vocab; base += Threads) {
      const int64_t id = base + threadIdx.x;
      visit(id, id < vocab ? __ldcg(row + id) : NAN);
    }
  }
}

// The `goal`-th largest order key (goal >= 1) among the candidates with floor <= key < ceiling; 0 when there are
// fewer. 8-bit radix passes (warp-aggregated counts, 4 ids a lane a round) until the keys in play fit s.batch,
// then those are gathered, sorted and read off: 3-4 row passes on a flat row instead of the radix variant's 8.
template <int Threads>
__device__ uint64_t select_key(const float* row, int64_t begin, int64_t vocab, uint64_t floor, uint64_t ceiling,
                               int64_t goal, PickScratch& s) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.remaining = goal;
    s.flag = 1;  // 1 walking, 0 fewer than goal, 2 gather
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  uint64_t mask = 0;  // the prefix's fixed bytes
  int flag = 1;
  for (int shift = 56; shift >= 0 && flag == 1; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += Threads) s.counts[b] = 0;
    __syncthreads();
    const uint64_t prefix = s.prefix;
    for_ids_uniform<Threads>(row, begin, vocab, [&](int64_t id, float logit) {
      int digit = -1;
      if (!isnan(logit)) {
        const uint64_t key = order_key(logit, id);
        if (key >= floor && key < ceiling && (key & mask) == prefix) digit = static_cast<int>((key >> shift) & 0xff);
      }
      const unsigned int peers = __match_any_sync(0xffffffffu, digit);
      if (digit >= 0 && lane == __ffs(peers) - 1) atomicAdd(&s.counts[digit], static_cast<unsigned int>(__popc(peers)));
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1;
      for (int b = 255; b >= 0; --b) {
        if (s.counts[b] == 0) continue;
        if (static_cast<int64_t>(s.counts[b]) >= s.remaining) {
          chosen = b;
          break;
        }
        s.remaining -= s.counts[b];
      }
      if (chosen < 0) {
        s.flag = 0;
      } else {
        s.prefix |= static_cast<uint64_t>(chosen) << shift;
        if (shift > 0 && s.counts[chosen] <= static_cast<unsigned int>(kBatchKeys)) s.flag = 2;
      }
    }
    mask |= 0xffull << shift;
    __syncthreads();
    flag = s.flag;
  }
  if (flag == 0) {
    __syncthreads();
    return 0;
  }
  if (flag == 2) {  // the keys in play (at most kBatchKeys) gathered and sorted
    const uint64_t prefix = s.prefix;
    for (int i = threadIdx.x; i < kBatchKeys; i += Threads) s.batch[i] = 0;
    if (threadIdx.x == 0) s.gathered = 0;
    __syncthreads();
    for_ids<Threads>(row, begin, vocab, [&](int64_t id, float logit) {
      if (isnan(logit)) return;
      const uint64_t key = order_key(logit, id);
      if (key >= floor && key < ceiling && (key & mask) == prefix) {
        const unsigned int at = atomicAdd(&s.gathered, 1u);
        if (at < kBatchKeys) s.batch[at] = key;
      }
    });
    sort_batch_descending<Threads>(s);
    if (threadIdx.x == 0) s.prefix = s.batch[s.remaining - 1];
    __syncthreads();
  }
  const uint64_t result = s.prefix;
  __syncthreads();
  return result;
}

// Whether the CPU's top-p keeps the candidate with order key `winner`, by its own sums: the one-by-one
// normaliser, then the candidates above the winner best-first, kBatchKeys at a time (each batch bounded by a radix
// select, sorted, added by thread 0) until the running mass reaches top_p x normaliser (cut) or they run out (kept).
template <int Threads>
__device__ bool one_by_one_keeps(const float* row, int64_t vocab, uint64_t floor, uint64_t winner, double max_logit,
                                 double temperature, float top_p, PickScratch& s) {
  const double target = static_cast<double>(top_p) * one_by_one_total<Threads>(row, vocab, floor, max_logit, temperature, s);
  const uint64_t lower = floor > winner ? floor : winner + 1;
  uint64_t upper = ~0ull;  // keys in play: [lower, upper)
  double mass = 0;         // thread 0's running sum
  for (;;) {
    double mine = 0;
    for_ids<Threads>(row, vocab, [&](int64_t id, float logit) {
      if (isnan(logit)) return;
      const uint64_t key = order_key(logit, id);
      if (key >= lower && key < upper) mine += 1;
    });
    const double count = block_sum(mine, s);
    if (count == 0) return true;
    const int take = count < kBatchKeys ? static_cast<int>(count) : kBatchKeys;
    const uint64_t bottom = select_key<Threads>(row, 0, vocab, lower, upper, take, s);
    for (int i = threadIdx.x; i < kBatchKeys; i += Threads) s.batch[i] = 0;
    if (threadIdx.x == 0) s.gathered = 0;
    __syncthreads();
    for_ids<Threads>(row, vocab, [&](int64_t id, float logit) {
      if (isnan(logit)) return;
      const uint64_t key = order_key(logit, id);
      if (key >= bottom && key < upper) {
        const unsigned int at = atomicAdd(&s.gathered, 1u);
        if (at < kBatchKeys) s.batch[at] = key;
      }
    });
    sort_batch_descending<Threads>(s);
    if (threadIdx.x == 0) {
      s.flag = 0;
      for (int i = 0; i < take; ++i) {
        const int32_t id = id_of_key(s.batch[i]);
        mass += exp((static_cast<double>(__ldcg(row + id)) - max_logit) / temperature);
        if (mass >= target) {
          s.flag = 1;
          break;
        }
      }
    }
    __syncthreads();
    const bool cut = s.flag != 0;
    __syncthreads();
    if (cut) return false;
    upper = bottom;
  }
}

// logit / T plus the Gumbel noise of `bits`.
__device__ __forceinline__ double noisy_score(float logit, double temperature, uint64_t bits) {
  return static_cast<double>(logit) / temperature + ls::cuda::keyed::gumbel_of_bits(bits);
}

// What a Gumbel round needs of a row besides the row: the top-k cut, the weights' reference logit (the row's max,
// or a chunk's own max when the chunks' sums are rescaled later), the temperature and the Gumbel key.
struct PickSetup {
  uint64_t floor = 0;  // the top-k cut (0: none)
  double reference = 0, temperature = 1, inverse_temperature = 1, scaled_max = 0;
  uint64_t row_key = 0;
  bool use_top_p = false;
};
__device__ __forceinline__ PickSetup pick_setup(const DeviceScanRequest& sampling, int64_t position, double reference,
                                                uint64_t top_k_floor) {
  PickSetup p;
  p.floor = top_k_floor;
  p.reference = reference;
  p.temperature = sampling.temperature;
  p.inverse_temperature = 1.0 / p.temperature;
  p.scaled_max = reference / p.temperature;
  p.row_key = ls::cuda::keyed::row_key(sampling.seed, position);
  p.use_top_p = sampling.top_p < 1.0f;
  return p;
}

// A Gumbel round's result over ids [begin, end): the pruned Gumbel max over the top-k survivors above `excluded`
// and, with `sums`, their float normaliser (weights relative to p.reference), its error bound (units of 2^-24)
// and their count. Min-p is not applied here: like top-p it cuts a suffix in candidate order, so the winner is
// checked against both (verified_pick). Block-wide; slices combine by adding (rescaled) and by `better`.
struct GumbelRound {  // plain (a __shared__ copy takes no constructor)
  double total, error, count;
  Best winner;
};
template <int Threads>
__device__ __noinline__ GumbelRound gumbel_round(const float* row, int64_t begin, int64_t end, const PickSetup& p,
                                                 uint64_t excluded, bool sums, PickScratch& s) {
  Best mine{0.0, -1};
  double reach = 2.0;  // 1 - u above this cannot win
  double my_total = 0, my_error = 0, my_count = 0;
  const uint64_t floor = p.floor;
  for_ids<Threads>(row, begin, end, [&](int64_t id, float logit) {
    if (isnan(logit)) return;
    const uint64_t key = order_key(logit, id);
    if (key < floor) return;
    if (sums) {
      const FloatWeight w = float_weight(logit, p.reference, p.inverse_temperature);
      my_total += w.weight;
      my_error += w.error;
      my_count += 1;
    }
    if (key <= excluded) return;
    const uint64_t bits = ls::cuda::keyed::uniform_bits(p.row_key, static_cast<int32_t>(id));
    if (1.0 - ls::cuda::keyed::uniform_of_bits(bits) > reach) return;
    const Best next = better(mine, Best{noisy_score(logit, p.temperature, bits), static_cast<int32_t>(id)});
    if (next.id != mine.id) {
      mine = next;
      reach = ls::cuda::gumbel_reach(mine.value - p.scaled_max);
    }
  });
  GumbelRound round{0, 0, 0, Best{0.0, -1}};
  if (sums) {
    round.total = block_sum(my_total, s);
    round.error = block_sum(my_error, s);
    round.count = block_sum(my_count, s);
  }
  round.winner = block_best(mine, s);
  return round;
}

// Whether the verified pick's first round may be spread over a row's vocab chunks (markov_pick_split's chunk
// launch): sampled, no top-k (its cut needs the whole row first).
__device__ __forceinline__ bool spreadable(const DeviceScanRequest& sampling, int64_t vocab) {
  return sampling.temperature > 0.0f && !(sampling.top_k > 0 && sampling.top_k < vocab);
}

// draw_token of compute/sampling.cpp for one row held by the whole block (blockDim.x == Threads), the verified
// way (above). `greedy` is the row's argmax (its value the max logit); `mode` a PickMode other than kPickRadix;
// `given`, when not null, the first round already taken over the row's chunks (spreadable rows only; its sums
// rescaled to the row's max).
template <int Threads>
__device__ __noinline__ int32_t verified_pick(const float* row, int64_t vocab, const DeviceScanRequest& sampling,
                                              int64_t position, Best greedy, int mode, const GumbelRound* given,
                                              PickScratch& s) {
  if (sampling.temperature <= 0.0f || vocab == 0) return greedy.id < 0 ? 0 : greedy.id;
  if (greedy.id < 0) return 0;  // every logit NaN
  const bool use_top_k = sampling.top_k > 0 && sampling.top_k < vocab;
  const double max_logit = greedy.value;  // the largest logit survives top-k
  uint64_t floor = 0;
  if (use_top_k) floor = select_key<Threads>(row, 0, vocab, 0, ~0ull, sampling.top_k, s);
  const PickSetup p = pick_setup(sampling, position, max_logit, floor);
  // Min-p of one candidate, as samp8's filter decides it (bands, then the double weight).
  ls::cuda::Filter min_p;
  min_p.temperature = p.temperature;
  min_p.max_logit = max_logit;
  const bool use_min_p = sampling.min_p > 0.0f;
  if (use_min_p) min_p.set_min_p(sampling.min_p);
  GumbelRound round = given ? *given : gumbel_round<Threads>(row, 0, vocab, p, 0, p.use_top_p, s);
  const double total = round.total, error = round.error, count = round.count;
  for (;;) {
    const Best winner = round.winner;
    if (winner.id < 0) return greedy.id;  // no survivor: draw_token takes the greedy token
    const float winner_logit = __ldcg(row + winner.id);
    const uint64_t winner_key = order_key(winner_logit, winner.id);
    bool keeps = !use_min_p || min_p.keeps(winner_logit, winner.id);
    if (keeps && p.use_top_p) {
      // The float mass of the candidates above the winner (weights relative to the row's max) and its error bound.
      double my_above = 0, my_above_error = 0;
      for_ids<Threads>(row, vocab, [&](int64_t id, float logit) {
        if (isnan(logit)) return;
        const uint64_t key = order_key(logit, id);
        if (key >= floor && key > winner_key) {
          const FloatWeight w = float_weight(logit, max_logit, p.inverse_temperature);
          my_above += w.weight;
          my_above_error += w.error;
        }
      });
      const double above = block_sum(my_above, s);
      const double above_error = block_sum(my_above_error, s);
      // Target c = top_p x total, decided outside the band (keyed::top_p_band; a spread round's rescaling is
      // within (n + 4) u total: w |arg| <= 1/e, total >= 1).
      const double target = static_cast<double>(sampling.top_p) * total;
      double band = ls::cuda::keyed::top_p_band(above_error, error, sampling.top_p, count, total);
      if (mode == kPickBandPlantedZero) band = 0;
      if (mode != kPickFallbackForced && total > 0 && isfinite(total) && above + band < target) {
        keeps = true;
      } else if (mode != kPickFallbackForced && total > 0 && isfinite(total) && above - band >= target) {
        keeps = false;
      } else {
        keeps = one_by_one_keeps<Threads>(row, vocab, floor, winner_key, max_logit, p.temperature, sampling.top_p, s);
      }
    }
    if (keeps) return winner.id;
    // Top-p or min-p cuts the winner, so every key at or below it: the max again over the keys above it.
    round = gumbel_round<Threads>(row, 0, vocab, p, winner_key, false, s);
  }
}

// Top-k up to this many is spread too: the split pick's chunks send their own top-k keys, the request's CTA merges
// them into the row's top-k set and draws over that set with the CPU's own arithmetic (small_set_pick).
constexpr int kSpreadTopK = 64;
constexpr int kSpreadKeys = 1024;  // the merge's capacity: chunks x kSpreadTopK

// draw_token over a known top-k set: keys[0, k) the survivors' order keys sorted descending (k <= kSpreadTopK), the
// CPU's own arithmetic: double weights, the normaliser one by one in id order, the kept prefix best-first, min-p,
// the Gumbel max (ties to the lower id). Every thread of the block calls it; all get the pick.
__device__ int32_t small_set_pick(const float* row, const uint64_t* keys, int k, const DeviceScanRequest& sampling,
                                  int64_t position, Best greedy, PickScratch& s) {
  const double temperature = sampling.temperature;
  const int j = threadIdx.x;
  ls::cuda::keyed::SetMember m{-1, 0.0f, 0.0};
  if (j < k) m = ls::cuda::keyed::set_member(row, keys, k, j, greedy.value, temperature, s.masses, kSpreadTopK);
  __syncthreads();
  if (threadIdx.x == 0) s.remaining = ls::cuda::keyed::set_kept(s.masses, kSpreadTopK, k, sampling.top_p);
  __syncthreads();
  const int kept = static_cast<int>(s.remaining);
  Best mine{0.0, -1};
  if (j < kept && !(sampling.min_p > 0.0f && m.weight < static_cast<double>(sampling.min_p))) {
    mine = Best{static_cast<double>(m.logit) / temperature + ls::cuda::keyed::gumbel(sampling.seed, position, m.id),
                m.id};
  }
  const Best best = block_best(mine, s);
  return best.id < 0 ? greedy.id : best.id;
}

// The keyed pick of the variant `mode` (PickMode); `given` as verified_pick's.
template <int Threads>
__device__ int32_t draft_pick(const float* row, int64_t vocab, const DeviceScanRequest& sampling, int64_t position,
                              Best greedy, int mode, const GumbelRound* given, PickScratch& s) {
  if (mode == kPickRadix) return keyed_pick(row, vocab, sampling, position, greedy, s);
  return verified_pick<Threads>(row, vocab, sampling, position, greedy, mode, given, s);
}

}  // namespace
}  // namespace ls::dspark::cuda
