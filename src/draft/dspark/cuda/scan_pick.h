// The Markov scan's keyed pick variants (scan_pick.cuh, scan_verified.cuh) as host code sees them: the variant
// switch (LS_DRAFT_PICK) and a test hook that draws rows with a chosen variant and CTA size.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/status.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

// How a sampled scan step draws its pick (all are compute::draw_token on the corrected logits):
// Radix (sessions 3-8): top-k and top-p cuts by 8-bit radix descents with a double exp per id per pass, then the
//   Gumbel noise of every survivor (its top-p masses are summed in atomic order).
// Verified (session 9): the pruned Gumbel max first, then only whether the winner survives top-p, decided by
//   float weights summed in double with an error bound, the one-by-one sums where the bound cannot decide; a cut
//   winner excludes every key at or below it and the max is taken again.
// VerifiedBandPlantedZero: Verified with the bound band zero (the tree sums decide alone; tests must catch it).
// VerifiedFallbackForced: Verified deciding every top-p check by the one-by-one sums.
enum class DraftPickMode : int { Radix = 0, Verified = 1, VerifiedBandPlantedZero = 2, VerifiedFallbackForced = 3 };

// The variant the scan's launches take: LS_DRAFT_PICK ("radix" or "verified"; unset or unknown = the default) read
// once, or set_draft_pick_mode; the planted faults (tests only) only through the setter. Drop captured graphs
// after a change.
DraftPickMode draft_pick_mode();
void set_draft_pick_mode(DraftPickMode mode);
const char* draft_pick_name(DraftPickMode mode);
// LS_DRAFT_PICK's reading of `value`: "radix" or "verified"; anything else (null, a planted fault's name) the default.
DraftPickMode draft_pick_mode_named(const char* value);
// Whether markov_pick_split's chunk launch also takes the verified pick's first round (the Gumbel max, the
// normaliser relative to the chunk's max) over each (vocab chunk, request), so the per-request CTA only rescales,
// adds and checks the winner (rows without top-k): LS_DRAFT_PICK_SPREAD ("1" on, the default; "0" off) read once,
// or set_draft_pick_spread.
bool draft_pick_spread();
void set_draft_pick_spread(bool on);
// Whether markov_pick_split's finish kernel stages the spread first rounds' terms in parallel before one thread adds
// them in chunk order (session 11, the same bits): LS_DRAFT_PICK_STAGED ("1" on, the default since batch s11B;
// "0" off) read once, or set_draft_pick_staged.
bool draft_pick_staged();
// `planted_skip_last` (tests only): the staged adds leave the last chunk out.
void set_draft_pick_staged(bool on, bool planted_skip_last = false);
bool draft_pick_staged_planted();

// Test hook: draw_rows_on_device with the variant `mode` in CTAs of `threads` (256: the fused step's CTA; 1024: the
// pick kernels'), for comparing each with draw_token bit for bit.
Status draw_rows_with(const float* logits, int rows, int64_t vocab, const DeviceScanRequest* samplings,
                      const int64_t* positions, int32_t* picks, DraftPickMode mode, int threads,
                      cudaStream_t stream);

}  // namespace ls::dspark::cuda
