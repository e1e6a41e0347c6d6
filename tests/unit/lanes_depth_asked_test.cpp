// The eighth session's pricing rules on fakes (lanes9): the depth a drafting stream asks priced with the pass table's
// depth axis, and probes that pay their way. Each runs the old rule against the new on one cost model.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

// A run, and the verify outcomes pricing pooled at the sixth draft.
struct PricedRun : FakeRun {
  int deep_outcomes = 0;
};

PricedRun run_lanes(FixedClock& clock, const FakeTargetOptions& target_options,
                    const std::optional<FakeDrafterOptions>& drafter_options, const std::vector<Arrival>& arrivals,
                    const LanesOptions& options) {
  PricedRun run;
  static_cast<FakeRun&>(run) = run_fakes(clock, target_options, drafter_options, arrivals, options, [&](const Lanes& lanes) {
    run.deep_outcomes = lanes.pricing().pooled_acceptance().observations(5);
  });
  return run;
}

LanesOptions depth_rule(bool priced, int full_depth_every = 4) {
  LanesOptions options;
  options.pricing.price_depth_asked = priced;
  options.pricing.full_depth_every = full_depth_every;
  return options;
}

std::string by_depth(const PricedRun& run) {
  std::string text;
  for (const auto& [depth, passes] : run.passes_by_depth) {
    text += std::to_string(depth) + ":" + std::to_string(passes) + " ";
  }
  return text;
}

TEST(LanesDepthAsked, WhereADeepPassCostsMoreOneStreamAsksTheDepthItBuysAndBeatsAskingTheWholeBlock) {
  // One stream; a verify 10 ms + 0.5 ms a row; a pass 2 ms + 3 ms a draft row (the CPU pass's head and scan run
  // only for the slots asked); a drafter right 75% of the time, and saying so. Asked its whole 6 deep, a pass costs
  // 20 ms and a drafting round gains little over plain's 10.5 ms a token; asked 2-3 deep it costs 8-11 ms.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.25, 3.0);
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(1, target.shape.vocab_size, 300);
  PricedRun plain = run_lanes(clock, target, std::nullopt, arrivals, LanesOptions{});
  PricedRun whole = run_lanes(clock, target, drafter, arrivals, depth_rule(false));
  PricedRun priced = run_lanes(clock, target, drafter, arrivals, depth_rule(true));
  ASSERT_EQ(reply_tokens(whole), reply_tokens(plain));
  ASSERT_EQ(reply_tokens(priced), reply_tokens(plain));
  EXPECT_LT(priced.ms, plain.ms * 0.9) << "plain " << plain.ms << " ms, priced depth " << priced.ms << " ms";
  EXPECT_LT(priced.ms, whole.ms * 0.95) << "whole block " << whole.ms << " ms (passes by depth " << by_depth(whole)
                                       << "), priced depth " << priced.ms << " ms (" << by_depth(priced) << ")";
  int64_t shallow = 0;
  for (const auto& [depth, passes] : priced.passes_by_depth) shallow += depth <= 4 ? passes : 0;
  EXPECT_GT(shallow * 2, priced.drafter_passes) << by_depth(priced);
}

TEST(LanesDepthAsked, WithTheDepthAskedPricedEveryFourthDraftingDecisionStillAsksTheWholeCap) {
  // One stream; a verify 10 ms + 0.5 ms a row; a pass 2 ms + 1 ms a draft row; right 80% of the time. The bought
  // depth is shallower than the cap, so without the periodic whole-cap ask (full_depth_every 0, a planted fault)
  // the sixth draft is never verified after the scout's probe and its acceptance never measured again.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.2, 1.0);
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(1, target.shape.vocab_size, 400);
  PricedRun every_fourth = run_lanes(clock, target, drafter, arrivals, depth_rule(true, 4));
  PricedRun never = run_lanes(clock, target, drafter, arrivals, depth_rule(true, 0));
  ASSERT_EQ(reply_tokens(every_fourth), reply_tokens(never));
  const int64_t full_every_fourth = every_fourth.passes_by_depth[drafter.max_depth];
  const int64_t full_never = never.passes_by_depth[drafter.max_depth];
  EXPECT_GE(full_every_fourth * 5, every_fourth.drafter_passes) << by_depth(every_fourth);
  EXPECT_LE(full_never * 20, never.drafter_passes) << by_depth(never);
  EXPECT_GT(every_fourth.deep_outcomes, never.deep_outcomes + 5)
      << "outcomes at the sixth draft: every fourth " << every_fourth.deep_outcomes << ", never "
      << never.deep_outcomes;
}

