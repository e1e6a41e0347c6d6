// Group checks that back off (lanes12; plain code since lanes15): a due group probe that would not run is asked again
// after a doubling wait, not every round; a group probe that would run still runs when it is due.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

TEST(LanesGroupChecks, ADueGroupProbeThatWouldNotRunIsAskedAfterADoublingWait) {
  // 16 nano-like streams of 256 tokens: the gate opens, the scout probes, and nothing pays after it. The group probe
  // is due from the 8th decision on and would not run (16 streams cannot pay together even at the hopeful chances);
  // asked every round (before lanes12) it cost two allocator runs, one over 16 offers, in each of ~250 rounds.
  NanoLikeFakes pair;
  int64_t checks = 0;
  const FakeRun run = run_fakes(pair.clock, pair.target, pair.drafter, pair.arrivals(16, 256), {},
                                [&](const Lanes& lanes) { checks = lanes.pricing().group_checks(); });
  ASSERT_GT(run.stats.drafter_passes, 0);  // the scout explored
  ASSERT_GT(run.stats.rounds, 250);
  // Waits of 8, 16, 32, 64, 128 decisions: a handful of checks over the run.
  EXPECT_GT(checks, 0);
  EXPECT_LE(checks, 6);
}

TEST(LanesGroupChecks, AGroupProbeThatWouldRunStillRunsAfterAnUnluckyScoutProbe) {
  // 16 streams where only the group pays (a verify 10 ms + 0.25 ms a row, a pass 2 ms + 0.2 ms a draft row, drafts
  // right 83 %): after a failed scout probe a group probe must still bring drafting back (LanesProbe's case).
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.25));
  FakeDrafter drafter(costed_fake_drafter(clock, 0.17));
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  drafter.force_wrong_passes(1);
  for (int index = 0; index < 16; ++index) {
    Request request = make_fake_request(index, false, 64);
    request.max_tokens = 400;
    (*lanes)->submit(request);
  }
  int first_pass = -1;
  int group_pass = -1;
  for (int round = 0; !(*lanes)->idle() && group_pass < 0; ++round) {
    const int64_t passes = drafter.passes();
    const int64_t requests = drafter.requests();
    ASSERT_TRUE((*lanes)->round().ok());
    if (drafter.passes() == passes) continue;
    if (first_pass < 0) first_pass = round;
    if (drafter.requests() - requests >= 2) group_pass = round;
  }
  ASSERT_GE(first_pass, 0);
  ASSERT_GE(group_pass, 0) << "no group pass after the failed scout probe";
  EXPECT_LE(group_pass - first_pass, 64);
}

}  // namespace
}  // namespace ls
