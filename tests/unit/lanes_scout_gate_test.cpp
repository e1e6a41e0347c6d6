// The scout's gate on an always-right drafter's gain where its group would draft over restarted contexts (lanes15,
// PricingOptions::scout_gate_if_right, off): gpu-check s14B's nano greedy 64 tokens at 4 streams sat on the prior's
// edge and lost 16 % to a group that landed 1.5 a window. The rule only decides whether the scout explores; the
// replies are compared with plain's in every arm.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions scout_gate(bool right) {
  LanesOptions options;
  options.pricing.scout_gate_if_right = right;
  return options;
}

TEST(LanesScoutGate, FourShortStreamsWhoseGroupWouldRestartDoNotExploreAndCostWhatPlainCosts) {
  // 4 nano-like streams of 64 tokens: whole contexts do not repay their prompts and the group's shapes, the prior's
  // gain repays three times the scout's one-off, and the woken streams land 15 % over restarted contexts.
  NanoLikeFakes pair;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(4, 64), scout_gate(false), scout_gate(true));
  ASSERT_TRUE(arms.exact());
  // (The scout over a restarted context, lanes17, lands what the group would: fewer passes than the whole-context
  // scout's 6+, still a loss.)
  EXPECT_GT(arms.off.drafter_passes, 2);
  EXPECT_GT(arms.off.ms, 1.1 * arms.plain.ms);
  EXPECT_EQ(arms.on.drafter_passes, 0);
  EXPECT_EQ(arms.on.stats.tap_rows, 0);
  EXPECT_LT(arms.on.ms, 1.001 * arms.plain.ms) << "plain " << arms.plain.ms;
}

TEST(LanesScoutGate, OneStreamAndWholeContextsExploreAsBefore) {
  // One stream is its own group; 4 streams of 256 tokens buy whole contexts (no restarted group to judge).
  for (auto [streams, tokens] : {std::pair{1, 64}, std::pair{1, 256}, std::pair{4, 256}}) {
    NanoLikeFakes pair;
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, tokens), scout_gate(false), scout_gate(true));
    ASSERT_TRUE(arms.exact());
    EXPECT_GT(arms.on.drafter_passes, 10) << streams << " streams, " << tokens << " tokens";
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams << " streams, " << tokens << " tokens";
    EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-9 * arms.off.ms) << streams << " streams, " << tokens << " tokens";
    EXPECT_LT(arms.on.ms, arms.plain.ms) << streams << " streams, " << tokens << " tokens";
  }
}

}  // namespace
}  // namespace ls
