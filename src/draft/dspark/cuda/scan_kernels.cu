// The fused Markov scan step on the device: W1 gather, corrected logits, greedy or keyed pick, confidence, failure flags.
//
// The keyed pick is compute/sampling.cpp's draw_token done by one thread block per row (scan_pick.cuh, variants in
// scan_pick.h): candidates are ordered by the key (logit desc, id asc) packed into 64 bits. The radix variant finds
// top-k as the k-th largest key and top-p as the key where the probability mass first reaches top_p * total (8-bit
// radix descents; its top-p sums differ in order from the CPU's, which can move the cut when the mass lands within
// rounding of the target), then the Gumbel max over the survivors. The verified variant (session 9) takes the
// pruned Gumbel max first and checks only whether top-p keeps the winner, by bounded float sums or, where the
// bound cannot decide, the CPU's one-by-one sums.
#include <cmath>
#include <cstdint>
#include <string>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/features.h"
#include "compute/cuda/keyed_draw.cuh"
#include "draft/dspark/cuda/device_steps.cuh"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/scan_finish.cuh"
#include "draft/dspark/cuda/scan_pick.h"

namespace ls::dspark::cuda {
namespace {

__global__ void gather_kernel(const bf16_t* w1, const DeviceScanRequest* requests, const DeviceScanRecord* records,
                              int rank, int slot, bf16_t* embeddings) {
  const int i = blockIdx.x;
  const bool active = records[i].status == kScanOk && slot < requests[i].depth;
  const int64_t previous = records[i].previous;
  for (int j = threadIdx.x; j < rank; j += blockDim.x) {
    embeddings[static_cast<int64_t>(i) * rank + j] = active ? w1[previous * rank + j] : __float2bfloat16_rn(0.0f);
  }
}

// Adds the base logits into ids [first, end) of the request's Markov row (writing them back; the planted NaN at
// V / 2 for the fault test), keeping the thread's greedy best over finite logits and flagging non-finite ones.
__device__ void correct_and_scan(float* row, const float* base, int64_t first, int64_t end, int slot,
                                 const DeviceScanRequest& request, int64_t V, Best& greedy, int& nonfinite) {
  for (int64_t id = first + threadIdx.x; id < end; id += blockDim.x) {
    float logit = row[id] + base[id];
    if (slot == request.nan_logit_slot && id == V / 2) logit = NAN;
    row[id] = logit;
    if (isfinite(logit)) {
      greedy = better(greedy, Best{static_cast<double>(logit), static_cast<int32_t>(id)});
    } else {
      nonfinite = 1;
    }
  }
}

__global__ void __launch_bounds__(kPickThreads) pick_kernel(ScanStepInputs in, ScanShape shape, int slot, int mode) {
  __shared__ PickScratch s;
  const int i = blockIdx.x;
  const DeviceScanRequest request = in.requests[i];
  DeviceScanRecord& record = in.records[i];
  if (record.status != kScanOk || slot >= request.depth) return;  // uniform over the block
  const int64_t V = shape.vocab;
  float* row = in.markov + static_cast<int64_t>(i) * V;
  const float* base = in.base_logits + (static_cast<int64_t>(i) * shape.gamma + slot) * V;
  // One pass writes the corrected logits, flags non-finite ones and finds the greedy pick among the finite ones
  // (when any is non-finite the request fails, so the pick does not matter then).
  int nonfinite = 0;
  Best greedy{0.0, -1};
  correct_and_scan(row, base, 0, V, slot, request, V, greedy, nonfinite);
  nonfinite = __syncthreads_or(nonfinite);
  if (!nonfinite) greedy = block_best(greedy, s);
  finish_step<kPickThreads>(in, shape, slot, i, request, record, nonfinite, greedy, mode, s);
}

constexpr int kChunkPickThreads = 256;

// The spread first rounds of markov_pick_split: [count, chunks, 3] partials after the [count, chunks] greedy ones
// (the buffer holds [count, fused_scan_chunks(V)], 64 per split chunk): (total, count), (error), (winner), the
// sums relative to the chunk's own max.
__device__ __forceinline__ ScanPartial* spread_partials(const ScanStepInputs& in, int chunks, int i, int chunk) {
  return in.partials + static_cast<int64_t>(in.count) * chunks + (static_cast<int64_t>(i) * chunks + chunk) * 3;
}
// Then [count, chunks, kSpreadTopK] keys: each chunk's own top-k keys (top-k rows), their number in the chunk's
// first spread partial's id.
__device__ __forceinline__ uint64_t* spread_keys(const ScanStepInputs& in, int chunks, int i, int chunk) {
  uint64_t* base = reinterpret_cast<uint64_t*>(in.partials + static_cast<int64_t>(in.count) * chunks * 4);
  return base + (static_cast<int64_t>(i) * chunks + chunk) * kSpreadTopK;
}
// The split pick's spread parts (a bit mask kernel argument): the first round, the top-k set.
// kSpreadStaged (session 11): the finish kernel's combine of the first rounds with every chunk's terms loaded and
// rescaled in parallel into shared memory (up to kStagedChunks chunks), then added in chunk order by one thread.
// kSpreadStagedPlanted (tests only): the staged adds leave the last chunk out.
constexpr int kSpreadRound = 1, kSpreadTopKSet = 2, kSpreadStaged = 4, kSpreadStagedPlanted = 8;
constexpr int kStagedChunks = 64;
// Whether a request's top-k set is spread (the chunks' own top-k keys merged by the request's CTA).
__device__ __forceinline__ bool spread_top_k(const DeviceScanRequest& r, int64_t vocab) {
  return r.temperature > 0.0f && r.top_k > 0 && r.top_k < vocab && r.top_k <= kSpreadTopK;
}

// markov_pick's first half for one vocab chunk of one request: the corrected logits written back, the chunk's
// greedy best over its finite logits and its non-finite flag as a partial [request, chunk].
__global__ void __launch_bounds__(kChunkPickThreads) pick_chunks_kernel(ScanStepInputs in, ScanShape shape, int slot,
                                                                         int chunks, int spread) {
  __shared__ PickScratch s;
  const int i = blockIdx.y;
  const DeviceScanRequest request = in.requests[i];
  if (in.records[i].status != kScanOk || slot >= request.depth) return;  // uniform over the block
  const int64_t V = shape.vocab;
  float* row = in.markov + static_cast<int64_t>(i) * V;
  const float* base = in.base_logits + (static_cast<int64_t>(i) * shape.gamma + slot) * V;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kSplitPickIds;
  const int64_t end = first + kSplitPickIds < V ? first + kSplitPickIds : V;
  int nonfinite = 0;
  Best greedy{0.0, -1};
  correct_and_scan(row, base, first, end, slot, request, V, greedy, nonfinite);
  nonfinite = __syncthreads_or(nonfinite);
  greedy = block_best(greedy, s);
  if (threadIdx.x == 0) {
    ScanPartial& out = in.partials[static_cast<int64_t>(i) * chunks + blockIdx.x];
    out.value = greedy.value;
    out.id = greedy.id;
    out.nonfinite = nonfinite;
  }
  // Spread (verified picks): the first round over the chunk, its weights relative to the chunk's max (the row's
  // is not known yet; the last launch rescales). The corrected logits written above are this CTA's own.
  if (!spread || nonfinite || greedy.id < 0) return;  // uniform over the block
  if (spread_top_k(request, V)) {
    if (!(spread & kSpreadTopKSet)) return;
    // The chunk's own top-k keys (all of its keys when it holds fewer).
    const uint64_t bottom = select_key<kChunkPickThreads>(row, first, end, 0, ~0ull, request.top_k, s);
    if (threadIdx.x == 0) s.gathered = 0;
    __syncthreads();
    uint64_t* keys = spread_keys(in, chunks, i, blockIdx.x);
    for_ids<kChunkPickThreads>(row, first, end, [&](int64_t id, float logit) {
      const uint64_t key = order_key(logit, id);  // every logit here is finite
      if (key >= bottom) keys[atomicAdd(&s.gathered, 1u)] = key;
    });
    __syncthreads();
    if (threadIdx.x == 0) spread_partials(in, chunks, i, blockIdx.x)[0].id = static_cast<int32_t>(s.gathered);
    return;
  }
  if (!(spread & kSpreadRound) || !spreadable(request, V)) return;
  const PickSetup p = pick_setup(request, request.anchor_position + slot + 1, greedy.value, 0);
  const GumbelRound round = gumbel_round<kChunkPickThreads>(row, first, end, p, 0, p.use_top_p, s);
  if (threadIdx.x == 0) {
    ScanPartial* out = spread_partials(in, chunks, i, blockIdx.x);
    out[0] = ScanPartial{round.total, static_cast<int32_t>(round.count), 0};
    out[1] = ScanPartial{round.error, -1, 0};
    out[2] = ScanPartial{round.winner.value, round.winner.id, 0};
  }
}

// markov_pick_split's last launch: a CTA per request combines its chunks' partials (the better of two is a total
// order, so the greedy pick is the one-CTA pick's; with `spread`, the first rounds added in chunk order) and
// finishes the step.
__global__ void __launch_bounds__(kPickThreads) pick_finish_kernel(ScanStepInputs in, ScanShape shape, int slot,
                                                                    int chunks, int mode, int spread) {
  __shared__ PickScratch s;
  __shared__ GumbelRound given;
  __shared__ uint64_t merged[kSpreadKeys];
  __shared__ double staged_total[kStagedChunks], staged_error[kStagedChunks], staged_winner[kStagedChunks];
  __shared__ int32_t staged_count[kStagedChunks], staged_id[kStagedChunks];
  const int i = blockIdx.x;
  const DeviceScanRequest request = in.requests[i];
  DeviceScanRecord& record = in.records[i];
  if (record.status != kScanOk || slot >= request.depth) return;  // uniform over the block
  int nonfinite = 0;
  Best greedy{0.0, -1};
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const ScanPartial partial = in.partials[static_cast<int64_t>(i) * chunks + c];
    nonfinite |= partial.nonfinite;
    greedy = better(greedy, Best{partial.value, partial.id});
  }
  nonfinite = __syncthreads_or(nonfinite);
  if (!nonfinite) greedy = block_best(greedy, s);
  const bool spread_here = (spread & kSpreadRound) && !nonfinite && greedy.id >= 0 && spreadable(request, shape.vocab);
  if (spread_here && (spread & kSpreadStaged) && chunks <= kStagedChunks) {
    // The same terms as below (each chunk's scale and products by its own thread), then the same adds in chunk
    // order: the same bits without a chain of dependent L2 loads and exps in one thread.
    const double temperature = request.temperature;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
      const ScanPartial* part = spread_partials(in, chunks, i, c);
      const double scale =
          exp((__ldcg(&in.partials[static_cast<int64_t>(i) * chunks + c].value) - greedy.value) / temperature);
      staged_total[c] = scale * __ldcg(&part[0].value);
      staged_count[c] = __ldcg(&part[0].id);
      staged_error[c] = scale * __ldcg(&part[1].value);
      staged_winner[c] = __ldcg(&part[2].value);
      staged_id[c] = __ldcg(&part[2].id);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      GumbelRound all{0, 0, 0, Best{0.0, -1}};
      const int added = spread & kSpreadStagedPlanted ? chunks - 1 : chunks;
      for (int c = 0; c < added; ++c) {
        all.total += staged_total[c];
        all.count += staged_count[c];
        all.error += staged_error[c];
        all.winner = better(all.winner, Best{staged_winner[c], staged_id[c]});
      }
      given = all;
    }
  } else if (spread_here && threadIdx.x == 0) {
    // Chunk order; each chunk's sums rescaled from its own max m to the row's: x exp((m - max) / T).
    GumbelRound all{0, 0, 0, Best{0.0, -1}};
    const double temperature = request.temperature;
    for (int c = 0; c < chunks; ++c) {
      const ScanPartial* part = spread_partials(in, chunks, i, c);
      const double scale = exp((in.partials[static_cast<int64_t>(i) * chunks + c].value - greedy.value) / temperature);
      all.total += scale * __ldcg(&part[0].value);
      all.count += __ldcg(&part[0].id);
      all.error += scale * __ldcg(&part[1].value);
      all.winner = better(all.winner, Best{__ldcg(&part[2].value), __ldcg(&part[2].id)});
    }
    given = all;
  }
  __syncthreads();
  int32_t pick = -1;
  if ((spread & kSpreadTopKSet) && !nonfinite && greedy.id >= 0 && spread_top_k(request, shape.vocab)) {
    // The chunks' own top-k keys merged (sorted descending): the row's top-k set is the first top_k of them.
    for (int at = threadIdx.x; at < kSpreadKeys; at += kPickThreads) {
      const int c = at / kSpreadTopK, j = at % kSpreadTopK;
      merged[at] = c < chunks && j < __ldcg(&spread_partials(in, chunks, i, c)[0].id)
                       ? __ldcg(spread_keys(in, chunks, i, c) + j)
                       : 0;
    }
    ls::cuda::keyed::sort_descending<kSpreadKeys, kPickThreads>(merged);
    pick = small_set_pick(in.markov + static_cast<int64_t>(i) * shape.vocab, merged, request.top_k, request,
                          request.anchor_position + slot + 1, greedy, s);
  }
  finish_step<kPickThreads>(in, shape, slot, i, request, record, nonfinite, greedy, mode, s,
                            spread_here ? &given : nullptr, pick);
}

