// Load-time timing of the target's verify forward by total rows and the drafter's pass by (streams, depth).
// Timings steer how many rows are bought, never which tokens come out.
#pragma once

#include <cstdint>

#include "base/clock.h"
#include "base/status.h"
#include "draft/drafter.h"
#include "lanes/cost_tables.h"
#include "model/target.h"

namespace ls {

struct CalibrationOptions {
  int max_rows = 64;         // verify table covers 1 .. max_rows total rows
  int width = 1;             // widest window per stream (scratch windows are split to it)
  int max_streams = 16;      // draft table covers 1 .. max_streams streams
  int max_depth = 1;         // draft table covers depth 1 .. max_depth
  int repeats = 3;           // timed runs per entry after one untimed; the fastest counts
  int context_tokens = 8;    // prompt length of each scratch stream the drafter is timed on
  int long_context_tokens = 128;  // rows of the one long absorb timed (a catch-up), at most max_rows
  StreamId scratch_base = StreamId{1} << 62;  // scratch stream ids, far from request ids
  // Each timed pass right after a target forward of one row per request (as in a round, where the verify has just
  // streamed the target's weights through the caches): on the 2-core CPU the nano pass ran ~2x its load-time
  // entry in rounds. false: passes back to back (lanes_bench --pass-timing alone).
  bool pass_after_forward = false;
  // Also time passes of sampled requests (temperature 0.8, every second one with top-p 0.9 too) at every timed
  // stream count at the deepest depth; the sampled table is the greedy one scaled by their ratio per stream count
  // (Pricing::mode_of prices sampled passes from it).
  bool sampled_passes = true;
};

// Times forwards at a few row counts and drafter passes on a (streams, depth) grid, on scratch streams that are
// released afterwards.
Result<CostTables> time_costs(Target& target, Drafter* drafter, const Clock& clock, const CalibrationOptions& options);

}  // namespace ls
