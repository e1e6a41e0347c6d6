// The scout over a restarted context (lanes17, PricingOptions::scout_restarted): where whole contexts are not bought,
// the scout's probe measures what the group it would wake lands, not what a whole prompt's context does.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions scout_restarted(bool on) {
  LanesOptions options;
  options.pricing.scout_restarted = on;
  return options;
}

// The nano pair on the H200 at 8 / 16 streams, roughly: its verify past 32 rows (0.27 ms at 32, 0.6 at 128), whole
// contexts landing 88 % a draft and restarted ones 15 %, new shapes 0.25 ms dearer twice (gpu-check 44b48d1: the
// scout's proof woke a group that kept 5 of 32 / 6 of 102 drafts, 0.92x).
NanoLikeFakes h200_nano_pair() {
  NanoLikeFakes pair;
  pair.target.verify_wide_from = 32;
  pair.target.verify_wide_row_ms = 0.003;
  pair.target.new_shape_ms = 0.25;
  pair.drafter.wrong_rate = 0.12;
  return pair;
}

TEST(LanesScoutRestarted, EightAndSixteenNanoLikeStreamsLoseAtMostTwoPercentWhereTheWholeContextScoutLosesMore) {
  for (int streams : {8, 16}) {
    NanoLikeFakes pair = h200_nano_pair();
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), scout_restarted(false),
                                        scout_restarted(true));
    ASSERT_TRUE(arms.exact()) << streams;
    EXPECT_LE(arms.on.ms, 1.02 * arms.plain.ms) << streams << " streams: plain " << arms.plain.ms << " ms";
    EXPECT_LE(arms.on.ms, arms.off.ms) << streams << " streams: the whole-context scout " << arms.off.ms << " ms";
    // The scout's prompt is never tapped: at most a few rows of the rounds it probes in.
    EXPECT_LT(arms.on.stats.tap_rows, 64) << streams;
  }
  // At 8 streams the whole-context scout's proof wakes the restarted group (0.945x on these fakes).
  NanoLikeFakes pair = h200_nano_pair();
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), scout_restarted(false), scout_restarted(true));
  EXPECT_GE(arms.off.stats.drafter_restarts, 7);
  EXPECT_LT(arms.on.ms, 0.97 * arms.off.ms) << "whole-context scout " << arms.off.ms << " ms, plain " << arms.plain.ms;
}

TEST(LanesScoutRestarted, ADrafterThatLandsAsWellOverRestartedContextsStillWakesItsGroup) {
  // The synth 1.2B's drafter (synthetic acceptance) lands as well over either context: the restarted scout proves it
  // and the group drafts as with the whole-context scout.
  NanoLikeFakes pair = h200_nano_pair();
  pair.drafter.restarted_wrong_rate = -1;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), scout_restarted(false), scout_restarted(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GT(arms.on.stats.drafts_accepted, 100);
  EXPECT_GT(arms.on.stats.drafts_accepted, arms.off.stats.drafts_accepted * 3 / 4);
  EXPECT_LT(arms.on.ms, 1.02 * arms.off.ms) << "whole-context scout " << arms.off.ms << " ms";
  EXPECT_LT(arms.on.ms, arms.plain.ms) << "plain " << arms.plain.ms << " ms";
}

TEST(LanesScoutRestarted, OneStreamAndFourStreamsOfWholeContextsAreUntouched) {
  for (int streams : {1, 4}) {
    NanoLikeFakes pair = h200_nano_pair();
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), scout_restarted(false),
                                        scout_restarted(true));
    ASSERT_TRUE(arms.exact()) << streams;
    EXPECT_EQ(arms.on.stats.tap_rows, arms.off.stats.tap_rows) << streams;
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams;
    EXPECT_EQ(arms.on.stats.drafter_restarts, 0) << streams;
    EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-6 * arms.off.ms) << streams;
  }
}

TEST(LanesScoutRestarted, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (const std::string& inexact : inexact_cases(scout_restarted(true))) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
