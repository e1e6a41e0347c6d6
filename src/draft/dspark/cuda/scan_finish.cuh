// The end of a Markov scan step (pick, confidence, failure flags, record) and the step kernels' W2 row pieces,
// shared by scan_kernels.cu and scan_persistent.cu. Included by CUDA sources only; internal linkage per file.
#pragma once

#include <cmath>
#include <cstdint>

#include "draft/dspark/cuda/scan_verified.cuh"

namespace ls::dspark::cuda {
namespace {

// The fp32 confidence of request i at `slot`: sigmoid((w . [Hf_slot ; e] + b) / T_slot), the dot in double over the
// block (each thread's terms j = t, t + blockDim, ..., 8 loaded before any is added, then block_sum); Inf when
// planted. Every thread of the block calls it; all get the value.
__device__ float step_confidence(const ScanStepInputs& in, const ScanShape& shape, int slot, int i, const bf16_t* e,
                                 bool plant_inf, PickScratch& s) {
  const int64_t block_row = static_cast<int64_t>(i) * shape.gamma + slot;
  const bf16_t* hidden = in.final_hidden + block_row * shape.hidden;
  constexpr int kBatch = 8;
  const int terms = shape.hidden + shape.rank;
  double z = 0;
  for (int first = threadIdx.x; first < terms; first += kBatch * blockDim.x) {
    float xs[kBatch], ws[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = first + b * blockDim.x;
      xs[b] = j >= terms ? 0.0f : (j < shape.hidden ? __bfloat162float(hidden[j]) : __bfloat162float(e[j - shape.hidden]));
      ws[b] = j < terms ? in.confidence_weight[j] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (first + b * static_cast<int>(blockDim.x) < terms) z += static_cast<double>(ws[b]) * xs[b];
    }
  }
  z = block_sum(z, s) + in.confidence_bias;
  float logit = static_cast<float>(z);
  if (in.confidence_temperatures) logit /= in.confidence_temperatures[slot];
  float confidence = 1.0f / (1.0f + expf(-logit));
  if (plant_inf) confidence = INFINITY;
  return confidence;
}

// One slot of a request's record: the first failure by precedence (non-finite logit, non-finite confidence, pick
// outside the vocabulary) by name and slot, else the pick and its chance (the running product). False on failure.
__device__ __forceinline__ bool record_slot(DeviceScanRecord& record, int out_of_range_pick_slot, int slot,
                                            int32_t pick, float chance, bool nonfinite, bool confidence_finite,
                                            bool has_confidence, int64_t V) {
  if (slot == out_of_range_pick_slot) pick = static_cast<int32_t>(V);
  int32_t status = kScanOk;
  if (nonfinite) status = kScanNonfiniteLogit;
  else if (!confidence_finite) status = kScanNonfiniteConfidence;
  else if (pick < 0 || pick >= V) status = kScanPickOutOfRange;
  if (status != kScanOk) {
    record.status = status;
    record.failed_slot = slot;
    record.failed_pick = pick;
    return false;
  }
  record.tokens[slot] = pick;
  record.chances[slot] = chance;
  if (has_confidence) record.running = chance;
  record.previous = pick;
  return true;
}

// The persistent scan's record of request r (CTA 0, after the last slot) slot by slot as finish_step does: tokens,
// chances (the running product), and the first failure (non-finite logit, non-finite confidence, pick outside the
// vocabulary) by name and slot; `confidences` already in shared memory (read only with a confidence head),
// `timed_out` a handoff that gave up. The status and the running chance are read once (only record_slot changes
// them, and a failure ends the loop), so no slot waits for a load.
template <int G>
__device__ void write_scan_records(const ScanStepInputs& in, const ScanShape& shape, int r, int total_slots,
                                   const unsigned char (*slot_state)[G], const int32_t (*slot_pick)[G],
                                   const float (*confidences)[G], bool timed_out) {
  DeviceScanRecord& record = in.records[r];
  // (read once: the record's stores below could alias it for the compiler, which would load it again each slot)
  const int out_of_range_pick_slot = in.requests[r].out_of_range_pick_slot;
  float running = record.running;
  const int slots = record.status == kScanOk ? total_slots : 0;
  for (int slot = 0; slot < slots; ++slot) {
    const int state = slot_state[slot][r];
    if (state == 0) break;
    const float confidence = shape.has_confidence && state == 1 ? confidences[slot][r] : NAN;
    const float chance = shape.has_confidence && state == 1 ? running * confidence : NAN;
    if (!record_slot(record, out_of_range_pick_slot, slot, state == 2 ? 0 : slot_pick[slot][r], chance, state == 2,
                     !(shape.has_confidence && state == 1) || isfinite(confidence), shape.has_confidence,
                     shape.vocab)) {
      break;
    }
    if (shape.has_confidence) running = chance;
  }
  if (timed_out) record.status = kScanBarrierTimeout;
}

// The end of a scan step for request i, whose corrected logits are in its markov row: the pick (from the greedy best
// over the finite logits, or the keyed draw), the confidence, the failure flags and the record. `nonfinite` and
// `greedy` are uniform over the block; `mode` the pick variant (PickMode), Threads the block size; `given` the
// verified pick's first round when the split pick's chunks took it; `given_pick` (>= 0) the pick already drawn.
template <int Threads>
__device__ void finish_step(const ScanStepInputs& in, const ScanShape& shape, int slot, int i,
                            const DeviceScanRequest& request, DeviceScanRecord& record, int nonfinite, Best greedy,
                            int mode, PickScratch& s, const GumbelRound* given = nullptr,
                            int32_t given_pick = -1) {
  const int64_t V = shape.vocab;
  const float* row = in.markov + static_cast<int64_t>(i) * V;
  int32_t pick = 0;
  if (!nonfinite) {
    pick = given_pick >= 0 ? given_pick
                           : draft_pick<Threads>(row, V, request, request.anchor_position + slot + 1, greedy, mode,
                                                 given, s);
  }
  float chance = NAN;
  bool confidence_finite = true;
  if (shape.has_confidence) {
    const bf16_t* e = in.w1 ? in.w1 + static_cast<int64_t>(record.previous) * shape.rank
                            : in.embeddings + static_cast<int64_t>(i) * shape.rank;
    const float confidence = step_confidence(in, shape, slot, i, e, slot == request.inf_confidence_slot, s);
    confidence_finite = isfinite(confidence);
    chance = record.running * confidence;
  }
  if (threadIdx.x != 0) return;
  record_slot(record, request.out_of_range_pick_slot, slot, pick, chance, nonfinite, confidence_finite,
              shape.has_confidence, V);
}

// Each request's best and the failure flags over the warp's lanes (xor trees), written by lane 0 to this warp's
// slots of the CTA's shared [warps][G] bests and [warps] flags.
template <int G>
__device__ __forceinline__ void warp_bests(Best (&best)[G], int flags, int lane, Best (&warp_best)[G],
                                           int& warp_flags) {
#pragma unroll
  for (int r = 0; r < G; ++r) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const Best other{__shfl_xor_sync(0xffffffffu, best[r].value, offset),
                       __shfl_xor_sync(0xffffffffu, best[r].id, offset)};
      best[r] = better(best[r], other);
    }
    if (lane == 0) warp_best[r] = best[r];
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) flags |= __shfl_xor_sync(0xffffffffu, flags, offset);
  if (lane == 0) warp_flags = flags;
}

