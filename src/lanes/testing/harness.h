// Test and benchmark helpers for the lanes on fakes: staggered arrivals, cancellations, and the plain-alone oracle.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"

namespace ls {

struct Arrival {
  int round = 0;             // submitted just before this round
  Request request;
  int cancel_round = -1;     // cancelled just before this round (>= 0)
};

struct Reply {
  StreamId stream = 0;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::None;
  std::string error;
  StreamStats stats;
  std::vector<int> rounds_with_tokens;  // rounds in which the stream received tokens
};

// Runs rounds until every arrival was submitted and the lanes are idle; replies in arrival order.
Result<std::vector<Reply>> run_arrivals(Lanes& lanes, const std::vector<Arrival>& arrivals, int max_rounds = 200000);

// The oracle: each request run alone, on a fresh fake target, without a drafter.
std::vector<Reply> run_each_alone_plain(const FakeTargetOptions& target_options, const std::vector<Arrival>& arrivals);

// The oracle on a shared target: each request alone through fresh plain lanes (streams are independent).
std::vector<Reply> run_each_alone_plain(Target& target, const std::vector<Arrival>& arrivals);

// A varied request: prompt of 2-9 tokens, 20-60 tokens out, greedy or sampled (temperature, top-k/p, min-p mixed).
Request make_fake_request(int index, bool sampled, int vocab_size);
// `streams` fake requests arriving over rounds 0..2 (index % 3), max_tokens = tokens + index % 9, every fourth
// with draft: false: the mix every exactness test runs.
std::vector<Arrival> staggered_arrivals(int streams, bool sampled, int vocab_size, int tokens);
// `streams` fake requests all at round 0 that stop only at max_tokens (no eos ids): long runs for cost and pricing
// tests. `sampled(index)` picks the sampled ones (none when empty).
std::vector<Arrival> endless_arrivals(int streams, int vocab_size, int max_tokens,
                                      const std::function<bool(int)>& sampled = {});

// A fake target on `clock` whose verify costs `fixed_ms` + `row_ms` a row (exact up to 8 rows a window).
FakeTargetOptions costed_fake_target(FixedClock& clock, double fixed_ms, double row_ms, int max_rows = 64);

// A fake drafter on `clock`, up to 6 deep, wrong at `wrong_rate`, whose pass costs 2 ms + `row_ms` a draft row.
FakeDrafterOptions costed_fake_drafter(FixedClock& clock, double wrong_rate, double row_ms = 0.2);

// One run of the lanes over fakes on `clock`, counted from after Lanes::create (its load-time timing passes and
// windows left out): what pricing tests compare between an old and a new rule.
struct FakeRun {
  double ms = 0;  // fixed-clock time to the end of the run
  LanesStats stats;
  std::vector<Reply> replies;
  int64_t tokens = 0;  // over every reply
  int64_t drafter_passes = 0;
  std::map<int, int64_t> passes_by_depth;
  std::map<int, int64_t> windows_by_drawn_rows;
};

// Runs `arrivals` on a fresh fake target (and drafter, if given); `after` sees the lanes before they go.
FakeRun run_fakes(FixedClock& clock, const FakeTargetOptions& target_options,
                  const std::optional<FakeDrafterOptions>& drafter_options, const std::vector<Arrival>& arrivals,
                  const LanesOptions& options = {}, const std::function<void(const Lanes&)>& after = {});

// Each reply's tokens, in arrival order.
std::vector<std::vector<int32_t>> reply_tokens(const FakeRun& run);

// The nano pair on the H200, roughly: a launch-bound verify (0.19 ms + 1 us a row, new shapes 0.3 ms dearer twice),
// a pass 0.14 ms + 4 us a draft row, drafts right 75% (15% after a restart), device taps, 64-token prompts.
struct NanoLikeFakes {
  FixedClock clock;
  FakeTargetOptions target;
  FakeDrafterOptions drafter;
  NanoLikeFakes();
  // `streams` endless requests of `tokens` tokens with 64-token prompts.
  std::vector<Arrival> arrivals(int streams, int tokens) const;
  // The nano pair's seeded sampled windows on the H200, roughly (~0.8 of 7 land): drafts right 45 % while the head
  // says 70 %, sampled passes 1.1x; the same arrivals seeded and sampled at temperature 0.8.
  void weak_sampled_drafter();
  std::vector<Arrival> seeded_sampled_arrivals(int streams, int tokens) const;
};

// The nano pair on the H200 at 8 / 16 streams, roughly: its verify past 32 rows (0.27 ms at 32, 0.6 at 128), whole
// contexts landing 88 % a draft and restarted ones 15 %, new shapes 0.25 ms dearer twice (gpu-check 44b48d1: the
// whole-context scout's proof woke a group that kept 5 of 32 / 6 of 102 drafts, 0.92x).
NanoLikeFakes h200_nano_pair();

// The nano pair as the H200's load-time tables had it in batch b1 (lanes19, main fa85f47): verify 0.17 ms + 3 us a
// row to 32 rows, 7 us a row past them (0.27 ms at 32, 0.49 at 64; b1: 0.269 / 0.448), a pass 0.2 ms + 0.6 us a draft
// row (0.204 at 1 stream, 0.234 at 8 x 7; b1: 0.137-0.249), a device absorb call 0.15 ms (b1: 0.14-0.18), drafts over
// whole contexts right 88 % and over restarted ones 15 %. Its 8 streams of 256 tokens ran as b1's default did on the
// H200 before lanes19 (0.948x against 0.934-0.954x: the scout's restarted probe, then the group woken over restarted
// contexts, 3 passes, 9 restarts).
NanoLikeFakes h200_nano_pair_b1();

// The nano pair on the Xeon's two cores (AVX-512, int8 drafter), roughly as batch b6's load-time tables had it
// (cpu19, main 1a0b482): a target on a CPU pool (no graphs, host taps) whose verify is 0.566 ms + 0.063 a row to 2
// rows and 0.213 a row past them (b6: 1 / 2 / 4 / 8 rows 0.629 / 0.692 / 1.096 / 1.995), a full-width pass 0.4 ms
// + 0.015 a draft row (b6: 0.402 / 0.503 at depth 1 / 7), a host absorb 0.106 ms a call + 0.00514 a row, drafts
// right 82 % a depth over whole contexts (the pair's code prompts: 0.84 / 0.71 / 0.58 cumulative) and 65 % over
// restarted ones; arrivals with 192-token prompts (lanes_bench's).
NanoLikeFakes xeon_nano_pair();
std::vector<Arrival> long_prompt_arrivals(const NanoLikeFakes& pair, int streams, int tokens, int prompt_tokens = 192);

// The pricing rules' exactness case: 16 staggered streams (every fourth draft: false) of greedy or sampled requests
// on a costed fake target (10 ms + 0.5 ms a row) and a fake drafter 20 % wrong (60 % on restarted contexts) with
// confidences and host or device taps, its sampled passes `sampled_pass_factor` times dearer: the run under
// `options`, and each request's tokens run alone without a drafter.
struct ExactnessRun {
  FakeRun drafted;
  std::vector<std::vector<int32_t>> alone;
};
// Lanes options that buy sampled passes at any stream count (PricingOptions::sampled_most_streams = 0; the default
// drafts sampled requests only in 1-stream rounds): the tests of sampled drafting among several streams.
inline LanesOptions sampled_any_streams(LanesOptions options = {}) {
  options.pricing.sampled_most_streams = 0;
  return options;
}

ExactnessRun run_exactness_case(bool sampled, bool device_taps, const LanesOptions& options,
                                double sampled_pass_factor = 1.0);
// run_exactness_case for greedy and sampled requests with host and device taps, sampled passes bought at any width
// and the exploration gate open:
// the cases whose replies differ from their requests run alone plain, or that verified no draft (empty: all exact).
std::vector<std::string> inexact_cases(LanesOptions options);

// A pricing rule's A/B on fakes: plain, then the rule off and on, over the same arrivals (one fixed clock).
struct RuleArms {
  FakeRun plain;
  FakeRun off;
  FakeRun on;
  // Both drafted runs' replies equal plain's (a rule moves speed, never tokens).
  bool exact() const;
};
RuleArms run_rule_arms(FixedClock& clock, const FakeTargetOptions& target, const FakeDrafterOptions& drafter,
                       const std::vector<Arrival>& arrivals, const LanesOptions& off, const LanesOptions& on);
template <class Fakes>
RuleArms run_rule_arms(Fakes& fakes, const std::vector<Arrival>& arrivals, const LanesOptions& off,
                       const LanesOptions& on) {
  return run_rule_arms(fakes.clock, fakes.target, fakes.drafter, arrivals, off, on);
}

}  // namespace ls
