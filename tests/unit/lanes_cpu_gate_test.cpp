// The explore gate on a CPU target (cpu20, Pricing::scout_one_off_ms): a target on a CPU pool captures no graphs
// and the probe's drafts past its forced one are verified only where the trim buys them, so the scout's one-off is
// its pass, the forced draft's verify row and its prompt's absorb. On the Xeon's nano pair (b6's tables) the gate
// charged two forwards for a new shape and the whole chain's rows (4.1-4.2 ms against a prior's gain of 6.4-8.0 at 64
// tokens: closed, no draft at 1 stream while every-round drafting was 1.12-1.16x of plain).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

struct Arms {
  FakeRun plain;
  FakeRun drafted;
};

Arms run_arms(NanoLikeFakes& pair, int streams, int tokens) {
  const std::vector<Arrival> arrivals = long_prompt_arrivals(pair, streams, tokens);
  Arms arms;
  arms.plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  arms.drafted = run_fakes(pair.clock, pair.target, pair.drafter, arrivals);
  EXPECT_EQ(reply_tokens(arms.drafted), reply_tokens(arms.plain));
  return arms;
}

TEST(LanesCpuGate, TheXeonLikePairDraftsOneStreamOf64TokensAndBeatsPlain) {
  NanoLikeFakes pair = xeon_nano_pair();
  const Arms arms = run_arms(pair, 1, 64);
  EXPECT_GT(arms.drafted.stats.drafter_passes, 8);
  EXPECT_GT(arms.drafted.stats.drafts_accepted, 20);
  EXPECT_LT(arms.drafted.ms, arms.plain.ms * 0.95) << "plain " << arms.plain.ms << " ms";
}

TEST(LanesCpuGate, OnATargetWithGraphsTheGateStillChargesTheWholeChainAndTheNewShapes) {
  // The same costs on a target that captures graphs: its new shapes' forwards and the whole chain stay in the
  // one-off, and the 64-token stream does not explore (the H200's gates are unchanged).
  NanoLikeFakes pair = xeon_nano_pair();
  pair.target.cpu_pool = false;
  const Arms arms = run_arms(pair, 1, 64);
  EXPECT_EQ(arms.drafted.stats.drafter_passes, 0);
  EXPECT_EQ(arms.drafted.stats.tap_rows, 0);
}

TEST(LanesCpuGate, AnAlwaysWrongDrafterCostsOnlyItsExplorationOnTheCpu) {
  // The gate cannot tell a wrong drafter from a right one before its probe: what exploring costs is the prompt's
  // absorb, one pass and the verify rows the trim bought; then pricing buys nothing and only the backoff's probes run,
  // within their budget (PricingOptions::probe_budget, 5 % of plain's time).
  for (int tokens : {64, 256}) {
    NanoLikeFakes pair = xeon_nano_pair();
    pair.drafter.wrong_rate = 1.0;
    pair.drafter.restarted_wrong_rate = 1.0;
    const Arms arms = run_arms(pair, 1, tokens);
    EXPECT_EQ(arms.drafted.stats.drafts_accepted, 0);
    EXPECT_LE(arms.drafted.stats.drafter_passes, tokens / 16) << tokens;
    EXPECT_LT(arms.drafted.stats.windows_with_drafts * 10, arms.drafted.stats.windows_verified) << tokens;
    // The one-off (~1.7 ms: a 192-row absorb 1.09, a pass 0.5, a verify row 0.06), then probes within the budget.
    const double budget_ms = 1.7 + arms.plain.ms * PricingOptions{}.probe_budget;
    EXPECT_LT(arms.drafted.ms, arms.plain.ms + budget_ms) << tokens << " tokens, plain " << arms.plain.ms << " ms";
  }
}

TEST(LanesCpuGate, FourToSixteenXeonLikeStreamsBuyNothingAndCostWhatPlainCosts) {
  // The CPU's verify grows with its rows: at 4-16 streams even an always-right drafter's rounds cannot beat plain,
  // so no prompt is tapped and no pass runs.
  for (int streams : {4, 8, 16}) {
    NanoLikeFakes pair = xeon_nano_pair();
    const Arms arms = run_arms(pair, streams, 64);
    EXPECT_EQ(arms.drafted.stats.drafter_passes, 0) << streams;
    EXPECT_EQ(arms.drafted.stats.tap_rows, 0) << streams;
    EXPECT_LT(arms.drafted.ms, arms.plain.ms * 1.001) << streams << " streams, plain " << arms.plain.ms << " ms";
  }
}

}  // namespace
}  // namespace ls