// 8 bf16 values widened to fp32 (exactly).
__device__ __forceinline__ void widen_bf16x8(const uint4& packed, float (&out)[8]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 pair = __bfloat1622float2(pairs[q]);
    out[2 * q] = pair.x;
    out[2 * q + 1] = pair.y;
  }
}

// sum + w[0] e[0] + ... + w[7] e[7], one fmaf at a time in that order (the scan dots' one order); e 16-byte aligned.
__device__ __forceinline__ float add_eight_terms(const float (&w)[8], const float* e, float sum) {
  const float4 lo = reinterpret_cast<const float4*>(e)[0], hi = reinterpret_cast<const float4*>(e)[1];
  sum = fmaf(w[0], lo.x, sum);
  sum = fmaf(w[1], lo.y, sum);
  sum = fmaf(w[2], lo.z, sum);
  sum = fmaf(w[3], lo.w, sum);
  sum = fmaf(w[4], hi.x, sum);
  sum = fmaf(w[5], hi.y, sum);
  sum = fmaf(w[6], hi.z, sum);
  return fmaf(w[7], hi.w, sum);
}

// sums[r] += the 8-lane share of W2 row . e_r, in the fused step's order (pieces in order, 8 fmaf each):
// the step kernels and the persistent scan share it, so both add in this one order.
template <int G, int PIECES>
__device__ __forceinline__ void add_row_pieces(const uint4 (&pieces)[PIECES], const float* e_shared, int rank,
                                               int part, int group, float (&sums)[G]) {
#pragma unroll
  for (int c = 0; c < PIECES; ++c) {
    const int k = part * 8 + 64 * c;
    if (k >= rank) break;
    float weights[8];
    widen_bf16x8(pieces[c], weights);
#pragma unroll
    for (int r = 0; r < G; ++r) {
      if (r < group) sums[r] = add_eight_terms(weights, e_shared + r * rank + k, sums[r]);
    }
  }
}

