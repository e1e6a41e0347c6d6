// The DSpark Markov scan and confidence head (reference/dspark.md §2.8-2.9), with the failure flags.
//
// For each request, prev = anchor; for slot s = 0 .. depth-1: e = W1[prev] (fp32), l = U_s + W2 e (fp32),
// pick = argmax l (ties to the lower id) or the keyed draw of l for a sampled request (draw_token at the drafted
// token's position p+s+1), c = sigmoid((w . [Hf_s ; e] + b) / T_s), chance = running product of c, prev = pick.
// A NaN/Inf in l or c, or a pick outside [0, V), fails that request with DraftNonfinite (no tokens come out).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/ops.h"
#include "compute/sampling.h"
#include "draft/drafter.h"
#include "draft/dspark/config.h"
#include "draft/dspark/weights.h"

namespace ls::dspark {

// Test-only planted faults, applied to the drafts of one stream (DrafterOptions::faults); never set by the CLI.
struct PlantedFaults {
  bool enabled = false;
  StreamId stream = 0;
  int nan_logit_slot = -1;          // writes NaN into one corrected logit of this slot
  int inf_confidence_slot = -1;     // makes this slot's confidence +Inf
  int out_of_range_pick_slot = -1;  // replaces this slot's pick with vocab_size
};

struct ScanRequest {
  StreamId stream = 0;
  int32_t anchor = 0;
  int64_t anchor_position = 0;
  int depth = 0;
  Sampling sampling;
  const float* final_hidden = nullptr;  // [block_size, d] Hf of this request's block
  const float* base_logits = nullptr;   // [block_size, V] U of this request's block (not modified)
};

// The greedy pick: the id of the first largest finite value (ties to the lower id; 0 when none is finite), and
// whether every value was finite. AVX-512 when present, else scalar; the same answer either way.
int32_t first_finite_argmax(std::span<const float> logits, bool& all_finite);

// Runs the scan for every request, one batched W2 product per slot. results[i] answers requests[i].
// `ops` is the caller's context; the scan itself always computes in fp32.
void markov_scan(const DsparkConfig& config, const DsparkWeights& weights, const compute::OpContext& ops,
                 std::span<const ScanRequest> requests, const PlantedFaults& faults, std::span<Draft> results);

}  // namespace ls::dspark
