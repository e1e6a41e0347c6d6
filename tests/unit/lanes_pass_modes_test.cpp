// Passes priced per sampling mode (lanes10): a drafter whose sampled pass costs far more than its greedy one.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

// One stream of 300 tokens; a verify 10 ms + 0.5 ms a row; a pass 4 ms + 0.2 ms a draft row, 8x that with a sampled
// request; drafts right 80%. A greedy window of 6 drafts yields ~3.95 tokens for 13.5 + 5.2 ms (4.7 ms a token
// against plain's 10.5): it pays. A sampled one costs 13.5 + 41.6 ms (14 ms a token): it does not.
struct Case {
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.2);
  Case() {
    drafter.draft_fixed_ms = 4.0;
    drafter.sampled_pass_factor = 8.0;
  }
  std::vector<Arrival> arrivals(bool sampled) const {
    return endless_arrivals(1, target.shape.vocab_size, 300, [sampled](int) { return sampled; });
  }
  FakeRun run(bool sampled, bool timed_at_load = true) {
    LanesOptions options;
    options.calibration.sampled_passes = timed_at_load;
    return run_fakes(clock, target, drafter, arrivals(sampled), options);
  }
  FakeRun plain(bool sampled) { return run_fakes(clock, target, std::nullopt, arrivals(sampled), LanesOptions{}); }
};

TEST(LanesPassModes, ASampledPassEightTimesTheGreedyOneIsNotBoughtWhileGreedyRoundsKeepBuyingDrafts) {
  Case c;
  const FakeRun plain_sampled = c.plain(true);
  const FakeRun timed = c.run(true);
  const FakeRun online = c.run(true, /*timed_at_load=*/false);
  for (const FakeRun* run : {&timed, &online}) ASSERT_EQ(reply_tokens(*run), reply_tokens(plain_sampled));
  // (One table for both modes, lanes_bench --pass-modes off before lanes17: sampled passes priced at the greedy table
  // kept being bought here, more than 10 passes, and lost to plain by more than 5 %.)
  // Timed at load with sampled requests: nothing bought, only probes of one draft on the doubling wait (8, 16, 32,
  // 64, 128 rounds: an always-right window of 6 would pay, so they run).
  EXPECT_EQ(timed.stats.drafts_verified, timed.drafter_passes);
  EXPECT_LE(timed.drafter_passes, 5);
  EXPECT_LT(timed.ms, plain_sampled.ms * 1.05) << "plain " << plain_sampled.ms << " ms";
  // Learned online from the greedy table: two passes far above it set the sampled scale; drafting stops within a
  // few rounds (then probes as above).
  EXPECT_LE(online.drafter_passes, 7);
  EXPECT_LE(online.stats.drafts_verified, online.drafter_passes + 6);
  EXPECT_LT(online.ms, plain_sampled.ms * 1.05) << "plain " << plain_sampled.ms << " ms";
}

TEST(LanesPassModes, GreedyStreamsKeepBuyingDrafts) {
  Case c;
  const FakeRun plain = c.plain(false);
  const FakeRun greedy = c.run(false);
  ASSERT_EQ(reply_tokens(greedy), reply_tokens(plain));
  EXPECT_GT(greedy.drafter_passes, 30);
  EXPECT_LT(greedy.ms, plain.ms * 0.7) << "plain " << plain.ms << " ms";
}

TEST(LanesPassModes, TheLoadTimeTimingTimesSampledPasses) {
  Case c;
  FakeTarget target(c.target);
  FakeDrafter drafter(c.drafter);
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, c.clock);
  ASSERT_TRUE(lanes.ok());
  const CostTables& tables = (*lanes)->pricing().tables();
  ASSERT_FALSE(tables.sampled_draft.empty());
  for (int depth : {1, 3, 6}) {
    EXPECT_NEAR(tables.sampled_draft.ms(1, depth), 8.0 * tables.draft.ms(1, depth), 1e-9) << "depth " << depth;
  }
  EXPECT_NEAR((*lanes)->pricing().draft_ms(1, 6, PassMode::Sampled), 8.0 * 5.2, 1e-9);
}

TEST(LanesPassModes, VerifiesWithSampledWindowsArePricedFromTheirOwnTable) {
  // A target that draws a sampled row 0.5 ms dearer than an argmax row: timed at load with sampled windows, a verify
  // of r rows with a sampled window is priced 0.5 ms x r dearer; greedy verifies as before.
  Case c;
  c.target.sampled_row_ms = 0.5;
  FakeTarget target(c.target);
  FakeDrafter drafter(c.drafter);
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, c.clock);
  ASSERT_TRUE(lanes.ok());
  const Pricing& pricing = (*lanes)->pricing();
  for (int rows : {1, 4, 7, 16}) {
    const double greedy_ms = pricing.verify_ms(rows, PassMode::Greedy);
    EXPECT_NEAR(pricing.verify_ms(rows, PassMode::Sampled), greedy_ms + 0.5 * rows, 1e-9) << rows << " rows";
    EXPECT_NEAR(pricing.verify_ms(rows, PassMode::Greedy), 10.0 + 0.5 * rows, 1e-9) << rows << " rows";
  }
}

TEST(LanesPassModes, TwoSampledPassesFarAboveTheTableSetTheScaleOneOffsDoNot) {
  CostTables tables;
  const std::vector<TimedPoint> verify = {{1, 0, 1.0}, {64, 0, 2.0}};
  tables.verify.init(64, verify);
  const std::vector<TimedPoint> draft = {{1, 1, 0.5}, {1, 7, 0.5}, {4, 1, 0.5}, {4, 7, 0.5}};
  tables.draft.init(4, 7, draft);
  Pricing pricing(tables, PricingOptions{}, 64, true);
  // A one-off far above (a new shape's eager run), then a pass at the table: no jump.
  pricing.observe_draft(2, 7, 4.0, PassMode::Sampled);
  pricing.observe_draft(2, 7, 0.5, PassMode::Sampled);
  EXPECT_LT(pricing.draft_ms(2, 7, PassMode::Sampled), 1.5);
  // Two in a row at 8x and 6x: priced at least 6x at once; greedy passes untouched.
  pricing.observe_draft(3, 7, 4.0, PassMode::Sampled);
  pricing.observe_draft(1, 5, 3.0, PassMode::Sampled);
  EXPECT_GE(pricing.draft_ms(1, 7, PassMode::Sampled), 3.0);
  EXPECT_DOUBLE_EQ(pricing.draft_ms(1, 7, PassMode::Greedy), 0.5);
}

}  // namespace
}  // namespace ls
