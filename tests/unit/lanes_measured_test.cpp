// Pricing that sees real costs: the verify table is timed on rows that route like real ones, a batched absorb call
// is priced, and whole rounds that draft are measured against their price so costs no table sees stop drafting.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "base/hash.h"
#include "lanes/calibrate.h"
#include "lanes/lanes.h"
#include "lanes/pricing.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

TEST(LanesMeasured, TheVerifyTableIsTimedOnDistinctTokensSoAnMoeTargetsRoutingShows) {
  // An MoE target routes each token to its own experts: a 16-row window of distinct tokens reads up to 16 tokens'
  // experts. Timed on 16 copies of token 0 (before), the table priced the 8B's verify at 2.74-2.90 ms for 2-16 rows
  // where real drafted forwards took 4.99 ms.
  FixedClock clock;
  FakeTargetOptions options;
  options.shape.vocab_size = 1024;
  options.max_rows = 32;
  options.exact_width = 16;
  options.clock = &clock;
  options.verify_fixed_ms = 1.0;
  options.verify_row_ms = 0.0;
  options.distinct_token_ms = 0.5;
  FakeTarget target(options);
  CalibrationOptions calibration;
  calibration.max_rows = 32;
  calibration.width = 16;
  Result<CostTables> tables = time_costs(target, nullptr, clock, calibration);
  ASSERT_TRUE(tables.ok()) << tables.status().to_string();
  // At least 14 of 16 rows distinct (1 + 0.5 per distinct token); one repeated token would time 1.5 ms.
  EXPECT_GE(tables->verify.ms(16), 1.0 + 0.5 * 14) << tables->verify.ms(16);
  EXPECT_GE(tables->verify.ms(32), 1.0 + 0.5 * 28) << tables->verify.ms(32);
  EXPECT_LE(tables->verify.ms(1), 1.5);
}

CostTables paying_tables(double absorb_call_ms) {
  // Verify 1 ms flat up to 64 rows, a pass 0.2 ms: every stream drafting 4 sure drafts is 5x plain before absorbs.
  CostTables tables;
  std::vector<TimedPoint> verify = {{1, 0, 1.0}, {64, 0, 1.0}};
  tables.verify.init(64, verify);
  std::vector<TimedPoint> draft = {{1, 1, 0.2}, {1, 4, 0.2}, {4, 1, 0.2}, {4, 4, 0.2}};
  tables.draft.init(4, 4, draft);
  tables.absorb_call_ms = absorb_call_ms;
  tables.absorb_ms_per_row = 0.0;
  return tables;
}

TEST(LanesMeasured, ABatchedDeviceAbsorbCallIsPricedOnceForARoundThatDrafts) {
  // Taps on the device: one absorb call per forward whatever the number of drafting streams. Before, pricing
  // charged each stream only its rows' share, so a call dearer than the gain was never priced (the nano pair on the
  // H200: 0.12 ms and more a call against a 0.23 ms forward). The call is priced as measured on the device (the
  // load-time call is timed on the host path: 0.63 ms at 1 stream there), not before.
  PricingOptions options;
  options.depth_prior = {1.0, 1.0, 1.0, 1.0};
  options.measured_rounds = true;
  Pricing pricing(paying_tables(30.0), options, 64, false);
  pricing.set_batched_absorbs(true);
  EXPECT_TRUE(pricing.could_draft(4, 4));  // the host path's call is not the batched one
  // A first call that captured a graph (17.6 ms for 64 rows on the H200) is priced only until a faster one comes.
  pricing.observe_batched_absorb(8, 17.6);
  EXPECT_FALSE(pricing.could_draft(4, 4));
  pricing.observe_batched_absorb(8, 0.1);
  EXPECT_TRUE(pricing.could_draft(4, 4));
  EXPECT_NEAR(pricing.batched_absorb_ms(8), 0.1, 1e-9);
  // Dearer calls move the price only when three come in a row.
  pricing.observe_batched_absorb(8, 30.0);
  pricing.observe_batched_absorb(8, 30.0);
  EXPECT_NEAR(pricing.batched_absorb_ms(8), 0.1, 1e-9);
  pricing.observe_batched_absorb(8, 30.0);
  EXPECT_FALSE(pricing.could_draft(4, 4));
  // The fourth session's pricing (measured rounds off) does not see the call.
  options.measured_rounds = false;
  Pricing old(paying_tables(30.0), options, 64, false);
  old.set_batched_absorbs(true);
  old.observe_batched_absorb(8, 30.0);
  EXPECT_TRUE(old.could_draft(4, 4));
}

