// Rounds that draft nothing cost what plain rounds cost (lanes10): host work of dormant streams on an H200-like pair.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

// The nano pair on the H200, roughly: a launch-bound verify (0.19 ms + 1 us a row, new shapes 0.3 ms dearer twice),
// a pass 0.14 ms + 4 us a draft row, drafts right 75% (15% after a restart), device taps, 64-token prompts.
struct NanoLike {
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 0.19, 0.001, 128);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.25, 0.004);
  NanoLike() {
    target.exact_width = 16;
    target.new_shape_ms = 0.3;
    target.shape_by_windows = true;
    target.device_taps = true;
    drafter.max_depth = 7;
    drafter.draft_fixed_ms = 0.14;
    drafter.confidences = true;
    drafter.restarted_wrong_rate = 0.85;
    drafter.absorb_call_ms = 0.04;
    drafter.absorb_row_ms = 0.0002;
    drafter.device_taps = true;
  }
  std::vector<Arrival> arrivals(int streams, int tokens) const {
    std::vector<Arrival> arrivals = endless_arrivals(streams, target.shape.vocab_size, tokens);
    for (Arrival& arrival : arrivals) {
      while (arrival.request.prompt.size() < 64) arrival.request.prompt.push_back(17 + arrival.request.prompt.size());
    }
    return arrivals;
  }
};

TEST(LanesQuietRounds, ADueGroupProbeThatWouldNotRunIsAskedAgainOnlyEveryEighthRound) {
  // 16 streams, 256 tokens: after the first rounds nothing drafts; a group probe is due and would not run, and asking
  // every round (two allocator runs over 16 offers) was most of the drafted arm's host work over plain's.
  NanoLike pair;
  const std::vector<Arrival> arrivals = pair.arrivals(16, 256);
  auto run = [&](int every, int64_t& checks) {
    LanesOptions options;
    options.pricing.group_check_every = every;
    return run_fakes(pair.clock, pair.target, pair.drafter, arrivals, options,
                     [&](const Lanes& lanes) { checks = lanes.pricing().group_checks(); });
  };
  int64_t every_round = 0;
  int64_t every_eighth = 0;
  const FakeRun old_run = run(1, every_round);
  const FakeRun new_run = run(8, every_eighth);
  ASSERT_EQ(reply_tokens(new_run), reply_tokens(old_run));
  ASSERT_GT(new_run.stats.rounds, 200);
  EXPECT_GT(every_round, 150);
  EXPECT_LE(every_eighth, new_run.stats.rounds / 8 + 4);
  EXPECT_LT(new_run.ms, old_run.ms * 1.01) << "every round " << old_run.ms << " ms";
}

}  // namespace
}  // namespace ls
