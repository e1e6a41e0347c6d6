// The restarted group at 8 / 16 streams (lanes19): what woke it on the H200 (batch b1's trace, nano 16 streams) and
// what it costs on the fakes with b1's load-time tables (h200_nano_pair_b1). Three rules:
// - PricingOptions::overhead_without_absorbs: the device absorb after a commit is not host overhead (off since H200
//   batch b3: it lost the nano pair's 4 whole-context streams);
// - PricingOptions::wake_needs_landed (an A/B, off): no dormant stream woken while every verified window kept nothing;
// - PricingOptions::scout_probes (an A/B, 1 by default): streams probing beside the restarted scout.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions overhead_rule(bool without_absorbs) {
  LanesOptions options;
  options.pricing.overhead_without_absorbs = without_absorbs;
  return options;
}

LanesOptions wake_rule(bool needs_landed) {
  LanesOptions options;
  options.pricing.wake_needs_landed = needs_landed;
  return options;
}

LanesOptions probes(int streams) {
  LanesOptions options;
  options.pricing.scout_probes = streams;
  return options;
}

// The host overhead pricing learned over a run (the fakes' clock moves only in forwards and drafter calls, so a
// round's host work is 0 there: LanesCosts.OnTheFakesARoundsTimeIsItsForwardsPlusItsDrafterCallsAndNothingElse).
double learned_overhead_ms(NanoLikeFakes& pair, int streams, const LanesOptions& options) {
  double overhead_ms = -1;
  run_fakes(pair.clock, pair.target, pair.drafter, pair.arrivals(streams, 256), options,
            [&](const Lanes& lanes) { overhead_ms = lanes.pricing().overhead_ms(); });
  return overhead_ms;
}

TEST(LanesOverheadWithoutAbsorbs, TheDeviceAbsorbAfterACommitIsNotLearnedAsHostWork) {
  // 1 and 4 streams (an absorb after every drafting round's commit; at 8 streams the old overhead rose with the
  // restarted group's absorbs and decayed over the plain rounds after them).
  for (int streams : {1, 4}) {
    NanoLikeFakes pair = h200_nano_pair_b1();
    EXPECT_LT(learned_overhead_ms(pair, streams, overhead_rule(true)), 1e-9) << streams;
    NanoLikeFakes old = h200_nano_pair_b1();
    const double old_ms = learned_overhead_ms(old, streams, overhead_rule(false));
    EXPECT_GT(old_ms, 0.01) << streams;
  }
}

TEST(LanesOverheadWithoutAbsorbs, ADrafterRightForOneStreamOfEightCostsAFewPassesNotFortyTwo) {
  // The scout's stream drafts right whatever its context; the others land 15 % over restarted contexts. With the
  // absorbs (0.15 ms a call) learned as host work, plain's round looked 0.35 ms instead of 0.19 and the allocator
  // bought the scout's stream alone a pass a round (0.71x of plain, 42 passes).
  NanoLikeFakes pair = h200_nano_pair_b1();
  pair.drafter.right_streams = {1};
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), overhead_rule(false), overhead_rule(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GT(arms.off.drafter_passes, 30);
  EXPECT_GT(arms.off.ms, 1.3 * arms.plain.ms);
  EXPECT_LE(arms.on.drafter_passes, 6);
  EXPECT_LE(arms.on.ms, 1.1 * arms.plain.ms) << "plain " << arms.plain.ms << " ms, old " << arms.off.ms << " ms";
}

TEST(LanesOverheadWithoutAbsorbs, ALuckyFirstRestartedWindowCostsTheGroupFewerPasses) {
  // The scout's restarted probe lands whole (7 of 7), the group wakes over restarted contexts and lands 15 %: the
  // old overhead kept buying it (5 passes, 0.903x of plain), the new one stops after one group pass (3, 0.942x).
  NanoLikeFakes pair = h200_nano_pair_b1();
  pair.drafter.lucky_restarted_passes = 1;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), overhead_rule(false), overhead_rule(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GE(arms.on.stats.drafts_accepted, 7);  // the lucky window
  EXPECT_LT(arms.on.drafter_passes, arms.off.drafter_passes);
  EXPECT_LE(arms.on.drafter_passes, 3);
  EXPECT_LT(arms.on.ms, 0.97 * arms.off.ms) << "old " << arms.off.ms << " ms, plain " << arms.plain.ms << " ms";
}

