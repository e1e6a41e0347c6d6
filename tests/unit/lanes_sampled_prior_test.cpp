// An unproven drafter's sampled rounds priced at the sampled prior (lanes15, PricingOptions::sampled_prior): a short
// seeded sampled stream whose prior cannot repay the scout does not explore (no taps, no pass) and costs what plain
// costs; a long one still explores (the measured-loss stop then judges it); greedy streams are untouched.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions sampled_prior(bool on) {
  LanesOptions options;
  options.pricing.sampled_prior.assign(on ? options.pricing.depth_prior.size() : 0, 0.5);
  return options;
}

TEST(LanesSampledPrior, AShortSampledStreamDoesNotExploreAndCostsWhatPlainCosts) {
  // The nano pair's seeded sampled windows on the H200 (~1 draft of 7 lands), 64 tokens: at the greedy prior the
  // scout explores and loses its prompt's absorb, new shapes and the rounds the loss stop needs.
  NanoLikeFakes pair;
  pair.weak_sampled_drafter();
  pair.target.sampled_row_ms = 0.01;
  const RuleArms arms =
      run_rule_arms(pair, pair.seeded_sampled_arrivals(1, 64), sampled_prior(false), sampled_prior(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GT(arms.off.drafter_passes, 0);
  EXPECT_EQ(arms.on.drafter_passes, 0);
  EXPECT_EQ(arms.on.stats.tap_rows, 0);
  EXPECT_LT(arms.on.ms, arms.off.ms);
  EXPECT_LT(arms.on.ms, 1.001 * arms.plain.ms) << "plain " << arms.plain.ms << ", old rule " << arms.off.ms;
}

TEST(LanesSampledPrior, ALongSampledStreamStillExploresAndGreedyStreamsAreUntouched) {
  {
    // 512 tokens: an always-right drafter's gain repays the scout fifteen times over, so it explores.
    NanoLikeFakes pair;
    pair.weak_sampled_drafter();
    const FakeRun on =
        run_fakes(pair.clock, pair.target, pair.drafter, pair.seeded_sampled_arrivals(1, 512), sampled_prior(true));
    EXPECT_GT(on.drafter_passes, 0);
  }
  for (bool weak : {false, true}) {
    // Greedy with the short sampled stream's costs, 48 tokens: the greedy prior's gain repays the scout, a flat 0.5
    // would not; explored as before.
    for (int tokens : {48, 256}) {
      NanoLikeFakes pair;
      if (weak) pair.weak_sampled_drafter();
      pair.target.sampled_row_ms = 0.01;
      const RuleArms arms = run_rule_arms(pair, pair.arrivals(1, tokens), sampled_prior(false), sampled_prior(true));
      ASSERT_TRUE(arms.exact());
      EXPECT_GT(arms.off.drafter_passes, 0) << "weak " << weak << ", " << tokens << " tokens";
      EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << "weak " << weak << ", " << tokens << " tokens";
      EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-9 * arms.off.ms) << "weak " << weak << ", " << tokens << " tokens";
    }
  }
}

TEST(LanesSampledPrior, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (const std::string& inexact : inexact_cases(sampled_prior(true))) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