TEST(LanesMeasured, DraftingRoundsDearerThanPricedAndPlainRoundsAsPricedMakeDraftingDear) {
  PricingOptions options;
  options.measured_rounds = true;
  Pricing pricing(paying_tables(0.0), options, 64, false);
  EXPECT_DOUBLE_EQ(pricing.drafting_factor(), 1.0);
  for (int round = 0; round < 3; ++round) pricing.observe_round(true, 1.2, 3.6);
  // Three drafting rounds at 3x their price, each counted as 1.5x (a one-off capture must not stop drafting that
  // was priced to gain more than that), move the factor half way (0.2 a round): 1 + 0.5 (1 - 0.8^3).
  const double excess = 0.5 * (1.0 - 0.512);
  EXPECT_NEAR(pricing.drafting_factor(), 1.0 + excess, 1e-9);
  // Plain rounds as priced: the excess fades by 1% a plain round (a loss among one-off costs is retried on merit).
  for (int round = 0; round < 69; ++round) pricing.observe_round(false, 1.0, 1.0);
  EXPECT_NEAR(pricing.drafting_factor(), 1.0 + excess * std::pow(0.99, 69), 1e-9);
  // Plain rounds dearer than priced by the same factor cancel it (a slow host slows both alike).
  Pricing both(paying_tables(0.0), options, 64, false);
  for (int round = 0; round < 40; ++round) {
    both.observe_round(false, 1.0, 2.0);
    both.observe_round(true, 1.0, 2.0);
  }
  EXPECT_NEAR(both.drafting_factor(), 1.0, 1e-3);
}

struct ShapeRun {
  double ms = 0;
  LanesStats stats;
  std::vector<Reply> replies;
};

// 4 streams of 80 tokens on a target whose first two forwards of each row count cost 60 ms more than the table
// (a CUDA target runs a new shape eagerly, then captures its graph): the verify table leaves them out as one-offs.
ShapeRun new_shape_run(bool drafted, bool measured_rounds) {
  FixedClock clock;
  FakeTargetOptions target_options;
  target_options.max_rows = 64;
  target_options.exact_width = 8;
  target_options.clock = &clock;
  target_options.verify_fixed_ms = 10.0;
  target_options.verify_row_ms = 0.5;
  FakeTarget target(target_options);
  FakeDrafterOptions drafter_options;
  drafter_options.max_depth = 6;
  drafter_options.wrong_rate = 0.45;
  drafter_options.clock = &clock;
  FakeDrafter drafter(drafter_options);
  LanesOptions options;
  options.pricing.measured_rounds = measured_rounds;
  // The fifth session's trim (verify alone), which measured rounds were made against: the whole-round trim keeps
  // more rows, so old pricing loses less here (1874 against 2021 ms; plain 1146) and measured rounds gain less.
  options.pricing.trim_prices_pass = false;
  // Every decision repriced, as when measured rounds were made (quiet repricing, the default since lanes7, delays
  // wakings by up to 8 decisions: here measured rounds then keep 74 windows against 147, a hair over half).
  options.pricing.quiet_reprice_every = 1;
  auto lanes = Lanes::create(target, drafted ? &drafter : nullptr, options, clock);
  EXPECT_TRUE(lanes.ok());
  ShapeRun run;
  if (!lanes.ok()) return run;
  // From here on the shapes are new to the target (load-time timing ran on its own shapes, cheaply).
  target.set_new_shape_ms(60.0);
  const std::vector<Arrival> arrivals = endless_arrivals(4, 64, 80);
  const double start_ms = clock.now_ms();
  auto replies = run_arrivals(**lanes, arrivals);
  EXPECT_TRUE(replies.ok());
  run.ms = clock.now_ms() - start_ms;
  run.stats = (*lanes)->stats();
  if (replies.ok()) run.replies = *replies;
  return run;
}

TEST(LanesMeasured, WhenRoundsThatDraftCostMoreThanTheTablesSayDraftingStopsSooner) {
  // The nano pair on the H200 at 4-16 streams: real drafting rounds cost 1.5-3x what the load-time tables promised
  // (new shapes captured inside a short run among them), and pricing drafted on at 0.35-0.69x of plain.
  const ShapeRun plain = new_shape_run(false, true);
  const ShapeRun old_pricing = new_shape_run(true, false);
  const ShapeRun measured = new_shape_run(true, true);
  ASSERT_EQ(plain.replies.size(), measured.replies.size());
  for (size_t index = 0; index < plain.replies.size(); ++index) {
    EXPECT_EQ(plain.replies[index].tokens, measured.replies[index].tokens);
    EXPECT_EQ(plain.replies[index].tokens, old_pricing.replies[index].tokens);
  }
  // Without measured rounds the tables keep buying drafts and every new window shape pays its capture.
  EXPECT_GT(old_pricing.ms, plain.ms * 1.05) << "plain " << plain.ms << " ms, old pricing " << old_pricing.ms;
  // With them, drafting rounds measured at (up to 1.5x counted) their price make drafting dearer: it stops sooner
  // and the run loses less. It cannot reach plain here: every probe of a new window shape pays a 60 ms capture,
  // and a round's ratio is bounded so that one-off captures cannot stop drafting priced to gain more than 1.5x.
  EXPECT_LT(measured.ms, old_pricing.ms * 0.9) << "old " << old_pricing.ms << " ms, measured " << measured.ms;
  EXPECT_LT(measured.stats.windows_with_drafts * 2, old_pricing.stats.windows_with_drafts)
      << measured.stats.windows_with_drafts << " vs " << old_pricing.stats.windows_with_drafts;
}

}  // namespace
}  // namespace ls
