// The scout over a restarted context (lanes17, the default since batch A): where whole contexts are not bought and
// several streams share the rounds, the scout's probe measures what the group it would wake lands, not what a whole
// prompt's context does.
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

Arms run_arms(NanoLikeFakes& pair, int streams) {
  const std::vector<Arrival> arrivals = pair.arrivals(streams, 256);
  Arms arms;
  arms.plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  arms.drafted = run_fakes(pair.clock, pair.target, pair.drafter, arrivals);
  return arms;
}

TEST(LanesScoutRestarted, EightAndSixteenNanoLikeStreamsLoseAtMostTwoPercent) {
  // (The whole-context scout, the default before lanes17: 0.945 / 0.989x of plain here, its group woken at 8.)
  for (int streams : {8, 16}) {
    NanoLikeFakes pair = h200_nano_pair();
    const Arms arms = run_arms(pair, streams);
    ASSERT_EQ(reply_tokens(arms.drafted), reply_tokens(arms.plain)) << streams;
    EXPECT_LE(arms.drafted.ms, 1.02 * arms.plain.ms) << streams << " streams: plain " << arms.plain.ms << " ms";
    // The scout's prompt is never tapped: at most a few rows of the rounds it probes in.
    EXPECT_LT(arms.drafted.stats.tap_rows, 64) << streams;
  }
}

TEST(LanesScoutRestarted, ADrafterThatLandsAsWellOverRestartedContextsStillWakesItsGroup) {
  // The synth 1.2B's drafter (synthetic acceptance) lands as well over either context: the restarted scout proves it
  // and the group drafts.
  NanoLikeFakes pair = h200_nano_pair();
  pair.drafter.restarted_wrong_rate = -1;
  const Arms arms = run_arms(pair, 8);
  ASSERT_EQ(reply_tokens(arms.drafted), reply_tokens(arms.plain));
  EXPECT_GT(arms.drafted.stats.drafts_accepted, 1000);
  EXPECT_LT(arms.drafted.ms, 0.9 * arms.plain.ms) << "plain " << arms.plain.ms << " ms";
}

TEST(LanesScoutRestarted, OneStreamAndFourStreamsOfWholeContextsTapEveryPrompt) {
  for (int streams : {1, 4}) {
    NanoLikeFakes pair = h200_nano_pair();
    const Arms arms = run_arms(pair, streams);
    ASSERT_EQ(reply_tokens(arms.drafted), reply_tokens(arms.plain)) << streams;
    EXPECT_GE(arms.drafted.stats.tap_rows, streams * 64) << streams;
    EXPECT_EQ(arms.drafted.stats.drafter_restarts, 0) << streams;
    EXPECT_LT(arms.drafted.ms, 0.8 * arms.plain.ms) << streams;
  }
}

TEST(LanesScoutRestarted, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (const std::string& inexact : inexact_cases(LanesOptions{})) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
