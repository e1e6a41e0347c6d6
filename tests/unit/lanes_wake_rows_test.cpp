// A stream woken over a restarted context drafts once that context holds LanesOptions::wake_context_rows rows
// (lanes13): a DSpark context of one or two rows past skipped ones lands next to nothing.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions wake_rows(int rows) {
  LanesOptions options;
  options.wake_context_rows = rows;
  return options;
}

TEST(LanesWakeRows, StreamsWokenOverRestartedContextsDraftOnceTheyHoldEnoughRows) {
  // Four nano-like greedy streams of 256 tokens whose drafter lands 15 % a draft over a context restarted fewer than
  // 24 rows ago (75 % otherwise): the scout proves the drafter over its prompt, the pool buys the dormant streams,
  // which drafted the round after they woke over a context of one row and landed 31 of 266 (0.90x of plain). Now one
  // of them drafts at once and lands nothing (short contexts measured: they land less), and the others, and it, wait
  // until 32 rows were tapped: 669 of 1862 land, 1.01x of plain.
  NanoLikeFakes pair;
  pair.drafter.restarted_short_rows = 24;
  const std::vector<Arrival> arrivals = pair.arrivals(4, 256);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, wake_rows(0));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, wake_rows(32));
  ASSERT_EQ(reply_tokens(old_rule), reply_tokens(plain));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(plain));
  EXPECT_EQ(old_rule.stats.wake_waits, 0);
  EXPECT_GT(new_rule.stats.wake_waits, 2 * 24);
  EXPECT_GT(new_rule.stats.drafts_accepted, 4 * old_rule.stats.drafts_accepted);
  EXPECT_LT(new_rule.ms, 0.9 * old_rule.ms);
  EXPECT_LT(new_rule.ms, plain.ms);
}

TEST(LanesWakeRows, WhereRestartedContextsLandAsWholeOnesNoStreamWaitsPastTheRoundThatMeasuredThem) {
  // The same four streams on a drafter whose restarted contexts land as whole ones (a synthetic-acceptance drafter):
  // the one woken stream that drafts at once lands as the pool does, so no stream waits after its window, and the
  // run costs what it did without the rule to within a few waited rounds.
  NanoLikeFakes pair;
  pair.drafter.restarted_wrong_rate = -1;
  const std::vector<Arrival> arrivals = pair.arrivals(4, 256);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, wake_rows(0));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, wake_rows(32));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_GT(old_rule.stats.drafter_restarts, 0);
  EXPECT_LE(new_rule.stats.wake_waits, 3);
  EXPECT_LE(new_rule.ms, 1.02 * old_rule.ms);
}

TEST(LanesWakeRows, AStreamThatNeverRestartedDraftsAsBefore) {
  // One stream: the scout over its whole prompt never restarts, so the rule never holds it back.
  NanoLikeFakes pair;
  pair.drafter.restarted_short_rows = 24;
  const std::vector<Arrival> arrivals = pair.arrivals(1, 256);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, wake_rows(0));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, wake_rows(32));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_EQ(new_rule.stats.drafter_restarts, 0);
  EXPECT_EQ(new_rule.stats.wake_waits, 0);
  EXPECT_EQ(new_rule.stats.drafter_passes, old_rule.stats.drafter_passes);
  EXPECT_NEAR(new_rule.ms, old_rule.ms, 1e-6 * old_rule.ms);
}

TEST(LanesWakeRows, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (bool sampled : {false, true}) {
    for (bool device : {false, true}) {
      const ExactnessRun run = run_exactness_case(sampled, device, sampled_any_streams(wake_rows(8)));
      EXPECT_EQ(reply_tokens(run.drafted), run.alone) << "sampled " << sampled << " device " << device;
      EXPECT_GT(run.drafted.stats.drafts_verified, 0) << "sampled " << sampled << " device " << device;
    }
  }
}


TEST(LanesWakeRows, WhereShortContextsLandLessADormantStreamDoesNotProbeOverOne) {
  // One nano-like seeded sampled stream of 256 tokens whose drafts land 45 % a draft (15 % over a context restarted
  // fewer than 24 rows ago), its own outcomes learned fast: it goes dormant after its first windows, and each probe
  // after that drafted over a context restarted a round before (6 passes, 5 restarts, nothing kept). With the wake
  // rule, once one such window landed less, no probe drafts over one: fewer passes and restarts, less time.
  NanoLikeFakes pair;
  pair.drafter.restarted_short_rows = 24;
  pair.weak_sampled_drafter();
  const std::vector<Arrival> arrivals = pair.seeded_sampled_arrivals(1, 256);
  LanesOptions old_options;
  old_options.pricing.fast_first_outcomes = true;
  LanesOptions new_options = wake_rows(32);
  new_options.pricing.fast_first_outcomes = true;
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, old_options);
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, new_options);
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_GE(old_rule.stats.drafter_restarts, 4);
  EXPECT_LE(new_rule.stats.drafter_restarts, 2);
  EXPECT_LT(new_rule.stats.drafter_passes, old_rule.stats.drafter_passes);
  EXPECT_LT(new_rule.ms, old_rule.ms);
}

}  // namespace
}  // namespace ls