// kStepThreads (scan_pick.cuh): 8 warps; 8 lanes per W2 row, so 4 rows per warp instruction.
constexpr int kStepWarps = kStepThreads / kWarp;
constexpr int kStepRounds = kFusedScanIds / (kStepWarps * 4);  // W2 rows per lane group, all loaded up front
constexpr int kMaxPieces = kMaxFusedScanRank / 64;  // 16-byte pieces of a W2 row per lane (8 lanes a row)
static_assert(kStepRounds * kStepWarps * 4 == kFusedScanIds, "a step CTA covers kFusedScanIds ids");

// One Markov scan step in one launch. Grid (vocab chunk of kFusedScanIds ids, group of G requests): each lane's W2
// pieces are loaded before anything else (before waiting for the previous step), then l = W2 W1[previous] + U_slot
// for the chunk (fp32 dot, 8 lanes per W2 row), the corrected row written, the chunk's greedy best and non-finite
// flag as a partial. The CTA that finishes a group last (a ticket counter, reset by that CTA) combines the group's
// partials and runs finish_step for each of its requests: the two-stage combine is fixed, so the pick does not
// depend on which CTA finishes last.
// The minimum resident CTAs cap the registers at the GEMV's own needs (sessions 5-8: 60 for one request, 80 for a
// group), so the keyed pick in the last CTA (spilling there) does not cost the GEMV its occupancy.
// ProductOnly (one request, markov_product_fused): only W2 e in the same order, written raw for markov_pick_split
// (no U, partials or pick; `mode` != 0 plants U into the product, which the pick then adds again: tests only).
template <int G, bool ProductOnly = false>
__global__ void __launch_bounds__(kStepThreads, G == 1 ? 4 : 3) scan_step_kernel(ScanStepInputs in, ScanShape shape, int slot,
                                                                 int chunks, int mode) {
  extern __shared__ float e_shared[];  // [G, rank]
  __shared__ int active[G];
  __shared__ Best warp_best[kStepWarps][G];
  __shared__ int warp_flags[kStepWarps];
  __shared__ int last;
  __shared__ PickScratch s;
  const int first = blockIdx.y * G;
  const int group = min(G, in.count - first);
  const int rank = shape.rank;
  const int64_t V = shape.vocab;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int sub = lane / 8, part = lane % 8;
  const int64_t chunk_first = static_cast<int64_t>(blockIdx.x) * kFusedScanIds;
  int64_t ids[kStepRounds];
  uint4 raw[kStepRounds][kMaxPieces];
#pragma unroll
  for (int j = 0; j < kStepRounds; ++j) {
    ids[j] = chunk_first + (j * kStepWarps + warp) * 4 + sub;
#pragma unroll
    for (int c = 0; c < kMaxPieces; ++c) {
      const int k = part * 8 + 64 * c;
      raw[j][c] = ids[j] < V && k < rank ? load_w2(in.w2 + ids[j] * rank + k, in.keep_w2) : make_uint4(0, 0, 0, 0);
    }
  }
  let_next_kernel_start();
  wait_for_previous_kernel();
  // U for this lane's rows (every request of the group holds a row of U), then who is still drafting and e.
  float base[kStepRounds][G];
#pragma unroll
  for (int j = 0; j < kStepRounds; ++j) {
#pragma unroll
    for (int r = 0; r < G; ++r) {
      base[j][r] = r < group && ids[j] < V && part == 0 && (!ProductOnly || mode != 0)
                       ? in.base_logits[(static_cast<int64_t>(first + r) * shape.gamma + slot) * V + ids[j]]
                       : 0.0f;
    }
  }
  // Who is still drafting and e = W1[previous], read together (one round trip before the W1 row).
  for (int index = threadIdx.x; index < G * rank; index += blockDim.x) {
    const int r = index / rank, j = index % rank;
    const int i = first + r;
    const bool on = r < group && in.records[i].status == kScanOk && slot < in.requests[i].depth;
    e_shared[index] = on ? __bfloat162float(in.w1[static_cast<int64_t>(in.records[i].previous) * rank + j]) : 0.0f;
    if (j == 0) active[r] = on;
  }
  __syncthreads();
  Best best[G];
  int flags = 0;
#pragma unroll
  for (int r = 0; r < G; ++r) best[r] = Best{0.0, -1};
#pragma unroll
  for (int j = 0; j < kStepRounds; ++j) {
    float sums[G];
#pragma unroll
    for (int r = 0; r < G; ++r) sums[r] = 0.0f;
    add_row_pieces<G>(raw[j], e_shared, rank, part, group, sums);
#pragma unroll
    for (int r = 0; r < G; ++r) {
      for (int offset = 4; offset > 0; offset /= 2) sums[r] += __shfl_xor_sync(0xffffffffu, sums[r], offset);
    }
    if (ProductOnly) {
      if (part == 0 && ids[j] < V && active[0]) {
        in.markov[static_cast<int64_t>(first) * V + ids[j]] = mode == 0 ? sums[0] : sums[0] + base[j][0];
      }
      continue;
    }
    if (part == 0 && ids[j] < V) {
      const int64_t id = ids[j];
#pragma unroll
      for (int r = 0; r < G; ++r) {
        if (r >= group || !active[r]) continue;
        const int i = first + r;
        float logit = sums[r] + base[j][r];
        if (id == V / 2 && slot == in.requests[i].nan_logit_slot) logit = NAN;
        in.markov[static_cast<int64_t>(i) * V + id] = logit;
        if (isfinite(logit)) best[r] = better(best[r], Best{static_cast<double>(logit), static_cast<int32_t>(id)});
        else flags |= 1 << r;
      }
    }
  }
  if (ProductOnly) return;
  // The chunk's best per request: over the warp's lanes, then the warps.
  warp_bests<G>(best, flags, lane, warp_best[warp], warp_flags[warp]);
  __syncthreads();
  if (threadIdx.x < group && active[threadIdx.x]) {
    const int r = threadIdx.x;
    Best chunk_best{0.0, -1};
    int nonfinite = 0;
    for (int w = 0; w < kStepWarps; ++w) {
      chunk_best = better(chunk_best, warp_best[w][r]);
      nonfinite |= (warp_flags[w] >> r) & 1;
    }
    ScanPartial& out = in.partials[static_cast<int64_t>(first + r) * chunks + blockIdx.x];
    out.value = chunk_best.value;
    out.id = chunk_best.id;
    out.nonfinite = nonfinite;
    __threadfence();  // the partial is visible device-wide before this CTA's ticket
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int ticket = atomicAdd(&in.tickets[blockIdx.y], 1u);
    last = ticket == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  // The group's last CTA: every partial and corrected row of the group is written (each CTA fenced before its
  // ticket); reads below go to L2 (__ldcg), never a stale L1 line.
  __threadfence();
  if (threadIdx.x == 0) in.tickets[blockIdx.y] = 0;  // ready for the next step (the next launch waits for this one)
  for (int r = 0; r < group; ++r) {
    if (!active[r]) continue;  // uniform over the block
    const int i = first + r;
    Best greedy{0.0, -1};
    int nonfinite = 0;
    const ScanPartial* partials = in.partials + static_cast<int64_t>(i) * chunks;
    // The better of two is a total order: the chunks' partials may be taken in any grouping (loaded 4 at a time).
    for (int c = threadIdx.x; c < chunks; c += 4 * blockDim.x) {
      ScanPartial taken[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int at = c + b * blockDim.x;
        taken[b].nonfinite = at < chunks ? __ldcg(&partials[at].nonfinite) : 0;
        taken[b].value = at < chunks ? __ldcg(&partials[at].value) : 0.0;
        taken[b].id = at < chunks ? __ldcg(&partials[at].id) : -1;
      }
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        nonfinite |= taken[b].nonfinite;
        greedy = better(greedy, Best{taken[b].value, taken[b].id});
      }
    }
    nonfinite = __syncthreads_or(nonfinite);
    if (!nonfinite) greedy = block_best(greedy, s);
    const DeviceScanRequest request = in.requests[i];
    finish_step<kStepThreads>(in, shape, slot, i, request, in.records[i], nonfinite, greedy, mode, s);
    __syncthreads();
  }
}

}  // namespace

