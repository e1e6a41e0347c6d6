// The persistent greedy Markov scan: every slot of a scan in one cooperative launch, W2 held on chip for all slots.
//
// Grid: `grid` CTAs (all resident: a cooperative launch), CTA c owning vocab ids [c * ids, (c + 1) * ids). Each lane
// keeps the W2 rows of its first register_rounds rounds in registers and copies the rest of the CTA's rows into
// shared memory once, so W2 is read from memory once per scan, not once per slot. Per slot: e = W1[previous] (every
// CTA knows the previous pick), l = W2 e + U_slot for the CTA's ids (the fused step's dot, the same fp32 order, so
// the same bits), the CTA's greedy best and non-finite flag as a partial [slot][request][CTA], a grid barrier (a
// counter zeroed before the launch; or, session 8, each CTA's pick as one flagged word every thread spins on), then
// every CTA combines all partials the same way and takes the same pick and keeps it. After the last slot the
// confidences of every (request, slot) are computed a CTA each (finish_step's arithmetic), one more barrier, and
// CTA 0 writes the records slot by slot as finish_step does (so no slot waits for a confidence). Greedy requests
// only (a keyed draw needs the whole corrected row in one CTA before the next slot). Session 14: one request may take
// the broadcast dot instead (a thread per vocabulary row, scan_broadcast.cuh), the same bits.
// The plan and the launch: scan_persistent_plan.cpp.
#include <cmath>
#include <cstdint>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/scan_broadcast.cuh"
#include "draft/dspark/cuda/scan_finish.cuh"
#include "draft/dspark/cuda/scan_handoff.cuh"
#include "draft/dspark/cuda/scan_persistent.h"
#include "draft/dspark/cuda/scan_phase_clocks.cuh"

