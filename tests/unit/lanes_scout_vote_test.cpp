// The scout pass votes once (lanes20, PricingOptions::scout_vote, with scout_probes 4): the restarted windows of the
// scout's pass move the pool as one window, and in rounds of several streams no dormant stream is woken on the pool
// before half the votes landed. What it must keep (lanes19's PW, four probes and no wake while nothing landed, lost
// the first two on the fakes): a drafter that lands over restarted contexts still wakes its group, a right drafter
// after an unlucky (forced-wrong) scout pass resumes within 64 rounds; and what it is for: one restarted window that
// lands among four that do not wakes no group.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

// lanes19's PW (four probes, no wake while nothing landed) and the vote (four probes voting once).
LanesOptions four_landed() {
  LanesOptions options;
  options.pricing.scout_probes = 4;
  options.pricing.wake_needs_landed = true;
  return options;
}

LanesOptions four_voting() {
  LanesOptions options;
  options.pricing.scout_probes = 4;
  options.pricing.scout_vote = true;
  return options;
}

TEST(LanesScoutVote, ADrafterThatLandsOverRestartedContextsWakesItsGroupAsTheScoutAloneDid) {
  // The synth 1.2B's case at 8 streams (restarted contexts land as whole ones, 75 % a draft): the scout alone 1.158x
  // of plain, PW 1.108x (its four windows moved the pool as four: the group was bought later and less).
  NanoLikeFakes pair = h200_nano_pair();
  pair.drafter.restarted_wrong_rate = -1;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 256), four_landed(), four_voting());
  ASSERT_TRUE(arms.exact());
  EXPECT_GT(arms.on.stats.drafts_accepted, 1000);
  EXPECT_LT(arms.on.ms, 0.88 * arms.plain.ms) << "plain " << arms.plain.ms << " ms, PW " << arms.off.ms << " ms";
  EXPECT_LT(arms.on.ms, 0.97 * arms.off.ms) << "PW " << arms.off.ms << " ms";
}

struct Resumed {
  int first_pass = -1;
  int group_pass = -1;
};

Resumed resume_after_a_failed_scout_pass(const LanesOptions& options) {
  // LanesProbe's 16 streams where only the group pays (a verify 10 ms + 0.25 ms a row, a pass 2 ms + 0.2 ms a draft
  // row, drafts right 83 %), the scout pass forced wrong (all four windows).
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.25));
  FakeDrafter drafter(costed_fake_drafter(clock, 0.17));
  LanesOptions scouting = options;
  scouting.scout_prompt_only = true;
  scouting.pricing.whole_contexts_priced = false;
  auto lanes = Lanes::create(target, &drafter, scouting, clock);
  EXPECT_TRUE(lanes.ok()) << lanes.status().to_string();
  Resumed resumed;
  if (!lanes.ok()) return resumed;
  drafter.force_wrong_passes(1);
  for (int index = 0; index < 16; ++index) {
    Request request = make_fake_request(index, false, 64);
    request.max_tokens = 400;
    (*lanes)->submit(request);
  }
  for (int round = 0; !(*lanes)->idle() && resumed.group_pass < 0; ++round) {
    const int64_t passes = drafter.passes();
    const int64_t requests = drafter.requests();
    EXPECT_TRUE((*lanes)->round().ok());
    if (drafter.passes() == passes) continue;
    if (resumed.first_pass < 0) {
      resumed.first_pass = round;
    } else if (drafter.requests() - requests >= 2) {
      resumed.group_pass = round;
    }
  }
  return resumed;
}

TEST(LanesScoutVote, AfterAFailedScoutPassOfFourARightDrafterResumesWithin64Rounds) {
  // PW: the four failed windows pulled the pool so low that single landed group probes (rounds 8, 24, 56, 120) bought
  // the group only at round 129.
  const Resumed old = resume_after_a_failed_scout_pass(four_landed());
  const Resumed voted = resume_after_a_failed_scout_pass(four_voting());
  ASSERT_GE(voted.first_pass, 0);
  ASSERT_GE(voted.group_pass, 0) << "no group pass after the failed scout pass";
  EXPECT_LE(voted.group_pass - voted.first_pass, 64);
  EXPECT_GT(old.group_pass - old.first_pass, 64);  // (what PW did)
}

TEST(LanesScoutVote, OneLandedWindowAmongFourWakesNoGroupAtSixteenStreams) {
  // b1-like fakes, the drafter right for the scout's stream alone (the other restarted windows land 15 %): its window
  // lands, three beside it do not; a quarter of one vote landed, so the pool, moved as by one window, wakes no
  // stream. (The scout alone: 17 restarts, 0.947x of plain.)
  NanoLikeFakes pair = h200_nano_pair_b1();
  pair.drafter.right_streams = {1};
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(16, 256), LanesOptions{}, four_voting());
  ASSERT_TRUE(arms.exact());
  EXPECT_GE(arms.off.stats.drafter_restarts, 16);
  EXPECT_LE(arms.on.stats.drafter_restarts, 4);
  EXPECT_LE(arms.on.drafter_passes, 1);
  EXPECT_LT(arms.on.ms, 0.975 * arms.off.ms) << "scout alone " << arms.off.ms << " ms, plain " << arms.plain.ms;
}

TEST(LanesScoutVote, NanoLikeGroupsOverRestartedContextsStayDormant) {
  // b1-like fakes (restarted drafts land 15 %): the scout alone woke 8 streams (9 restarts, 0.948x of plain).
  for (int streams : {8, 16}) {
    NanoLikeFakes pair = h200_nano_pair_b1();
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), LanesOptions{}, four_voting());
    ASSERT_TRUE(arms.exact()) << streams;
    EXPECT_LE(arms.on.stats.drafter_restarts, 5) << streams;
    EXPECT_LE(arms.on.drafter_passes, 2) << streams;
    EXPECT_LE(arms.on.ms, 1.03 * arms.plain.ms) << streams << " streams: plain " << arms.plain.ms << " ms";
  }
}

TEST(LanesScoutVote, OneStreamAndWholeContextsAreUntouched) {
  for (int streams : {1, 4}) {
    NanoLikeFakes pair = h200_nano_pair_b1();
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), LanesOptions{}, four_voting());
    ASSERT_TRUE(arms.exact()) << streams;
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams;
    EXPECT_EQ(arms.on.stats.tap_rows, arms.off.stats.tap_rows) << streams;
    EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-9 * arms.off.ms) << streams;
  }
}

TEST(LanesScoutVote, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (const std::string& inexact : inexact_cases(four_voting())) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