Status markov_gather(const bf16_t* w1, const DeviceScanRequest* requests, const DeviceScanRecord* records, int count,
                     ScanShape shape, int slot, bf16_t* embeddings, cudaStream_t stream) {
  if (count == 0) return ok_status();
  gather_kernel<<<count, 256, 0, stream>>>(w1, requests, records, shape.rank, slot, embeddings);
  LS_CUDA_TRY_LAUNCH("markov_gather");
  return ok_status();
}

Status markov_pick(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream) {
  if (inputs.count == 0) return ok_status();
  pick_kernel<<<inputs.count, kPickThreads, 0, stream>>>(inputs, shape, slot, static_cast<int>(draft_pick_mode()));
  LS_CUDA_TRY_LAUNCH("markov_pick");
  return ok_status();
}

Status markov_pick_split(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream) {
  if (inputs.count == 0) return ok_status();
  const int chunks = static_cast<int>(split_pick_chunks(shape.vocab));
  const DraftPickMode mode = draft_pick_mode();
  // The spread rounds write [count, chunks, 3] partials after the greedy ones, then [count, chunks, kSpreadTopK]
  // keys: (4 + kSpreadTopK / 2) x chunks per request must fit the buffer's fused_scan_chunks(V) per request, and
  // the merge takes chunks x kSpreadTopK keys.
  const bool on = mode != DraftPickMode::Radix && draft_pick_spread();
  const int64_t room = fused_scan_chunks(shape.vocab);
  const int spread = (on && 4 * static_cast<int64_t>(chunks) <= room ? kSpreadRound : 0) |
                     (on && (4 + kSpreadTopK / 2) * static_cast<int64_t>(chunks) <= room &&
                              chunks * kSpreadTopK <= kSpreadKeys
                          ? kSpreadTopKSet
                          : 0) |
                     (on && draft_pick_staged() ? kSpreadStaged : 0) |
                     (on && draft_pick_staged_planted() ? kSpreadStagedPlanted : 0);
  pick_chunks_kernel<<<dim3(chunks, inputs.count), kChunkPickThreads, 0, stream>>>(inputs, shape, slot, chunks,
                                                                                  spread);
  LS_CUDA_TRY_LAUNCH("markov_pick_split chunks");
  pick_finish_kernel<<<inputs.count, kPickThreads, 0, stream>>>(inputs, shape, slot, chunks, static_cast<int>(mode),
                                                                 spread);
  LS_CUDA_TRY_LAUNCH("markov_pick_split finish");
  return ok_status();
}

