// The Markov scan's per-row pick code shared by the step kernels (scan_kernels.cu) and the persistent scan
// (scan_persistent.cu), in three headers: here block reductions, the greedy argmax and the radix keyed draw;
// scan_verified.cuh session 9's verified draw (scan_pick.h) and draft_pick; scan_finish.cuh the end of a step (pick,
// confidence, failure flags, record) and the W2 row pieces. Included by CUDA sources only; internal linkage per file.
#pragma once

#include <cmath>
#include <cstdint>

#include "compute/cuda/keyed_draw.cuh"
#include "compute/cuda/sampler_walk.cuh"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kPickThreads = 1024;
constexpr int kStepThreads = 256;  // the fused scan step's CTA (its last CTA picks with 256 threads)
constexpr int kBatchKeys = 256;  // keys the verified pick gathers and sorts at once (select_key, the fallback)

struct PickScratch {
  double values[kWarp];
  int32_t ids[kWarp];
  unsigned int counts[256];
  double masses[256];
  uint64_t batch[kBatchKeys];
  uint64_t prefix;
  double mass_above;
  double exact;
  int64_t remaining;
  unsigned int gathered;
  int flag;
};

// The kernels' pick variant (DraftPickMode of scan_pick.h as an int kernel argument).
enum PickMode : int { kPickRadix = 0, kPickVerified = 1, kPickBandPlantedZero = 2, kPickFallbackForced = 3 };

using ls::cuda::keyed::Best;
using ls::cuda::keyed::better;
using ls::cuda::keyed::gumbel;
using ls::cuda::keyed::order_key;
using ls::cuda::keyed::id_of_key;
using ls::cuda::keyed::FloatWeight;
using ls::cuda::keyed::float_weight;

__device__ Best block_best(Best x, PickScratch& s) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    Best other{__shfl_xor_sync(0xffffffffu, x.value, offset), __shfl_xor_sync(0xffffffffu, x.id, offset)};
    x = better(x, other);
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) {
    s.values[warp] = x.value;
    s.ids[warp] = x.id;
  }
  __syncthreads();
  if (warp == 0) {
    Best y = lane < static_cast<int>(blockDim.x / kWarp) ? Best{s.values[lane], s.ids[lane]} : Best{0.0, -1};
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      Best other{__shfl_xor_sync(0xffffffffu, y.value, offset), __shfl_xor_sync(0xffffffffu, y.id, offset)};
      y = better(y, other);
    }
    if (lane == 0) {
      s.values[0] = y.value;
      s.ids[0] = y.id;
    }
  }
  __syncthreads();
  const Best result{s.values[0], s.ids[0]};
  __syncthreads();
  return result;
}

__device__ double block_sum(double x, PickScratch& s) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) s.values[warp] = x;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) total += s.values[w];
    s.values[0] = total;
  }
  __syncthreads();
  const double result = s.values[0];
  __syncthreads();
  return result;
}

// Greedy: the first maximum among non-NaN values (ties to the lower id); id -1 when every value is NaN.
__device__ Best row_argmax(const float* row, int64_t vocab, PickScratch& s) {
  Best best{0.0, -1};
  for (int64_t id = threadIdx.x; id < vocab; id += blockDim.x) {
    const float value = __ldcg(row + id);
    if (!isnan(value)) best = better(best, Best{static_cast<double>(value), static_cast<int32_t>(id)});
  }
  return block_best(best, s);
}

