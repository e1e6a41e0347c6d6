// Exploration its run can repay (lanes11, PricingOptions::explore_repay): before any draft was verified, the scout
// runs only where the prior's best round saves, over the tokens the streams have left, a multiple of its one-off.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions gate(double repay) {
  LanesOptions options;
  options.pricing.explore_repay = repay;
  options.pricing.whole_contexts_priced = false;  // the scout under test (whole contexts: lanes_whole_context_test)
  return options;
}

TEST(LanesExploreGate, SixteenShortStreamsOfTheNanoLikePairDoNotScoutAndCostWhatPlainCosts) {
  // 16 streams of 64 tokens: the prior's best round saves a few per cent a round, the scout's taps, probe and new
  // shapes cost more than that over 64 rounds. Without the gate the scout and the streams it wakes cost time.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(16, 64);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals, LanesOptions{});
  const FakeRun open = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate(0));
  int64_t gate_allocations = 0;
  const FakeRun gated = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate(2), [&](const Lanes& lanes) {
    gate_allocations = lanes.pricing().gate_allocations();
  });
  ASSERT_EQ(reply_tokens(open), reply_tokens(plain));
  ASSERT_EQ(reply_tokens(gated), reply_tokens(plain));
  EXPECT_GT(open.stats.tap_rows, 0);
  EXPECT_EQ(gated.stats.tap_rows, 0);
  EXPECT_EQ(gated.stats.drafter_passes, 0);
  EXPECT_LT(gated.ms, open.ms) << "open " << open.ms << " ms, plain " << plain.ms << " ms";
  EXPECT_LT(gated.ms, plain.ms * 1.001) << "plain " << plain.ms << " ms";
  // A closed gate is remembered: its allocator runs do not grow with the rounds (64) or the streams admitted (16).
  EXPECT_GT(gated.stats.rounds, 60);
  EXPECT_LE(gate_allocations, 8);
}

TEST(LanesExploreGate, OneAndFourStreamsStillScoutAndLongerRunsRepayWhatShortOnesDoNot) {
  // One and four streams of 64 tokens: the prior's round beats plain's rate by far, so the scout runs as before.
  // Eight streams: the prior's few per cent a round repay three times the scout's one-off over 512 tokens, not 64.
  NanoLikeFakes pair;
  for (int streams : {1, 4}) {
    const std::vector<Arrival> arrivals = pair.arrivals(streams, 64);
    const FakeRun open = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate(0));
    const FakeRun gated = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, gate(3));
    EXPECT_EQ(reply_tokens(gated), reply_tokens(open));
    EXPECT_GT(gated.stats.drafter_passes, 0) << streams;
    EXPECT_EQ(gated.stats.drafter_passes, open.stats.drafter_passes) << streams;
    EXPECT_NEAR(gated.ms, open.ms, 1e-6 * open.ms) << streams;
  }
  const FakeRun short_runs = run_fakes(pair.clock, pair.target, pair.drafter, pair.arrivals(8, 64), gate(3));
  const FakeRun long_runs = run_fakes(pair.clock, pair.target, pair.drafter, pair.arrivals(8, 512), gate(3));
  EXPECT_EQ(short_runs.stats.tap_rows, 0);
  EXPECT_GT(long_runs.stats.tap_rows, 0);
  EXPECT_GT(long_runs.stats.drafter_passes, 0);
}

TEST(LanesExploreGate, WithTheGateEveryReplyEqualsItsRequestRunAlonePlain) {
  for (bool sampled : {false, true}) {
    for (bool device : {false, true}) {
      const ExactnessRun run = run_exactness_case(sampled, device, gate(2), 3.0);
      EXPECT_EQ(reply_tokens(run.drafted), run.alone) << "sampled " << sampled << " device " << device;
      // (Sampled passes at 3x never pay at the prior here: the gate keeps the sampled runs plain.)
      if (!sampled) {
        EXPECT_GT(run.drafted.stats.drafts_verified, 0) << "device " << device;
      }
    }
  }
}

}  // namespace
}  // namespace ls
