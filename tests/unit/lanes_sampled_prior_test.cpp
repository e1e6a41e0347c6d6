// An unproven drafter's sampled rounds priced at the sampled prior (lanes15, PricingOptions::sampled_prior): a short
// seeded sampled stream whose prior cannot repay the scout does not explore (no taps, no pass) and costs what plain
// costs; a long one still explores (the measured-loss stop then judges it); greedy streams are untouched.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions sampled_prior(bool on) {
  LanesOptions options;
  if (on) options.pricing.sampled_prior.assign(options.pricing.depth_prior.size(), 0.5);
  return options;
}

TEST(LanesSampledPrior, AShortSampledStreamDoesNotExploreAndCostsWhatPlainCosts) {
  // The nano pair's seeded sampled windows on the H200 (~1 draft of 7 lands), 64 tokens: at the greedy prior the
  // scout explores and loses its prompt's absorb, new shapes and the rounds the loss stop needs.
  NanoLikeFakes pair;
  pair.weak_sampled_drafter();
  pair.target.sampled_row_ms = 0.01;
  const std::vector<Arrival> arrivals = pair.seeded_sampled_arrivals(1, 64);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, sampled_prior(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, sampled_prior(true));
  ASSERT_EQ(reply_tokens(old_rule), reply_tokens(plain));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(plain));
  EXPECT_GT(old_rule.drafter_passes, 0);
  EXPECT_EQ(new_rule.drafter_passes, 0);
  EXPECT_EQ(new_rule.stats.tap_rows, 0);
  EXPECT_LT(new_rule.ms, old_rule.ms);
  EXPECT_LT(new_rule.ms, 1.001 * plain.ms) << "plain " << plain.ms << ", old rule " << old_rule.ms;
}

TEST(LanesSampledPrior, ALongSampledStreamStillExploresAndGreedyStreamsAreUntouched) {
  {
    // 512 tokens: an always-right drafter's gain repays the scout fifteen times over, so it explores.
    NanoLikeFakes pair;
    pair.weak_sampled_drafter();
    const std::vector<Arrival> arrivals = pair.seeded_sampled_arrivals(1, 512);
    const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, sampled_prior(true));
    EXPECT_GT(new_rule.drafter_passes, 0);
  }
  for (int tokens : {48, 256}) {
    // Greedy, with the short sampled stream's costs (48 tokens: the greedy prior's gain repays the scout, a flat 0.5
    // would not): explored as before.
    NanoLikeFakes pair;
    pair.target.sampled_row_ms = 0.01;
    const std::vector<Arrival> arrivals = pair.arrivals(1, tokens);
    const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, sampled_prior(false));
    const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, sampled_prior(true));
    ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
    EXPECT_EQ(new_rule.drafter_passes, old_rule.drafter_passes) << tokens;
    EXPECT_NEAR(new_rule.ms, old_rule.ms, 1e-9 * old_rule.ms) << tokens;
    EXPECT_GT(new_rule.stats.drafts_accepted, tokens / 4) << tokens;
  }
  {
    NanoLikeFakes pair;
    pair.weak_sampled_drafter();
    const std::vector<Arrival> arrivals = pair.arrivals(1, 48);
    const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, sampled_prior(false));
    const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, sampled_prior(true));
    EXPECT_GT(old_rule.drafter_passes, 0);
    EXPECT_EQ(new_rule.drafter_passes, old_rule.drafter_passes) << "a weak drafter's greedy stream";
  }
}

TEST(LanesSampledPrior, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (bool sampled : {false, true}) {
    for (bool device : {false, true}) {
      const ExactnessRun run = run_exactness_case(sampled, device, sampled_any_streams(sampled_prior(true)));
      EXPECT_EQ(reply_tokens(run.drafted), run.alone) << "sampled " << sampled << " device " << device;
    }
  }
}

}  // namespace
}  // namespace ls
