// The restarted scout's pass at the prefill (lanes20, LanesOptions::scout_at_prefill, with scout_probes 4 and
// scout_vote): the scout and its probers tap their prompt's last row in the prefill forward and probe right after it,
// so their drafts are verified in the first round's forward, not the second: no tap-only forward (on the H200 a graph
// key of its own). The scout's context is one row long either way.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions four_voting(bool at_prefill) {
  LanesOptions options;
  options.pricing.scout_probes = 4;
  options.pricing.scout_vote = true;
  options.scout_at_prefill = at_prefill;
  return options;
}


int64_t windows_with_drafts_after_one_round(NanoLikeFakes& pair, int streams, const LanesOptions& options) {
  FakeTarget target(pair.target);
  FakeDrafter drafter(pair.drafter);
  auto lanes = Lanes::create(target, &drafter, options, pair.clock);
  EXPECT_TRUE(lanes.ok()) << lanes.status().to_string();
  if (!lanes.ok()) return -1;
  for (const Arrival& arrival : pair.arrivals(streams, 256)) (*lanes)->submit(arrival.request);
  EXPECT_TRUE((*lanes)->round().ok());
  return (*lanes)->stats().windows_with_drafts;
}

TEST(LanesScoutPrefill, TheScoutPassesDraftsAreVerifiedInTheFirstRoundWithoutATapOnlyForward) {
  for (int streams : {8, 16}) {
    NanoLikeFakes pair = h200_nano_pair_b1();
    pair.target.shape_by_taps = true;
    // The device absorb call as draft19 left it on the H200 (it no longer waits: 0.0005 ms in drafter_bench): the
    // prefill scouts' rows go in one call per prefill forward they sit in, two here.
    pair.drafter.absorb_call_ms = 0.0005;
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), four_voting(false), four_voting(true));
    ASSERT_TRUE(arms.exact()) << streams;
    // Four prompts' last rows, one each, as the round's scout taps a row each (and a group probe's row).
    EXPECT_EQ(arms.on.stats.tap_rows, arms.off.stats.tap_rows) << streams;
    EXPECT_LE(arms.on.stats.tap_rows, 5) << streams;
    EXPECT_EQ(arms.on.stats.drafter_restarts, arms.off.stats.drafter_restarts) << streams;
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams;
    // The first round verified the scout pass's four windows (at a round: the second).
    EXPECT_EQ(windows_with_drafts_after_one_round(pair, streams, four_voting(true)), 4) << streams;
    EXPECT_EQ(windows_with_drafts_after_one_round(pair, streams, four_voting(false)), 0) << streams;
    // No dearer than probing at a round (the tap-only forward's shape is seen by the load-time timing here, so the
    // fakes show no gain; on the H200 it ran eagerly in gpu-check b6's median runs: 3 x 0.38 against 0.19 ms).
    EXPECT_LE(arms.on.ms, arms.off.ms + 0.01) << streams << " streams: at a round " << arms.off.ms << " ms";
  }
}

TEST(LanesScoutPrefill, ADrafterThatLandsOverRestartedContextsStillWakesItsGroup) {
  NanoLikeFakes pair = h200_nano_pair();
  pair.target.shape_by_taps = true;
  pair.drafter.restarted_wrong_rate = -1;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), four_voting(false), four_voting(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GT(arms.on.stats.drafts_accepted, 1000);
  EXPECT_LT(arms.on.ms, 0.9 * arms.plain.ms) << "plain " << arms.plain.ms << " ms, at a round " << arms.off.ms;
}

TEST(LanesScoutPrefill, OneStreamAndWholeContextsAreUntouched) {
  for (int streams : {1, 4}) {
    NanoLikeFakes pair = h200_nano_pair_b1();
    pair.target.shape_by_taps = true;
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), four_voting(false), four_voting(true));
    ASSERT_TRUE(arms.exact()) << streams;
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams;
    EXPECT_EQ(arms.on.stats.tap_rows, arms.off.stats.tap_rows) << streams;
    EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-9 * arms.off.ms) << streams;
  }
}

TEST(LanesScoutPrefill, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (const std::string& inexact : inexact_cases(four_voting(true))) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
