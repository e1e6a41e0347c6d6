// The fused Markov scan step on the device: W1 gather, corrected logits, greedy or keyed pick, confidence, failure flags.
//
// The keyed pick is compute/sampling.cpp's draw_token done by one thread block per row: candidates are ordered by
// the key (logit desc, id asc) packed into 64 bits, top-k is the k-th largest key and top-p the key where the
// probability mass first reaches top_p * total (both found by 8-bit radix descent), min-p a weight floor, then the
// Gumbel-max over the survivors in double with ties to the lower id. Only the top-p sums differ in order from the
// CPU (tree vs sequential), which can move the cut only when the mass lands within rounding of the target.
#include <cmath>
#include <cstdint>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/keyed_draw.cuh"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kPickThreads = 1024;

struct PickScratch {
  double values[kWarp];
  int32_t ids[kWarp];
  unsigned int counts[256];
  double masses[256];
  uint64_t prefix;
  double mass_above;
  int64_t remaining;
  int flag;
};

using ls::cuda::keyed::Best;
using ls::cuda::keyed::better;
using ls::cuda::keyed::gumbel;
using ls::cuda::keyed::order_key;

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
    const float value = row[id];
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
    for (int64_t id = threadIdx.x; id < vocab; id += blockDim.x) {
      const float logit = row[id];
      if (isnan(logit)) continue;
      const uint64_t key = order_key(logit, id);
      if (key < floor || (key & high_mask) != (prefix & high_mask)) continue;
      const int digit = static_cast<int>((key >> shift) & 0xff);
      atomicAdd(&s.counts[digit], 1u);
      if (masses) atomicAdd(&s.masses[digit], exp((static_cast<double>(logit) - max_logit) / temperature));
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
      const float logit = row[id];
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
    const float logit = row[id];
    if (isnan(logit) || order_key(logit, id) < floor) continue;
    if (use_min_p && exp((static_cast<double>(logit) - max_logit) / temperature) < min_weight) continue;
    const double scaled = static_cast<double>(logit) / temperature;
    const double score = scaled + gumbel(sampling.seed, position, static_cast<int32_t>(id));
    best = better(best, Best{score, static_cast<int32_t>(id)});
  }
  best = block_best(best, s);
  return best.id < 0 ? greedy.id : best.id;
}

__global__ void gather_kernel(const bf16_t* w1, const DeviceScanRequest* requests, const DeviceScanRecord* records,
                              int rank, int slot, bf16_t* embeddings) {
  const int i = blockIdx.x;
  const bool active = records[i].status == kScanOk && slot < requests[i].depth;
  const int64_t previous = records[i].previous;
  for (int j = threadIdx.x; j < rank; j += blockDim.x) {
    embeddings[static_cast<int64_t>(i) * rank + j] = active ? w1[previous * rank + j] : __float2bfloat16_rn(0.0f);
  }
}

