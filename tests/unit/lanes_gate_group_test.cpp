// The gate's one-off with the group's new shapes (lanes14, PricingOptions::gate_prices_group): before the drafter is
// proven at several streams on a target with graphs, exploring also costs the shapes the scout's proof brings (the
// woken streams' tap round, the group's first verify and pass, each run eagerly and captured). The rule only decides
// whether the scout explores; the rounds it leads to are the ones the other tests check bitwise (the replies here too).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions gate_group(bool on) {
  LanesOptions options;
  options.pricing.gate_prices_group = on;
  return options;
}

TEST(LanesGateGroup, EightAndSixteenNanoLikeStreamsOfLongRepliesDoNotExploreAndCostWhatPlainCosts) {
  // 256 tokens: the prior's round saves a few per cent of a 0.2 ms round over the run, more than three times the
  // scout's own one-off, not three times the group's shapes too; exploring cost the fakes more than it won.
  for (int streams : {8, 16}) {
    NanoLikeFakes pair;
    const std::vector<Arrival> arrivals = pair.arrivals(streams, 256);
    const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
    const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_group(false));
    const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_group(true));
    ASSERT_EQ(reply_tokens(old_rule), reply_tokens(plain));
    ASSERT_EQ(reply_tokens(new_rule), reply_tokens(plain));
    EXPECT_GT(old_rule.drafter_passes, 0) << streams;
    EXPECT_EQ(new_rule.drafter_passes, 0) << streams;
    EXPECT_EQ(new_rule.stats.tap_rows, 0) << streams;
    EXPECT_LT(new_rule.ms, old_rule.ms) << streams << " streams: plain " << plain.ms;
    EXPECT_LT(new_rule.ms, 1.001 * plain.ms) << streams << " streams: plain " << plain.ms;
  }
}

TEST(LanesGateGroup, OneStreamAndAFlatVerifyStillExplore) {
  // One stream brings no group: the same run. Sixteen streams whose verify barely grows with rows (the 1.2B on the
  // H200) and whose drafter lands 90 %: the prior's gain dwarfs the group's shapes.
  {
    NanoLikeFakes pair;
    const std::vector<Arrival> arrivals = pair.arrivals(1, 256);
    const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_group(false));
    const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_group(true));
    EXPECT_EQ(new_rule.drafter_passes, old_rule.drafter_passes);
    EXPECT_NEAR(new_rule.ms, old_rule.ms, 1e-9 * old_rule.ms);
  }
  NanoLikeFakes pair;
  pair.target.verify_fixed_ms = 0.9;
  pair.drafter.wrong_rate = 0.1;
  pair.drafter.restarted_wrong_rate = -1;
  const std::vector<Arrival> arrivals = pair.arrivals(16, 256);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_group(true));
  EXPECT_GT(new_rule.drafter_passes, 10);
  EXPECT_LT(new_rule.ms, 0.9 * plain.ms) << "plain " << plain.ms;
}

}  // namespace
}  // namespace ls