TEST(LanesOverheadWithoutAbsorbs, OneAndFourStreamsDecideAsBefore) {
  // (Their absorbs never swung a decision on these fakes: the same passes, drafts and clock.)
  for (int streams : {1, 4}) {
    NanoLikeFakes pair = h200_nano_pair_b1();
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), overhead_rule(false), overhead_rule(true));
    ASSERT_TRUE(arms.exact()) << streams;
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams;
    EXPECT_EQ(arms.on.stats.drafts_accepted, arms.off.stats.drafts_accepted) << streams;
    EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-9 * arms.off.ms) << streams;
    EXPECT_LT(arms.on.ms, 0.8 * arms.plain.ms) << streams;
  }
}

TEST(LanesWakeNeedsLanded, AScoutProbeThatKeptNothingWakesNoStream) {
  // b1's default at 8 streams: the scout's restarted probe kept 0 of 7, yet the every-8th reprice woke all 8 at the
  // pool's 0.75 / 0.66 / 0.58 ... (the prior moved once, deeper depths at the calibrated confidences): 8 restarts, 3
  // rounds of taps and absorbs for the whole group.
  NanoLikeFakes pair = h200_nano_pair_b1();
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), wake_rule(false), wake_rule(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GE(arms.off.stats.drafter_restarts, 8);
  EXPECT_LE(arms.on.stats.drafter_restarts, 2);
  EXPECT_LE(arms.on.stats.tap_rows, 4);
  EXPECT_LT(arms.on.ms, arms.off.ms);
  EXPECT_LE(arms.on.ms, 1.025 * arms.plain.ms) << "plain " << arms.plain.ms << " ms, old " << arms.off.ms << " ms";
}

TEST(LanesWakeNeedsLanded, ADrafterThatLandsOverRestartedContextsStillWakesItsGroup) {
  // The synth 1.2B's case (restarted contexts land as whole ones) at 8 streams: the scout's first window here kept
  // nothing, so the group waits for a window that lands, then drafts (1.112x of plain against 1.158x: what the wait
  // costs a drafter that pays).
  NanoLikeFakes pair = h200_nano_pair();
  pair.drafter.restarted_wrong_rate = -1;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), wake_rule(false), wake_rule(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GT(arms.on.stats.drafts_accepted, 1000);
  EXPECT_LE(arms.on.ms, 1.05 * arms.off.ms) << "old " << arms.off.ms << " ms";
  EXPECT_LT(arms.on.ms, 0.92 * arms.plain.ms) << "plain " << arms.plain.ms << " ms";
}

TEST(LanesScoutProbes, FourStreamsProbeInTheScoutsPassAndTapOnlyThatRound) {
  // 16 nano-like streams (restarted contexts land 15 %): four streams tap one row each and probe in one pass.
  NanoLikeFakes pair = h200_nano_pair();
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(16, 256), probes(1), probes(4));
  ASSERT_TRUE(arms.exact());
  EXPECT_EQ(arms.off.stats.tap_rows, 1);
  EXPECT_EQ(arms.on.stats.tap_rows, 4);
  EXPECT_EQ(arms.on.drafter_passes, 1);
  EXPECT_EQ(arms.on.stats.drafter_restarts, 4);
  EXPECT_EQ(arms.on.stats.windows_with_drafts, 4);
}

TEST(LanesScoutProbes, ADrafterRightForTheScoutAloneDoesNotWakeSixteenStreams) {
  // Its window lands; three restarted windows beside it do not, and the pool does not buy the group.
  NanoLikeFakes pair = h200_nano_pair_b1();
  pair.drafter.right_streams = {1};
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(16, 256), probes(1), probes(4));
  ASSERT_TRUE(arms.exact());
  EXPECT_GE(arms.off.stats.drafter_restarts, 16);
  EXPECT_LE(arms.on.stats.drafter_restarts, 4);
  EXPECT_LT(arms.on.ms, arms.off.ms);
}

TEST(LanesScoutProbes, OneStreamAndWholeContextsAreUntouched) {
  for (int streams : {1, 4}) {
    NanoLikeFakes pair = h200_nano_pair();
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), probes(1), probes(4));
    ASSERT_TRUE(arms.exact()) << streams;
    EXPECT_EQ(arms.on.stats.tap_rows, arms.off.stats.tap_rows) << streams;
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams;
    EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-9 * arms.off.ms) << streams;
  }
}

TEST(LanesRestartedWake, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (const std::string& inexact : inexact_cases(LanesOptions{})) ADD_FAILURE() << "defaults: " << inexact;
  for (const std::string& inexact : inexact_cases(probes(4))) ADD_FAILURE() << "four probes: " << inexact;
  LanesOptions old = overhead_rule(false);
  old.pricing.wake_needs_landed = false;
  for (const std::string& inexact : inexact_cases(old)) ADD_FAILURE() << "old rules: " << inexact;
}

}  // namespace
}  // namespace ls