namespace ls::dspark::cuda {
namespace {

constexpr int kThreads = kPersistentThreads;
constexpr int kWarps = kThreads / kWarp;
constexpr int kRowsPerRound = kPersistentRowsPerRound;
constexpr int kPieces = kPersistentPieces;
static_assert(kRowsPerRound == kWarps * 4);

// Flagged: the handoff through words (pack_partial) in `in.partials`, zeroed before the launch, instead of the
// counter `barrier`.
// Keyed: sampled requests without cuts take their Gumbel max (take_row); the flagged word carries the winner's logit.
// Broadcast (session 14, scan_broadcast.cuh; ids_per_cta <= kThreads): a thread per vocabulary row, its first
// RegisterRounds x kPieces chunks in registers, `held` chunks of every row in shared memory.
template <int G, int RegisterRounds, bool Flagged, bool Keyed, bool Broadcast>
__global__ void __launch_bounds__(kThreads, 2)
    persistent_scan_kernel(ScanStepInputs in, ScanShape shape, int ids_per_cta, int held_rounds,
                           unsigned int* barrier) {
  extern __shared__ __align__(16) unsigned char dynamic[];
  __shared__ PickScratch s;
  __shared__ int32_t previous[G];
  __shared__ int depth[G], stopped[G], active[G], nan_slot[G];
  __shared__ int32_t anchor[G];
  __shared__ KeyedSlot keyed[G];
  // Per slot and request: the pick the scan went on with, and 0 not drafting / 1 drafted / 2 a non-finite logit.
  __shared__ int32_t slot_pick[kMaxDeviceBlock][G];
  __shared__ unsigned char slot_state[kMaxDeviceBlock][G];
  __shared__ Best warp_best[kWarps][G];
  __shared__ int warp_flags[kWarps];
  __shared__ Best combined[G];
  __shared__ int combined_flags;
  __shared__ int slots;
  __shared__ unsigned long long phase_sums[kScanPhases];
  PhaseClocks clocks{phase_sums};
  clocks.start();
  // Confidence helpers (session 14, the flagged handoff only): the last in.confidence_helpers CTAs own no ids; they
  // follow the picks and compute each slot's confidence while the others run the next slots.
  const int helpers = Flagged ? in.confidence_helpers : 0;
  const int dot_ctas = static_cast<int>(gridDim.x) - helpers;
  const bool helper = static_cast<int>(blockIdx.x) >= dot_ctas;
  if (helper) clocks.on = false;  // (the phase clocks time the dot CTAs)
  const int count = min(in.count, G);
  const int64_t V = shape.vocab;
  const int rank = shape.rank;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int sub = lane / 8, part = lane % 8;
  const int rounds = ids_per_cta / kRowsPerRound;
  // Shared memory: W2 rows held [held_rounds * 32, rank] bf16 (broadcast: [held_rounds chunks][kThreads] 16-byte
  // units) | U staging [2][G][ids_per_cta] | e [G][rank].
  bf16_t* w2_held = reinterpret_cast<bf16_t*>(dynamic);
  const size_t held_bytes = Broadcast ? static_cast<size_t>(held_rounds) * kThreads * 16
                                      : static_cast<size_t>(held_rounds) * kRowsPerRound * rank * 2;
  float* u_stage = reinterpret_cast<float*>(dynamic + held_bytes);
  float* e_shared = u_stage + 2 * G * ids_per_cta;
  const int64_t first_id = static_cast<int64_t>(blockIdx.x) * ids_per_cta;
  auto local_row = [&](int j) { return (j * kWarps + warp) * 4 + sub; };
  // The next held_rounds rounds into shared memory, each lane its own pieces (it reads them back itself); rounds
  // past those are read from L2 every slot (evict-last).
  const int held_end = min(rounds, RegisterRounds + held_rounds);
  uint4 raw[RegisterRounds][kPieces];
  if (helper) {
    // no W2
  } else if constexpr (Broadcast) {
    stage_broadcast_rows<kThreads>(in.w2, first_id, ids_per_cta, V, rank, held_rounds, w2_held, raw);
  } else {
    for (int j = RegisterRounds; j < held_end; ++j) {
      const int64_t id = first_id + local_row(j);
#pragma unroll
      for (int c = 0; c < kPieces; ++c) {
        const int k = part * 8 + 64 * c;
        if (k < rank && id < V) {
          copy_async_16(w2_held + static_cast<int64_t>(local_row(j) - RegisterRounds * kRowsPerRound) * rank + k,
                        in.w2 + id * rank + k);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < RegisterRounds; ++j) {
      const int64_t id = first_id + local_row(j);
#pragma unroll
      for (int c = 0; c < kPieces; ++c) {
        const int k = part * 8 + 64 * c;
        raw[j][c] = j < rounds && id < V && k < rank ? __ldg(reinterpret_cast<const uint4*>(in.w2 + id * rank + k))
                                                     : make_uint4(0, 0, 0, 0);
      }
    }
  }
  if (threadIdx.x < G) {
    const int r = threadIdx.x;
    const bool real = r < count;
    previous[r] = real ? in.records[r].previous : 0;
    anchor[r] = previous[r];
    depth[r] = real ? in.requests[r].depth : 0;
    nan_slot[r] = real ? in.requests[r].nan_logit_slot : -1;
    stopped[r] = 0;
  }
  // U of a slot for the CTA's ids, every request (4-byte copies: a chunk's U need not be 16-byte aligned).
  auto stage_u = [&](int slot) {
    if (helper) return;
    float* to = u_stage + (slot & 1) * G * ids_per_cta;
    for (int index = threadIdx.x; index < count * ids_per_cta; index += kThreads) {
      const int r = index / ids_per_cta, t = index % ids_per_cta;
      const int64_t id = first_id + t;
      if (id < V) copy_async_4(to + index, in.base_logits + (static_cast<int64_t>(r) * shape.gamma + slot) * V + id);
    }
  };
  stage_u(0);
  commit_copies();  // the held W2 rows and slot 0's U
  __syncthreads();
  if (threadIdx.x == 0) {
    int most = 0;
    for (int r = 0; r < count; ++r) most = max(most, depth[r]);
    slots = min(most, shape.gamma);
  }
  __syncthreads();
  const int total_slots = slots;
  // The flagged handoff's words: [gamma][G][grid] partials, [grid] confidence arrivals, the timed-out word.
  uint64_t* words = reinterpret_cast<uint64_t*>(in.partials);
  uint64_t* timeout = words + static_cast<int64_t>(shape.gamma + 1) * G * gridDim.x;
  auto wait_for = [&](unsigned int target) { wait_for_count(barrier, target); };
  clocks.mark(0);
  for (int slot = 0; slot < total_slots; ++slot) {
    // Who drafts at this slot, and e = W1[previous] (and the keyed draws' temperature and row key).
    if (Keyed && threadIdx.x < G) {
      const int r = threadIdx.x;
      const bool sampled = r < count && in.requests[r].temperature > 0.0f;
      keyed[r].temperature = sampled ? in.requests[r].temperature : 0.0;
      keyed[r].row_key =
          sampled ? ls::cuda::keyed::row_key(in.requests[r].seed,
                                             in.requests[r].anchor_position + slot + 1 + in.planted_keyed_shift)
                  : 0;
    }
    for (int index = threadIdx.x; index < G * rank; index += kThreads) {
      const int r = index / rank, j = index % rank;
      const bool on = r < count && slot < depth[r] && !stopped[r];
      e_shared[index] = on ? __bfloat162float(in.w1[static_cast<int64_t>(previous[r]) * rank + j]) : 0.0f;
      if (j == 0) active[r] = on;
    }
    if (slot + 1 < total_slots) stage_u(slot + 1);
    commit_copies();
    wait_all_but_newest_copy();  // the held rows and this slot's U are in
    __syncthreads();
    clocks.mark(1);
    if (helper) {
      // This helper's slots (slot % helpers): the slot's confidence from the previous pick, as the tail would compute
      // it (speculative: a slot that turns out non-finite never reads it), while the dot CTAs run the slot.
      const int mine = static_cast<int>(blockIdx.x) - dot_ctas, every = max(helpers, 1);
      if (slot % every == mine) {
        for (int r = 0; r < count; ++r) {
          if (!active[r]) continue;  // uniform over the CTA
          const int32_t from = in.planted_helper_anchor ? anchor[r] : previous[r];
          const float confidence = step_confidence(in, shape, slot, r, in.w1 + static_cast<int64_t>(from) * rank,
                                                   slot == in.requests[r].inf_confidence_slot, s);
          if (threadIdx.x == 0) in.markov[static_cast<int64_t>(r) * V + slot] = confidence;
        }
      }
      // Past its last slot a helper follows the picks no more: it arrives now (s14A0: CTA 0 waited 2.4 us for the
      // last slot's helper to read that slot's words it had no use for).
      const int last_turn = total_slots > mine ? mine + (total_slots - 1 - mine) / every * every : -1;
      if (slot >= last_turn) break;
    } else {
      float* u = u_stage + (slot & 1) * G * ids_per_cta;
      Best best[G];
      int flags = 0;
#pragma unroll
      for (int r = 0; r < G; ++r) best[r] = Best{0.0, -1};
      if constexpr (Broadcast) {
        const int64_t id = first_id + threadIdx.x;
        const bool mine = static_cast<int>(threadIdx.x) < ids_per_cta && id < V;
        float sums[G];
        broadcast_row_sums<G, kThreads>(raw, w2_held, held_rounds, in.w2 + (mine ? id : 0) * rank, mine, e_shared,
                                        rank, count, in.planted_broadcast_slots, sums);
        if (mine) {
          take_sums<G, Keyed>(sums, id, u + threadIdx.x, ids_per_cta, V, slot, count, active, nan_slot, keyed, best,
                              flags);
        }
      }
#pragma unroll
      for (int j = 0; j < (Broadcast ? 0 : RegisterRounds); ++j) {
        if (j >= rounds) break;
        float sums[G];
#pragma unroll
        for (int r = 0; r < G; ++r) sums[r] = 0.0f;
        add_row_pieces<G>(raw[j], e_shared, rank, part, count, sums);
        take_row<G, Keyed>(sums, first_id + local_row(j), u + local_row(j), ids_per_cta, V, slot, part, count, active,
                           nan_slot, keyed, best, flags);
      }
      for (int j = RegisterRounds; j < (Broadcast ? 0 : rounds); ++j) {
        uint4 pieces[kPieces];
        const int64_t id = first_id + local_row(j);
        const bf16_t* row = j < held_end
                                ? w2_held + static_cast<int64_t>(local_row(j) - RegisterRounds * kRowsPerRound) * rank
                                : in.w2 + id * rank;
#pragma unroll
        for (int c = 0; c < kPieces; ++c) {
          const int k = part * 8 + 64 * c;
          pieces[c] = k >= rank || id >= V ? make_uint4(0, 0, 0, 0)
                      : j < held_end       ? *reinterpret_cast<const uint4*>(row + k)
                                           : load_w2(row + k, true);
        }
        float sums[G];
#pragma unroll
        for (int r = 0; r < G; ++r) sums[r] = 0.0f;
        add_row_pieces<G>(pieces, e_shared, rank, part, count, sums);
        take_row<G, Keyed>(sums, first_id + local_row(j), u + local_row(j), ids_per_cta, V, slot, part, count, active,
                           nan_slot, keyed, best, flags);
      }
      // The CTA's best per request: over the warp, then the warps; out as this slot's partial.
      warp_bests<G>(best, flags, lane, warp_best[warp], warp_flags[warp]);
      __syncthreads();
      clocks.mark(2);
      if (threadIdx.x < count && active[threadIdx.x]) {
        const int r = threadIdx.x;
        Best cta_best{0.0, -1};
        int nonfinite = 0;
        for (int w = 0; w < kWarps; ++w) {
          cta_best = better(cta_best, warp_best[w][r]);
          nonfinite |= (warp_flags[w] >> r) & 1;
        }
        const int64_t index = (static_cast<int64_t>(slot) * G + r) * gridDim.x + blockIdx.x;
        // The slot's pick is one CTA's best: its W1 row (the next gather) asked into L2 before the handoff.
        if (cta_best.id >= 0) {
          prefetch_l2_lines(in.w1 + static_cast<int64_t>(cta_best.id) * rank, rank * 2);
        }
        if constexpr (Flagged) {
          // A keyed request's word carries its winner's logit (a float; its score is computed again from it).
          if (Keyed && keyed[r].temperature > 0 && cta_best.id >= 0) {
            cta_best.value = u[r * ids_per_cta + (cta_best.id - first_id)];
          }
          store_relaxed(words + index, pack_partial(cta_best, nonfinite));  // the word is the whole message
        } else {
          ScanPartial& out = in.partials[index];
          out.value = cta_best.value;
          out.id = cta_best.id;
          out.nonfinite = nonfinite;
          __threadfence();  // the partial is visible device-wide before this CTA arrives
        }
      }
    }
    if constexpr (!Flagged) {
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();  // cumulative: the CTA's partials (seen through the barrier above) before the arrival
        atomicAdd(barrier, 1u);
      }
      if (threadIdx.x == 0) wait_for(static_cast<unsigned int>(slot + 1) * gridDim.x);
      __syncthreads();
    }
    // Every CTA combines all partials of the slot in the same way (a total order), so all take the same pick.
    Best pick[G];
    int nonfinite = 0;
#pragma unroll
    for (int r = 0; r < G; ++r) pick[r] = Best{0.0, -1};
    // A word's pick (a keyed request's score computed again from the winner's logit it carries).
    auto take_word = [&](uint64_t word, int r) {
      nonfinite |= ((word >> 62) & 1) ? 1 << r : 0;
      Best taken = unpack_partial(word);
      if (Keyed && keyed[r].temperature > 0 && taken.id >= 0) {
        taken.value = noisy_score(static_cast<float>(taken.value), keyed[r].temperature,
                                  ls::cuda::keyed::uniform_bits(keyed[r].row_key, taken.id));
      }
      pick[r] = better(pick[r], taken);
    };
    for (int c = threadIdx.x; c < dot_ctas; c += kThreads) {
#pragma unroll
      for (int r = 0; r < G; ++r) {
        if (r >= count || !active[r]) continue;
        const int64_t index = (static_cast<int64_t>(slot) * G + r) * gridDim.x + c;
        if constexpr (Flagged) {
          // Each thread waits for its CTAs' words itself (no counter, no fence: a word arrives whole or not yet).
          const uint64_t word = wait_for_word(words + index, timeout, in.handoff_backoff_ns);
          if (!(in.planted_odd_words && c % 2 == 1)) take_word(word, r);
        } else {
          const ScanPartial* partial = in.partials + index;
          nonfinite |= __ldcg(&partial->nonfinite) ? 1 << r : 0;
          pick[r] = better(pick[r], Best{__ldcg(&partial->value), __ldcg(&partial->id)});
        }
      }
    }
    if constexpr (Flagged) __syncthreads();  // every thread past its CTA-best reads of warp_best before the reuse
    warp_bests<G>(pick, nonfinite, lane, warp_best[warp], warp_flags[warp]);
    __syncthreads();
    if (threadIdx.x == 0) {
      int all_flags = 0;
      for (int w = 0; w < kWarps; ++w) all_flags |= warp_flags[w];
      combined_flags = all_flags;
    }
    if (threadIdx.x < G) {
      const int r = threadIdx.x;
      Best chosen{0.0, -1};
      for (int w = 0; w < kWarps; ++w) chosen = better(chosen, warp_best[w][r]);
      combined[r] = chosen;
    }
    __syncthreads();
    clocks.mark(3);
    if (threadIdx.x < G) {
      const int r = threadIdx.x;
      const int32_t pick = combined[r].id < 0 ? 0 : combined[r].id;
      int state = 0;
      if (active[r]) {
        state = (combined_flags >> r) & 1 ? 2 : 1;
        if (state == 2) stopped[r] = 1;
        else previous[r] = pick;
      }
      slot_pick[slot][r] = pick;
      slot_state[slot][r] = static_cast<unsigned char>(state);
    }
    __syncthreads();
    clocks.mark(4);
  }
  clocks.slots_done(total_slots);
  // The confidences of every (request, slot) drafted, a CTA each (finish_step's arithmetic), into the request's
  // markov row (unused by this scan), then one more barrier.
  if (shape.has_confidence && total_slots > 0 && helpers > 0) {
    // The helpers computed them: each raises its arrival word after a fence, CTA 0 waits for theirs alone.
    uint64_t* arrived = words + static_cast<int64_t>(shape.gamma) * G * gridDim.x;
    if (helper) {
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();
        store_relaxed(arrived + blockIdx.x, kWordArrived);
      }
      return;
    }
    if (blockIdx.x != 0) return;
    clocks.mark(kFirstTailPhase);
    for (int c = dot_ctas + threadIdx.x; c < static_cast<int>(gridDim.x); c += kThreads) {
      wait_for_word(arrived + c, timeout);
    }
    __threadfence();
    __syncthreads();
    clocks.mark(kFirstTailPhase + 1);
  } else if (shape.has_confidence && total_slots > 0) {
    for (int item = blockIdx.x; item < count * total_slots; item += gridDim.x) {
      const int r = item / total_slots, slot = item % total_slots;
      if (slot_state[slot][r] != 1) continue;  // uniform over the CTA
      const int32_t from = slot == 0 ? anchor[r] : slot_pick[slot - 1][r];
      const float confidence = step_confidence(in, shape, slot, r, in.w1 + static_cast<int64_t>(from) * rank,
                                               slot == in.requests[r].inf_confidence_slot, s);
      if (threadIdx.x == 0) {
        in.markov[static_cast<int64_t>(r) * V + slot] = confidence;
        __threadfence();
      }
    }
    __syncthreads();
    clocks.mark(kFirstTailPhase);
    if constexpr (Flagged) {
      // Only CTA 0 reads the confidences: each CTA raises its word after a fence, CTA 0 waits for every word.
      uint64_t* arrived = words + static_cast<int64_t>(shape.gamma) * G * gridDim.x;
      if (threadIdx.x == 0) {
        __threadfence();
        store_relaxed(arrived + blockIdx.x, kWordArrived);
      }
      if (blockIdx.x != 0) return;
      // Only the CTAs that computed a confidence (CTA c took items c, c + grid, ...) are waited for.
      const int waited = min(static_cast<int>(gridDim.x), count * total_slots);
      for (int c = threadIdx.x; c < waited; c += kThreads) wait_for_word(arrived + c, timeout);
      __threadfence();
    } else if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(barrier, 1u);
      wait_for(static_cast<unsigned int>(total_slots + 1) * gridDim.x);
    }
    __syncthreads();
    clocks.mark(kFirstTailPhase + 1);
  }
  // CTA 0 writes each request's record slot by slot as finish_step does: tokens, chances (the running product),
  // and the first failure (non-finite logit, non-finite confidence, pick outside the vocabulary) by name and slot.
  if (blockIdx.x != 0) return;
  // Every confidence loaded at once (the records then wait for none of them one by one).
  __shared__ float slot_confidence[kMaxDeviceBlock][G];
  if (shape.has_confidence) {
    for (int i = threadIdx.x; i < count * total_slots; i += kThreads) {
      const int r = i / total_slots, slot = i % total_slots;
      slot_confidence[slot][r] = __ldcg(in.markov + static_cast<int64_t>(r) * V + slot);
    }
    __syncthreads();
  }
  if (threadIdx.x < count) {
    const bool timed_out = load_acquire(Flagged ? reinterpret_cast<unsigned int*>(timeout) : barrier + 1) != 0;
    write_scan_records<G>(in, shape, threadIdx.x, total_slots, slot_state, slot_pick, slot_confidence, timed_out);
  }
  clocks.tail();
}

template <int G, int RegisterRounds, bool Keyed, bool Broadcast = false>
PersistentKernel persistent_kernel_for(PersistentHandoff handoff) {
  return handoff == PersistentHandoff::Counter ? persistent_scan_kernel<G, RegisterRounds, false, Keyed, Broadcast>
                                                : persistent_scan_kernel<G, RegisterRounds, true, Keyed, Broadcast>;
}

}  // namespace

PersistentKernel persistent_kernel(bool single, PersistentHandoff handoff, bool keyed, bool broadcast) {
  constexpr int kG = kPersistentScanGroup, kS = kSingleRegisterRounds, kR = kGroupRegisterRounds;
  if (single && broadcast) {
    return keyed ? persistent_kernel_for<1, kS, true, true>(handoff)
                 : persistent_kernel_for<1, kS, false, true>(handoff);
  }
  if (keyed) return single ? persistent_kernel_for<1, kS, true>(handoff) : persistent_kernel_for<kG, kR, true>(handoff);
  return single ? persistent_kernel_for<1, kS, false>(handoff) : persistent_kernel_for<kG, kR, false>(handoff);
}

}  // namespace ls::dspark::cuda