LanesOptions probe_rule() {
  LanesOptions options;
  options.pricing.explore_repay = 0;  // the probe rules under test, not lanes11's exploration gate
  return options;
}

TEST(LanesProbeValue, WhereNeitherAProbeNorTheGroupAtThePriorCanPayOnlyTheScoutProbes) {
  // Four streams, a launch-bound verify (10 ms + 0.05 ms a row: the nano target on the H200 in miniature), a pass
  // 25 ms + 0.2 ms a draft row, a drafter right 50% of the time and 15% after a restart. If every draft landed, four
  // streams drafting 6 deep would pay (28 tokens in 41 ms against plain's 4 in 10.2); at the prior's chances they
  // would not (14 in 41), and one probe window wins at most 6 x 2.55 ms against its 26.2 ms pass. The scout still
  // probes once (before any draft there are no confidences to judge a group by: it keeps the always-right test).
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.05);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.5, 0.2);
  drafter.draft_fixed_ms = 25.0;
  drafter.restarted_wrong_rate = 0.85;
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(4, target.shape.vocab_size, 120);
  PricedRun plain = run_lanes(clock, target, std::nullopt, arrivals, LanesOptions{});
  PricedRun new_run = run_lanes(clock, target, drafter, arrivals, probe_rule());
  ASSERT_EQ(reply_tokens(new_run), reply_tokens(plain));
  // (Probes priced on the tables alone, lanes_bench --probe-value off before lanes17, ran more than 1 % slower here.)
  EXPECT_LE(new_run.drafter_passes, 1);
  EXPECT_LT(new_run.ms, plain.ms * 1.025) << "plain " << plain.ms << " ms, probes that pay " << new_run.ms << " ms";
}

TEST(LanesProbeValue, ProbesThatPayTheirWayStillFindAndBuyADrafterThatPaysAtOneStream) {
  // One stream, a verify 10 ms + 0.5 ms a row, a pass 2 ms + 0.2 ms a draft row, right 80% of the time.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.2);
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(1, target.shape.vocab_size, 300);
  PricedRun plain = run_lanes(clock, target, std::nullopt, arrivals, LanesOptions{});
  PricedRun new_run = run_lanes(clock, target, drafter, arrivals, probe_rule());
  ASSERT_EQ(reply_tokens(new_run), reply_tokens(plain));
  EXPECT_GT(new_run.stats.windows_with_drafts, 50);
  EXPECT_LT(new_run.ms, plain.ms * 0.7) << "plain " << plain.ms << " ms, probes that pay " << new_run.ms << " ms";
}

TEST(LanesProbeValue, AStreamsOwnProbePaysOnlyWhereItsWindowCanWinItsPassItsRowsAndTheMeanOneOff) {
  // The arithmetic of Pricing::probe_pays on fixed tables: 4 pending rows at 10 ms (2.5 ms a token), a 6-draft
  // probe wins at most 15 ms; its pass costs 2 + 0.2 x 6 = 3.2 ms and its 6 rows 3 ms.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.2);
  drafter_options.confidences = true;
  FakeTarget fake_target(target);
  FakeDrafter drafter(drafter_options);
  auto lanes = Lanes::create(fake_target, &drafter, probe_rule(), clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  Pricing pricing = (*lanes)->pricing();
  Stream stream;
  const int rows = 4;
  EXPECT_TRUE(pricing.probe_pays(stream, 6, rows));
  const double plain_token_ms = pricing.tables().verify.ms(rows) / rows + pricing.overhead_ms() / rows;
  const VerifyCosts& verify = pricing.tables().verify;
  const double cost_ms =
      pricing.draft_ms(1, 6) + verify.ms(rows + 6) - verify.ms(rows) + pricing.tables().absorb_ms(1);
  const double margin_ms = 6 * plain_token_ms - cost_ms;
  ASSERT_GT(margin_ms, 1.0);
  // A slow forward's excess (a new shape's one-off) above the margin makes the same probe not pay.
  pricing.observe_slow_forward(margin_ms + 0.5);
  EXPECT_NEAR(pricing.one_off_ms(), margin_ms + 0.5, 1e-9);
  EXPECT_FALSE(pricing.probe_pays(stream, 6, rows));
  EXPECT_FALSE(pricing.probe_pays(stream, 0, rows));
}

}  // namespace
}  // namespace ls