// The persistent scan's row: the 8 lanes' sums of row `id` added up; lane 0 of the 8 adds U (u[r * stride] for
// request r), flags non-finite logits and keeps the greedy best of each request drafting at this slot. Keyed
// (session 11): a sampled request without cuts keeps its best Gumbel score instead (draw_token's plain Gumbel max),
// its logit back into u.
struct KeyedSlot {
  double temperature;  // 0: greedy
  uint64_t row_key;    // keyed::row_key(seed, position of this slot's draw)
};
// take_sums: the row's dot already whole in this thread (the broadcast dot, session 14); no shuffles.
template <int G, bool Keyed>
__device__ __forceinline__ void take_sums(const float (&sums)[G], int64_t id, float* u, int stride, int64_t vocab,
                                          int slot, int group, const int* active, const int* nan_slot,
                                          const KeyedSlot* keyed, Best (&best)[G], int& flags) {
  if (id >= vocab) return;
#pragma unroll
  for (int r = 0; r < G; ++r) {
    if (r >= group || !active[r]) continue;
    float logit = sums[r] + u[r * stride];
    if (id == vocab / 2 && slot == nan_slot[r]) logit = NAN;
    if (isfinite(logit)) {
      double value = logit;
      if (Keyed && keyed[r].temperature > 0) {
        value = noisy_score(logit, keyed[r].temperature,
                            ls::cuda::keyed::uniform_bits(keyed[r].row_key, static_cast<int32_t>(id)));
      }
      best[r] = better(best[r], Best{value, static_cast<int32_t>(id)});
    } else {
      flags |= 1 << r;
    }
    if (Keyed) u[r * stride] = logit;
  }
}
template <int G, bool Keyed>
__device__ __forceinline__ void take_row(float (&sums)[G], int64_t id, float* u, int stride, int64_t vocab,
                                         int slot, int part, int group, const int* active, const int* nan_slot,
                                         const KeyedSlot* keyed, Best (&best)[G], int& flags) {
#pragma unroll
  for (int r = 0; r < G; ++r) {
    for (int offset = 4; offset > 0; offset /= 2) sums[r] += __shfl_xor_sync(0xffffffffu, sums[r], offset);
  }
  if (part == 0) take_sums<G, Keyed>(sums, id, u, stride, vocab, slot, group, active, nan_slot, keyed, best, flags);
}

// 16 bytes of W2, kept in L2 with evict-last priority when asked (the 9 steps of a scan reread all of W2).
__device__ __forceinline__ uint4 load_w2(const bf16_t* address, bool keep) {
  uint4 v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (keep) {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(address), "l"(policy));
    return v;
  }
#endif
  v = __ldg(reinterpret_cast<const uint4*>(address));
  return v;
}

}  // namespace
}  // namespace ls::dspark::cuda