// Radix descent over the 64-bit order keys of the candidates (non-NaN, key >= floor). With `masses` false it finds
// the key of the k-th candidate (`goal` = k); with true, the key where the running probability mass (weights
// exp((l - max) / T)) first reaches `goal`. Returns 0 when the goal is never reached (keep every candidate).
__device__ uint64_t radix_threshold(const float* row, int64_t vocab, uint64_t floor, bool masses, double goal,
                                    double max_logit, double temperature, PickScratch& s) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.mass_above = 0;
    s.remaining = static_cast<int64_t>(goal);
    s.flag = 1;
  }
  __syncthreads();
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      s.counts[b] = 0;
      s.masses[b] = 0;
    }
    __syncthreads();
    const uint64_t high_mask = shift == 56 ? 0 : ~0ull << (shift + 8);
    const uint64_t prefix = s.prefix;
    // Warp-aggregated (session 8): the lanes of a warp with the same digit add one count and one mass (their terms
    // in lane order) to shared memory, so a flat row whose candidates share a digit does not serialize every id on
    // one bin's atomics (s8B: a sampled 4-stream pass took ~5 ms). Counts are exact either way; the masses' sums, in
    // atomic order across warps as before, may differ in the last bits.
    const int lane = threadIdx.x % kWarp;
    for (int64_t base = 0; base < vocab; base += blockDim.x) {  // every lane of a warp runs every round
      const int64_t id = base + threadIdx.x;
      const float logit = id < vocab ? __ldcg(row + id) : NAN;
      int digit = -1;
      if (!isnan(logit)) {
        const uint64_t key = order_key(logit, id);
        if (key >= floor && (key & high_mask) == (prefix & high_mask)) digit = static_cast<int>((key >> shift) & 0xff);
      }
      const unsigned int peers = __match_any_sync(0xffffffffu, digit);
      if (digit < 0) continue;
      const int leader = __ffs(peers) - 1;
      if (lane == leader) atomicAdd(&s.counts[digit], static_cast<unsigned int>(__popc(peers)));
      if (masses) {
        const double term = exp((static_cast<double>(logit) - max_logit) / temperature);
        double mass = 0;
        for (unsigned int left = peers; left != 0; left &= left - 1) mass += __shfl_sync(peers, term, __ffs(left) - 1);
        if (lane == leader) atomicAdd(&s.masses[digit], mass);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1, lowest = -1;
      for (int b = 255; b >= 0; --b) {
        if (s.counts[b] == 0) continue;
        lowest = b;
        if (masses ? s.mass_above + s.masses[b] >= goal : static_cast<int64_t>(s.counts[b]) >= s.remaining) {
          chosen = b;
          break;
        }
        if (masses) s.mass_above += s.masses[b];
        else s.remaining -= s.counts[b];
      }
      if (chosen < 0 && shift == 56) s.flag = 0;  // never reached: no cut
      if (chosen < 0) chosen = lowest;             // summation order shortfall: keep this whole prefix
      if (chosen >= 0) s.prefix |= static_cast<uint64_t>(chosen) << shift;
    }
    __syncthreads();
    if (s.flag == 0) break;
  }
  const uint64_t result = s.flag ? s.prefix : 0;
  __syncthreads();
  return result;
}

// draw_token of compute/sampling.cpp for one row held by the whole block. `greedy` is row_argmax's answer.
__device__ int32_t keyed_pick(const float* row, int64_t vocab, const DeviceScanRequest& sampling, int64_t position,
                              Best greedy, PickScratch& s) {
  if (sampling.temperature <= 0.0f || vocab == 0) return greedy.id < 0 ? 0 : greedy.id;
  if (greedy.id < 0) return 0;  // every logit NaN
  const double temperature = sampling.temperature;
  const bool use_top_k = sampling.top_k > 0 && sampling.top_k < vocab;
  const bool use_top_p = sampling.top_p < 1.0f;
  const bool use_min_p = sampling.min_p > 0.0f;
  // The largest non-NaN logit survives top-k, so it is the candidates' max either way.
  const double max_logit = greedy.value;
  uint64_t floor = 0;
  if (use_top_k) floor = radix_threshold(row, vocab, 0, false, sampling.top_k, max_logit, temperature, s);
  if (use_top_p) {
    double total = 0;
    for (int64_t id = threadIdx.x; id < vocab; id += blockDim.x) {
      const float logit = __ldcg(row + id);
      if (!isnan(logit) && order_key(logit, id) >= floor) total += exp((static_cast<double>(logit) - max_logit) / temperature);
    }
    total = block_sum(total, s);
    const uint64_t cut = radix_threshold(row, vocab, floor, true, static_cast<double>(sampling.top_p) * total,
                                         max_logit, temperature, s);
    if (cut > floor) floor = cut;
  }
  const double min_weight = sampling.min_p;
  Best best{0.0, -1};
  for (int64_t id = threadIdx.x; id < vocab; id += blockDim.x) {
    const float logit = __ldcg(row + id);
    if (isnan(logit) || order_key(logit, id) < floor) continue;
    if (use_min_p && exp((static_cast<double>(logit) - max_logit) / temperature) < min_weight) continue;
    const double scaled = static_cast<double>(logit) / temperature;
    const double score = scaled + gumbel(sampling.seed, position, static_cast<int32_t>(id));
    best = better(best, Best{score, static_cast<int32_t>(id)});
  }
  best = block_best(best, s);
  return best.id < 0 ? greedy.id : best.id;
}

}  // namespace
}  // namespace ls::dspark::cuda
