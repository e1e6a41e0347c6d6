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
  FakeRun run(bool sampled, bool per_mode, bool timed_at_load = true) {
    LanesOptions options;
    options.pricing.pass_cost_per_mode = per_mode;
    options.calibration.sampled_passes = timed_at_load;
    return run_fakes(clock, target, drafter, arrivals(sampled), options);
  }
  FakeRun plain(bool sampled) { return run_fakes(clock, target, std::nullopt, arrivals(sampled), LanesOptions{}); }
};

TEST(LanesPassModes, ASampledPassEightTimesTheGreedyOneIsNotBoughtWhileGreedyRoundsKeepBuyingDrafts) {
  Case c;
  const FakeRun plain_sampled = c.plain(true);
  const FakeRun old_sampled = c.run(true, false);
  const FakeRun timed = c.run(true, true);
  const FakeRun online = c.run(true, true, /*timed_at_load=*/false);
  for (const FakeRun* run : {&old_sampled, &timed, &online}) ASSERT_EQ(reply_tokens(*run), reply_tokens(plain_sampled));
  // One table for both modes: sampled passes priced at the greedy table keep being bought, and lose to plain.
  EXPECT_GT(old_sampled.drafter_passes, 10);
  EXPECT_GT(old_sampled.ms, plain_sampled.ms * 1.05) << "plain " << plain_sampled.ms << " ms";
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
  EXPECT_LT(online.ms, old_sampled.ms * 0.95) << "one table " << old_sampled.ms << " ms";
}

TEST(LanesPassModes, GreedyStreamsArePricedExactlyAsWithOneTable) {
  Case c;
  const FakeRun plain = c.plain(false);
  const FakeRun old_greedy = c.run(false, false);
  const FakeRun new_greedy = c.run(false, true);
  ASSERT_EQ(reply_tokens(new_greedy), reply_tokens(plain));
  EXPECT_GT(new_greedy.drafter_passes, 30);
  EXPECT_LT(new_greedy.ms, plain.ms * 0.7) << "plain " << plain.ms << " ms";
  // The same decisions: the greedy table and scale are untouched by the rule (the sampled timing's passes are the
  // load's, left out of the run).
  EXPECT_EQ(new_greedy.drafter_passes, old_greedy.drafter_passes);
  EXPECT_EQ(new_greedy.passes_by_depth, old_greedy.passes_by_depth);
  EXPECT_NEAR(new_greedy.ms, old_greedy.ms, 1e-6);
}

TEST(LanesPassModes, TheLoadTimeTimingTimesSampledPassesOnlyWhenPassesArePricedPerMode) {
  Case c;
  FakeTarget target(c.target);
  FakeDrafter drafter(c.drafter);
  LanesOptions options;
  options.pricing.pass_cost_per_mode = true;
  auto lanes = Lanes::create(target, &drafter, options, c.clock);
  ASSERT_TRUE(lanes.ok());
  const CostTables& tables = (*lanes)->pricing().tables();
  ASSERT_FALSE(tables.sampled_draft.empty());
  for (int depth : {1, 3, 6}) {
    EXPECT_NEAR(tables.sampled_draft.ms(1, depth), 8.0 * tables.draft.ms(1, depth), 1e-9) << "depth " << depth;
  }
  EXPECT_NEAR((*lanes)->pricing().draft_ms(1, 6, PassMode::Sampled), 8.0 * 5.2, 1e-9);
  options.pricing.pass_cost_per_mode = false;
  FakeTarget shared_target(c.target);
  FakeDrafter shared_drafter(c.drafter);
  auto shared = Lanes::create(shared_target, &shared_drafter, options, c.clock);
  ASSERT_TRUE(shared.ok());
  EXPECT_TRUE((*shared)->pricing().tables().sampled_draft.empty());
  EXPECT_NEAR((*shared)->pricing().draft_ms(1, 6, PassMode::Sampled), 5.2, 1e-9);
}

TEST(LanesPassModes, VerifiesWithSampledWindowsArePricedFromTheirOwnTable) {
  // A target that draws a sampled row 0.5 ms dearer than an argmax row: timed at load with sampled windows, a verify
  // of r rows with a sampled window is priced 0.5 ms x r dearer; greedy verifies as before; one table without it.
  Case c;
  c.target.sampled_row_ms = 0.5;
  FakeTarget target(c.target);
  FakeDrafter drafter(c.drafter);
  LanesOptions options;
  options.pricing.pass_cost_per_mode = true;
  auto lanes = Lanes::create(target, &drafter, options, c.clock);
  ASSERT_TRUE(lanes.ok());
  const Pricing& pricing = (*lanes)->pricing();
  for (int rows : {1, 4, 7, 16}) {
    const double greedy_ms = pricing.verify_ms(rows, PassMode::Greedy);
    EXPECT_NEAR(pricing.verify_ms(rows, PassMode::Sampled), greedy_ms + 0.5 * rows, 1e-9) << rows << " rows";
    EXPECT_NEAR(pricing.verify_ms(rows, PassMode::Greedy), 10.0 + 0.5 * rows, 1e-9) << rows << " rows";
  }
  options.pricing.pass_cost_per_mode = false;
  FakeTarget shared_target(c.target);
  FakeDrafter shared_drafter(c.drafter);
  auto shared = Lanes::create(shared_target, &shared_drafter, options, c.clock);
  ASSERT_TRUE(shared.ok());
  EXPECT_NEAR((*shared)->pricing().verify_ms(7, PassMode::Sampled), 10.0 + 0.5 * 7, 1e-9);
}

TEST(LanesPassModes, TwoSampledPassesFarAboveTheTableSetTheScaleOneOffsDoNot) {
  CostTables tables;
  const std::vector<TimedPoint> verify = {{1, 0, 1.0}, {64, 0, 2.0}};
  tables.verify.init(64, verify);
  const std::vector<TimedPoint> draft = {{1, 1, 0.5}, {1, 7, 0.5}, {4, 1, 0.5}, {4, 7, 0.5}};
  tables.draft.init(4, 7, draft);
  PricingOptions options;
  options.pass_cost_per_mode = true;
  Pricing pricing(tables, options, 64, true);
  // A one-off far above (a new shape's eager run), then a pass at the table: no jump.
  pricing.observe_draft(2, 7, 4.0, PassMode::Sampled);
  pricing.observe_draft(2, 7, 0.5, PassMode::Sampled);
  EXPECT_LT(pricing.draft_ms(2, 7, PassMode::Sampled), 1.5);
  // Two in a row at 8x and 6x: priced at least 6x at once; greedy passes untouched.
  pricing.observe_draft(3, 7, 4.0, PassMode::Sampled);
  pricing.observe_draft(1, 5, 3.0, PassMode::Sampled);
  EXPECT_GE(pricing.draft_ms(1, 7, PassMode::Sampled), 3.0);
  EXPECT_DOUBLE_EQ(pricing.draft_ms(1, 7, PassMode::Greedy), 0.5);
  // Without the rule every mode shares the greedy table and its slow moving average.
  options.pass_cost_per_mode = false;
  Pricing shared(tables, options, 64, true);
  shared.observe_draft(3, 7, 4.0, PassMode::Sampled);
  shared.observe_draft(1, 5, 3.0, PassMode::Sampled);
  EXPECT_LT(shared.draft_ms(1, 7, PassMode::Sampled), 2.0);
}

}  // namespace
}  // namespace ls
