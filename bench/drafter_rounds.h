// drafter_bench --rounds: the drafter's side of a lanes round at few streams, timed piece by piece.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "draft/dspark/cuda/cuda_drafter.h"

namespace ls::bench {

struct RoundOptions {
  int rounds = 40;           // rounds per block (each block starts a fresh stream at `context` rows)
  int blocks = 3;            // blocks per setting, the settings interleaved block by block
  int context = 128;         // rows held before a block's first round
  int depth = 9;             // drafts asked per round
  int streams = 1;           // streams drafting together
  int tap_width = 0;         // taps x hidden: one tap row's values
  // Settings to compare, each "MB" (set_l2_prefetch in MiB) with ":head" for set_short_context_head(true),
  // ":s256" for set_head_stage_keys(256), ":split" for set_sampled_split(true), ":keyed" for set_keyed_scan(true),
  // ":staged" for set_draft_pick_staged(true), ":bc" for set_scan_broadcast(true), ":ch" for
  // set_scan_confidence_helpers(true), ":boN" for
  // set_scan_handoff_backoff(N) (default 100), ":partsN" for set_skinny_parts(N), ":g1" / ":g0" for
  // set_one_graph(true / false), ":rgN" for set_row_group(N), ":ap1" / ":ap0" for set_absorb_in_pass(true / false),
  // ":prof" for one eager profiled
  // pass after the last block (per launch label),
  // ":samp" / ":topp" / ":topk" / ":minp" / ":mix" for sampled requests (T 0.6 / T 0.8 with top-p 0.9 / T 0.7
  // with top-k 8 / T 0.9 with min-p 0.05 / lanes_bench's mix of those by stream), e.g. {"40:head:s256",
  // "40:head:s256:samp:split"}; other pins stay the drafter's own.
  std::vector<std::string> settings = {"0"};
};

// Runs blocks of rounds (absorb_device of the accepted rows' taps, then draft() at `depth`, as the lanes do) and
// prints per setting the medians of: the absorb call's host ms, the draft() wall, its block pass and scan device
// ms, and (every other round, with a settle() between them) the absorb's own wait. Results go to json["rounds"].
int run_drafter_rounds(dspark::cuda::CudaDsparkDrafter& drafter, const RoundOptions& options, nlohmann::json& json);

}  // namespace ls::bench
