// The exploration gate priced the same at admission and in the depth decision (lanes12; plain code since lanes15): a
// scout that never tapped its prompt is priced with that prompt's absorb.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

TEST(LanesGatePrompt, AScoutWhosePromptAdmissionWouldNotTapIsNotSentToProbeOverARestartedContext) {
  // One nano-like stream of 64 tokens whose 64-row prompt costs 0.03 ms a row to absorb: admission's gate, pricing
  // the prompt's absorb in the scout's one-off, says no and the stream starts dormant. The depth decision priced the
  // same scout without it and said yes, so the dormant stream restarted past its prompt and probed over a few rows,
  // where this drafter lands 15 % (a DSpark context without its prompt): ~10 passes, 1-2 of 70 drafts kept.
  NanoLikeFakes pair;
  pair.drafter.absorb_row_ms = 0.03;
  const std::vector<Arrival> arrivals = pair.arrivals(1, 64);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  const FakeRun run = run_fakes(pair.clock, pair.target, pair.drafter, arrivals);
  ASSERT_EQ(reply_tokens(run), reply_tokens(plain));
  EXPECT_EQ(run.stats.drafter_passes, 0);
  EXPECT_EQ(run.stats.tap_rows, 0);
  EXPECT_EQ(run.stats.drafter_restarts, 0);
  EXPECT_LT(run.ms, 1.001 * plain.ms);
}

TEST(LanesGatePrompt, WhereAdmissionTapsThePromptTheScoutDraftsAsBefore) {
  // The same stream with a cheap absorb (0.2 us a row): admission taps the prompt and the scout drafts over its whole
  // context, and the rule changes nothing.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(1, 64);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  const FakeRun run = run_fakes(pair.clock, pair.target, pair.drafter, arrivals);
  ASSERT_EQ(reply_tokens(run), reply_tokens(plain));
  EXPECT_GT(run.stats.drafter_passes, 10);
  EXPECT_GE(run.stats.tap_rows, 64);
  EXPECT_EQ(run.stats.drafter_restarts, 0);
  EXPECT_LT(run.ms, plain.ms);
}

}  // namespace
}  // namespace ls