// The end of a scan step for request i, whose corrected logits are in its markov row: the pick (from the greedy best
// over the finite logits, or the keyed draw), the confidence, the failure flags and the record. `nonfinite` and
// `greedy` are uniform over the block.
__device__ void finish_step(const ScanStepInputs& in, const ScanShape& shape, int slot, int i,
                            const DeviceScanRequest& request, DeviceScanRecord& record, int nonfinite, Best greedy,
                            PickScratch& s) {
  const int64_t V = shape.vocab;
  const float* row = in.markov + static_cast<int64_t>(i) * V;
  int32_t pick = 0;
  if (!nonfinite) pick = keyed_pick(row, V, request, request.anchor_position + slot + 1, greedy, s);
  float chance = NAN;
  bool confidence_finite = true;
  if (shape.has_confidence) {
    const int64_t block_row = static_cast<int64_t>(i) * shape.gamma + slot;
    const bf16_t* hidden = in.final_hidden + block_row * shape.hidden;
    const bf16_t* e = in.w1 ? in.w1 + static_cast<int64_t>(record.previous) * shape.rank
                            : in.embeddings + static_cast<int64_t>(i) * shape.rank;
    double z = 0;
    for (int j = threadIdx.x; j < shape.hidden + shape.rank; j += blockDim.x) {
      const float x = j < shape.hidden ? __bfloat162float(hidden[j]) : __bfloat162float(e[j - shape.hidden]);
      z += static_cast<double>(in.confidence_weight[j]) * x;
    }
    z = block_sum(z, s) + in.confidence_bias;
    float logit = static_cast<float>(z);
    if (in.confidence_temperatures) logit /= in.confidence_temperatures[slot];
    float confidence = 1.0f / (1.0f + expf(-logit));
    if (slot == request.inf_confidence_slot) confidence = INFINITY;
    confidence_finite = isfinite(confidence);
    chance = record.running * confidence;
  }
  if (threadIdx.x != 0) return;
  if (slot == request.out_of_range_pick_slot) pick = static_cast<int32_t>(V);
  int32_t status = kScanOk;
  if (nonfinite) status = kScanNonfiniteLogit;
  else if (!confidence_finite) status = kScanNonfiniteConfidence;
  else if (pick < 0 || pick >= V) status = kScanPickOutOfRange;
  if (status != kScanOk) {
    record.status = status;
    record.failed_slot = slot;
    record.failed_pick = pick;
    return;
  }
  record.tokens[slot] = pick;
  record.chances[slot] = chance;
  if (shape.has_confidence) record.running = chance;
  record.previous = pick;
}

__global__ void __launch_bounds__(kPickThreads) pick_kernel(ScanStepInputs in, ScanShape shape, int slot) {
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
  for (int64_t id = threadIdx.x; id < V; id += blockDim.x) {
    float logit = row[id] + base[id];
    if (slot == request.nan_logit_slot && id == V / 2) logit = NAN;
    row[id] = logit;
    if (isfinite(logit)) {
      greedy = better(greedy, Best{static_cast<double>(logit), static_cast<int32_t>(id)});
    } else {
      nonfinite = 1;
    }
  }
  nonfinite = __syncthreads_or(nonfinite);
  if (!nonfinite) greedy = block_best(greedy, s);
  finish_step(in, shape, slot, i, request, record, nonfinite, greedy, s);
}

constexpr int kGroup = 8;            // requests per CTA of the fused logits kernel
constexpr int kLogitThreads = 256;   // 8 warps, each 4 ids at a time (8 lanes per W2 row)
constexpr int kLogitWarps = kLogitThreads / kWarp;
constexpr int kMaxPieces = kMaxFusedScanRank / 64;  // 16-byte pieces of a W2 row per lane (8 lanes a row)

