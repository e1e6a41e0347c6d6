// The exploration gate priced the same at admission and in the depth decision (lanes12,
// PricingOptions::gate_prices_prompt): a scout that never tapped its prompt is priced with that prompt's absorb.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions gate_prompt(bool on) {
  LanesOptions options;
  options.pricing.gate_prices_prompt = on;
  return options;
}

TEST(LanesGatePrompt, AScoutWhosePromptAdmissionWouldNotTapIsNotSentToProbeOverARestartedContext) {
  // One nano-like stream of 64 tokens whose 64-row prompt costs 0.03 ms a row to absorb: admission's gate, pricing
  // the prompt's absorb in the scout's one-off, says no and the stream starts dormant. The depth decision priced the
  // same scout without it and said yes, so the dormant stream restarted past its prompt and probed over a few rows,
  // where this drafter lands 15 % (a DSpark context without its prompt): ~10 passes, 1-2 of 70 drafts kept.
  NanoLikeFakes pair;
  pair.drafter.absorb_row_ms = 0.03;
  const std::vector<Arrival> arrivals = pair.arrivals(1, 64);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_prompt(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_prompt(true));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_GT(old_rule.stats.drafter_restarts, 0);
  EXPECT_GT(old_rule.stats.drafter_passes, 3);
  EXPECT_EQ(new_rule.stats.drafter_passes, 0);
  EXPECT_EQ(new_rule.stats.tap_rows, 0);
  EXPECT_EQ(new_rule.stats.drafter_restarts, 0);
  EXPECT_LT(new_rule.ms, old_rule.ms);
}

TEST(LanesGatePrompt, WhereAdmissionTapsThePromptTheScoutDraftsAsBefore) {
  // The same stream with a cheap absorb (0.2 us a row): admission taps the prompt and the scout drafts over its whole
  // context, and the rule changes nothing.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(1, 64);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_prompt(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate_prompt(true));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_GT(new_rule.stats.drafter_passes, 10);
  EXPECT_EQ(new_rule.stats.drafter_passes, old_rule.stats.drafter_passes);
  EXPECT_EQ(new_rule.stats.drafter_restarts, 0);
  EXPECT_NEAR(new_rule.ms, old_rule.ms, 1e-6 * old_rule.ms);
}

}  // namespace
}  // namespace ls
