// lanes_bench's A/B switches: the lanes' pricing rules by flag, so every arm of an A/B runs in one binary.
#pragma once

#include <string>

#include "lanes/lanes.h"

namespace ls::bench {

// Each field is "the library's default" until its flag is given (-1 / unset), so a run without flags prices exactly
// as the engine does.
struct LanesSwitches {
  bool device_taps = true;              // --taps host: no device taps (A/B of the absorb path)
  bool scout_prompt_only = true;        // --admit all: every prompt tapped while the drafter is unproven (before 6)
  double whole_context_share = -1;      // --admit whole[:SHARE]: ... only where the prior saves SHARE (lanes12)
  int whole_contexts_priced = -1;       // --admit priced (the default) | scout|all|whole: off (lanes15)
  int quiet_reprice_every = 0;          // --quiet-reprice N (0 = the default)
  double explore_repay = -1;            // --explore-gate X[,Y] (lanes11; 0 = off)
  double explore_repay_if_right = -1;
  int pass_after_forward = -1;          // --pass-timing alone|after-forward (lanes9)
  int sampled_most_streams = -1;        // --sampled-streams N (lanes12; 0 = any)
  int stop_on_measured_loss = -1;       // --loss-stop off|on (lanes14)
  int scout_gate_if_right = -1;         // --scout-gate prior|right (lanes15)
  double sampled_prior = -1;            // --sampled-prior X|off: a flat sampled prior X (lanes15; off = 0)
  int scout_probes = -1;                // --scout-probes N: streams probing beside the restarted scout (lanes19)
  int overhead_without_absorbs = -1;    // --overhead with-absorbs|without-absorbs (lanes19)
  int wake_needs_landed = -1;           // --wake-needs-landed on|off (lanes19)
  int scout_vote = -1;                  // --scout-vote on|off (lanes20)
  int scout_depth = -1;                 // --scout-depth N (lanes20; 0 = the cap)
  int alone_keeps_context = -1;         // --alone-whole on|off (cpu20)
  int calibration_mean_start = -1;      // --calibration-start mean|ema (cpu20)

  // Takes `flag value` when it is one of the switches (false: not a switch flag).
  bool parse(const std::string& flag, const std::string& value);
  // The lanes' options for one drafted (or plain) run under these switches.
  void apply(LanesOptions& options) const;
};

// The switch flags for a usage line.
const char* lanes_switches_usage();

}  // namespace ls::bench