// Grid (vocab chunk, request group): l = W2 e + U for ids of the chunk and requests first .. first+group-1 still
// drafting; writes l to the markov rows and the chunk's partial (greedy best over finite logits, non-finite flag).
__global__ void __launch_bounds__(kLogitThreads) fused_logits_kernel(ScanStepInputs in, ScanShape shape, int slot) {
  extern __shared__ float e_shared[];  // [kGroup, rank]
  __shared__ int active[kGroup];
  __shared__ Best warp_best[kLogitWarps][kGroup];
  __shared__ int warp_flags[kLogitWarps];
  const int first = blockIdx.y * kGroup;
  const int group = min(kGroup, in.count - first);
  const int rank = shape.rank;
  const int64_t V = shape.vocab;
  if (threadIdx.x < kGroup) {
    const int i = first + threadIdx.x;
    active[threadIdx.x] = threadIdx.x < group && in.records[i].status == kScanOk && slot < in.requests[i].depth;
  }
  __syncthreads();
  for (int index = threadIdx.x; index < kGroup * rank; index += blockDim.x) {
    const int r = index / rank, j = index % rank;
    float value = 0.0f;
    if (active[r]) value = __bfloat162float(in.w1[static_cast<int64_t>(in.records[first + r].previous) * rank + j]);
    e_shared[index] = value;
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int sub = lane / 8, part = lane % 8;
  const int64_t chunk_first = static_cast<int64_t>(blockIdx.x) * kFusedScanIds;
  const int64_t chunk_end = min(chunk_first + kFusedScanIds, V);
  Best best[kGroup];
  int flags = 0;
#pragma unroll
  for (int r = 0; r < kGroup; ++r) best[r] = Best{0.0, -1};
  for (int64_t row_first = chunk_first + warp * 4; row_first < chunk_end; row_first += kLogitWarps * 4) {
    const int64_t id = row_first + sub;
    float sums[kGroup];
#pragma unroll
    for (int r = 0; r < kGroup; ++r) sums[r] = 0.0f;
    if (id < chunk_end) {
      // All of this lane's 16-byte pieces of the W2 row in flight at once (rank <= 256: at most 4), then the dots.
      const bf16_t* w = in.w2 + id * rank;
      uint4 raw[kMaxPieces];
#pragma unroll
      for (int c = 0; c < kMaxPieces; ++c) {
        const int k = part * 8 + 64 * c;
        raw[c] = k < rank ? *reinterpret_cast<const uint4*>(w + k) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int c = 0; c < kMaxPieces; ++c) {
        const int k = part * 8 + 64 * c;
        if (k >= rank) break;
        float weights[8];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[c]);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 pair = __bfloat1622float2(pairs[q]);
          weights[2 * q] = pair.x;
          weights[2 * q + 1] = pair.y;
        }
#pragma unroll
        for (int r = 0; r < kGroup; ++r) {
          if (r < group) {
            const float4* e = reinterpret_cast<const float4*>(e_shared + r * rank + k);
            const float4 lo = e[0], hi = e[1];
            sums[r] = fmaf(weights[0], lo.x, sums[r]);
            sums[r] = fmaf(weights[1], lo.y, sums[r]);
            sums[r] = fmaf(weights[2], lo.z, sums[r]);
            sums[r] = fmaf(weights[3], lo.w, sums[r]);
            sums[r] = fmaf(weights[4], hi.x, sums[r]);
            sums[r] = fmaf(weights[5], hi.y, sums[r]);
            sums[r] = fmaf(weights[6], hi.z, sums[r]);
            sums[r] = fmaf(weights[7], hi.w, sums[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kGroup; ++r) {
      for (int offset = 4; offset > 0; offset /= 2) sums[r] += __shfl_xor_sync(0xffffffffu, sums[r], offset);
    }
    if (part == 0 && id < chunk_end) {
#pragma unroll
      for (int r = 0; r < kGroup; ++r) {
        if (r >= group || !active[r]) continue;
        const int i = first + r;
        float logit = sums[r] + in.base_logits[(static_cast<int64_t>(i) * shape.gamma + slot) * V + id];
        if (slot == in.requests[i].nan_logit_slot && id == V / 2) logit = NAN;
        in.markov[static_cast<int64_t>(i) * V + id] = logit;
        if (isfinite(logit)) best[r] = better(best[r], Best{static_cast<double>(logit), static_cast<int32_t>(id)});
        else flags |= 1 << r;
      }
    }
  }
  // The chunk's best per request: over the warp's lanes, then the warps in order.
#pragma unroll
  for (int r = 0; r < kGroup; ++r) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const Best other{__shfl_xor_sync(0xffffffffu, best[r].value, offset),
                       __shfl_xor_sync(0xffffffffu, best[r].id, offset)};
      best[r] = better(best[r], other);
    }
    if (lane == 0) warp_best[warp][r] = best[r];
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) flags |= __shfl_xor_sync(0xffffffffu, flags, offset);
  if (lane == 0) warp_flags[warp] = flags;
  __syncthreads();
  if (threadIdx.x < group && active[threadIdx.x]) {
    const int r = threadIdx.x;
    Best chunk_best{0.0, -1};
    int nonfinite = 0;
    for (int w = 0; w < kLogitWarps; ++w) {
      chunk_best = better(chunk_best, warp_best[w][r]);
      nonfinite |= (warp_flags[w] >> r) & 1;
    }
    ScanPartial& out = in.partials[static_cast<int64_t>(first + r) * gridDim.x + blockIdx.x];
    out.value = chunk_best.value;
    out.id = chunk_best.id;
    out.nonfinite = nonfinite;
  }
}

// One CTA per request: the chunks' partials (in chunk order), then finish_step.
__global__ void __launch_bounds__(kPickThreads) fused_finish_kernel(ScanStepInputs in, ScanShape shape, int slot,
                                                                    int chunks) {
  __shared__ PickScratch s;
  const int i = blockIdx.x;
  const DeviceScanRequest request = in.requests[i];
  DeviceScanRecord& record = in.records[i];
  if (record.status != kScanOk || slot >= request.depth) return;  // uniform over the block
  Best greedy{0.0, -1};
  int nonfinite = 0;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const ScanPartial partial = in.partials[static_cast<int64_t>(i) * chunks + c];
    nonfinite |= partial.nonfinite;
    greedy = better(greedy, Best{partial.value, partial.id});
  }
  nonfinite = __syncthreads_or(nonfinite);
  if (!nonfinite) greedy = block_best(greedy, s);
  finish_step(in, shape, slot, i, request, record, nonfinite, greedy, s);
}

__global__ void __launch_bounds__(kPickThreads) draw_rows_kernel(const float* logits, int64_t vocab,
                                                                 const DeviceScanRequest* samplings,
                                                                 const int64_t* positions, int32_t* picks) {
  __shared__ PickScratch s;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const Best greedy = row_argmax(row, vocab, s);
  const DeviceScanRequest sampling = samplings[blockIdx.x];
  const int32_t pick = keyed_pick(row, vocab, sampling, positions[blockIdx.x], greedy, s);
  if (threadIdx.x == 0) picks[blockIdx.x] = pick;
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
  pick_kernel<<<inputs.count, kPickThreads, 0, stream>>>(inputs, shape, slot);
  LS_CUDA_TRY_LAUNCH("markov_pick");
  return ok_status();
}

Status markov_step_fused(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream) {
  if (inputs.count == 0) return ok_status();
  if (!fused_scan_supported(shape)) {
    return Status(ErrorCode::UnsupportedDraftShape,
                  "the fused Markov scan takes a rank that is a multiple of 8 up to " +
                      std::to_string(kMaxFusedScanRank) + ", not " + std::to_string(shape.rank));
  }
  LS_RETURN_IF_ERROR(markov_fused_logits(inputs, shape, slot, stream));
  return markov_fused_finish(inputs, shape, slot, stream);
}

Status markov_fused_logits(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream) {
  if (inputs.count == 0) return ok_status();
  const int chunks = static_cast<int>(fused_scan_chunks(shape.vocab));
  const dim3 grid(chunks, (inputs.count + kGroup - 1) / kGroup);
  const size_t bytes = sizeof(float) * kGroup * shape.rank;
  fused_logits_kernel<<<grid, kLogitThreads, bytes, stream>>>(inputs, shape, slot);
  LS_CUDA_TRY_LAUNCH("markov_step_fused logits");
  return ok_status();
}

Status markov_fused_finish(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream) {
  if (inputs.count == 0) return ok_status();
  const int chunks = static_cast<int>(fused_scan_chunks(shape.vocab));
  fused_finish_kernel<<<inputs.count, kPickThreads, 0, stream>>>(inputs, shape, slot, chunks);
  LS_CUDA_TRY_LAUNCH("markov_step_fused finish");
  return ok_status();
}

Status draw_rows_on_device(const float* logits, int rows, int64_t vocab, const DeviceScanRequest* samplings,
                           const int64_t* positions, int32_t* picks, cudaStream_t stream) {
  if (rows == 0) return ok_status();
  draw_rows_kernel<<<rows, kPickThreads, 0, stream>>>(logits, vocab, samplings, positions, picks);
  LS_CUDA_TRY_LAUNCH("draw_rows_on_device");
  return ok_status();
}

}  // namespace ls::dspark::cuda
