// A depth's first outcomes learned fast (lanes13, PricingOptions::fast_first_outcomes): each stream's acceptance and
// the confidences' calibration weigh the n-th outcome at a depth 1/(n+2) until that falls to the moving average's
// rate; the pool keeps the moving average.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/chances.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

TEST(LanesFirstOutcomes, AFirstWindowThatLandsNothingHalvesTheFirstDepthInsteadOfTakingFifteenPercent) {
  AcceptanceByDepth slow;
  AcceptanceByDepth fast;
  slow.reset(default_depth_prior());
  fast.reset(default_depth_prior());
  slow.observe(7, 0, 0.15);
  fast.observe(7, 0, 0.15, /*fast_start=*/true);
  EXPECT_NEAR(slow.conditional(0), 0.85 - 0.15 * 0.85, 1e-12);
  EXPECT_NEAR(fast.conditional(0), 0.85 / 2, 1e-12);
  // Depths the window never reached keep what they held.
  EXPECT_EQ(fast.conditional(1), slow.conditional(1));
  // The second outcome weighs 1/3, ... the sixth 1/7 < 0.15: from there the moving average's rate.
  fast.observe(7, 1, 0.15, true);
  EXPECT_NEAR(fast.conditional(0), 0.425 + (1.0 - 0.425) / 3, 1e-12);
  EXPECT_NEAR(fast.conditional(1), 0.75 / 2, 1e-12);
  EXPECT_DOUBLE_EQ(outcome_rate(0.15, 0, true), 0.5);
  EXPECT_DOUBLE_EQ(outcome_rate(0.15, 4, true), 1.0 / 6);
  EXPECT_DOUBLE_EQ(outcome_rate(0.15, 5, true), 0.15);
  EXPECT_DOUBLE_EQ(outcome_rate(0.15, 0, false), 0.15);
}

TEST(LanesFirstOutcomes, TheCalibrationOfAnOverconfidentHeadFallsAfterItsFirstWindows) {
  ConfidenceCalibration slow;
  ConfidenceCalibration fast;
  const std::vector<float> raw = {0.9f, 0.81f, 0.73f};
  for (int window = 0; window < 3; ++window) {
    slow.observe(raw, 0, 0.15);
    fast.observe(raw, 0, 0.15, true);
  }
  EXPECT_LT(fast.scale(0), 0.5 * slow.scale(0));
  EXPECT_LT(fast.calibrate(raw)[0], slow.calibrate(raw)[0]);
}

LanesOptions first_outcomes(bool fast) {
  LanesOptions options;
  options.pricing.fast_first_outcomes = fast;
  return options;
}

TEST(LanesFirstOutcomes, AWeakSampledDrafterAtOneStreamStopsBeingBoughtAfterItsFirstWindows) {
  // One nano-like seeded sampled stream of 256 tokens whose drafts land 45 % a draft while the head says 70 % (the
  // nano pair's sampled windows on the H200 land ~0.8 of 7): at 0.15 the stream's acceptance and the calibration
  // kept it bought for 64 passes (68 of 444 drafts kept, slower than plain); learned fast, a few windows stop it.
  NanoLikeFakes pair;
  pair.weak_sampled_drafter();
  const std::vector<Arrival> arrivals = pair.seeded_sampled_arrivals(1, 256);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, first_outcomes(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, first_outcomes(true));
  ASSERT_EQ(reply_tokens(old_rule), reply_tokens(plain));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(plain));
  EXPECT_GT(old_rule.stats.drafter_passes, 30);
  EXPECT_LT(new_rule.stats.drafter_passes, 10);
  EXPECT_LT(new_rule.ms, old_rule.ms);
}

TEST(LanesFirstOutcomes, FourGreedyStreamsStopAfterWindowsThatLandNothing) {
  // Four nano-like greedy streams of 64 tokens: the scout's probe and the group rounds it buys land 31 of 266 at 0.15
  // (0.71x of plain on these fakes, 11 passes); each stream learning its own windows fast, 4 passes.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(4, 64);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, first_outcomes(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, first_outcomes(true));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_GT(old_rule.stats.drafter_passes, 5);
  EXPECT_LE(new_rule.stats.drafter_passes, 4);
  EXPECT_LT(new_rule.ms, 0.92 * old_rule.ms);
}

TEST(LanesFirstOutcomes, AConfidentDrafterAtOneStreamDraftsAsBefore) {
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(1, 256);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, first_outcomes(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, first_outcomes(true));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_GT(new_rule.stats.drafter_passes, 50);
  EXPECT_LE(new_rule.ms, 1.02 * old_rule.ms);
}

TEST(LanesFirstOutcomes, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (bool sampled : {false, true}) {
    for (bool device : {false, true}) {
      const ExactnessRun run = run_exactness_case(sampled, device, sampled_any_streams(first_outcomes(true)));
      EXPECT_EQ(reply_tokens(run.drafted), run.alone) << "sampled " << sampled << " device " << device;
      EXPECT_GT(run.drafted.stats.drafts_verified, 0) << "sampled " << sampled << " device " << device;
    }
  }
}

}  // namespace
}  // namespace ls