// One scan step kernel over (vocab chunk, group of `group` requests), launched programmatically where allowed.
template <typename Kernel>
Status launch_step(Kernel kernel, const ScanStepInputs& inputs, ScanShape shape, int slot, int group, int mode,
                   cudaStream_t stream) {
  const int chunks = static_cast<int>(fused_scan_chunks(shape.vocab));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(chunks, (inputs.count + group - 1) / group);
  config.blockDim = dim3(kStepThreads);
  config.dynamicSmemBytes = sizeof(float) * group * shape.rank;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = inputs.programmatic && ls::cuda::cuda_features().pdl ? 1 : 0;  // not on the portable sm_80 path
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, inputs, shape, slot, chunks, mode));
  return ok_status();
}

Status markov_step_fused(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream) {
  if (inputs.count == 0) return ok_status();
  if (!fused_scan_supported(shape)) {
    return Status(ErrorCode::UnsupportedDraftShape,
                  "the fused Markov scan takes a rank that is a multiple of 8 up to " +
                      std::to_string(kMaxFusedScanRank) + ", not " + std::to_string(shape.rank));
  }
  const int mode = static_cast<int>(draft_pick_mode());
  if (inputs.count == 1) return launch_step(scan_step_kernel<1>, inputs, shape, slot, 1, mode, stream);
  return launch_step(scan_step_kernel<kFusedScanGroup>, inputs, shape, slot, kFusedScanGroup, mode, stream);
}

Status markov_product_fused(const ScanStepInputs& inputs, ScanShape shape, int slot, bool planted_base,
                            cudaStream_t stream) {
  if (inputs.count != 1 || !fused_scan_supported(shape)) {
    return Status(ErrorCode::InvalidArgument, "markov_product_fused takes one request of a fused-scan rank");
  }
  return launch_step(scan_step_kernel<1, true>, inputs, shape, slot, 1, planted_base ? 1 : 0, stream);
}

}  // namespace ls::dspark::cuda
