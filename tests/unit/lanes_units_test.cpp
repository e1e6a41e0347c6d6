// Unit tests of the lane core's pieces: accept, the row allocator, cost tables, acceptance and calibration.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/accept.h"
#include "lanes/allocator.h"
#include "lanes/chances.h"
#include "lanes/cost_tables.h"

namespace ls {
namespace {

TEST(Accept, KeepsDraftsWhileTheyEqualTheDrawsAndTakesTheBonusAtTheFirstMismatch) {
  // The worked example of accept.h: window [p, d1, d2, d3], d1 and d2 match, d3 does not.
  std::vector<int32_t> window = {7, 11, 12, 13};
  std::vector<int32_t> draws = {11, 12, 40, 41};
  Accepted accepted = accept_window(window, draws);
  EXPECT_EQ(accepted.drafts_kept, 2);
  EXPECT_EQ(accepted.rows_kept(), 3);
  EXPECT_EQ(accepted.bonus, 40);
  EXPECT_EQ(accepted_tokens(window, accepted), (std::vector<int32_t>{11, 12, 40}));
  // A later draft equal to its draw does not count after a mismatch.
  window = {7, 99, 12};
  draws = {11, 12, 5};
  accepted = accept_window(window, draws);
  EXPECT_EQ(accepted.drafts_kept, 0);
  EXPECT_EQ(accepted_tokens(window, accepted), (std::vector<int32_t>{11}));
  // Every draft lands: the bonus is the draw after the last draft.
  window = {7, 11, 12};
  draws = {11, 12, 13};
  EXPECT_EQ(accepted_tokens(window, accept_window(window, draws)), (std::vector<int32_t>{11, 12, 13}));
}

TEST(Allocator, BuysTheHighestChancesFirstAndStopsWhereTheRateIsBest) {
  // Two streams; costs 10 ms + 1 ms per row. Chances: stream 0 [0.9, 0.8, 0.1], stream 1 [0.7].
  std::vector<RowOffer> offers(2);
  offers[0].chances = {0.9f, 0.8f, 0.1f};
  offers[1].chances = {0.7f};
  auto cost = [](int rows, int, int) { return 10.0 + rows; };
  // Rates: 2/12, 2.9/13, 3.7/14, 4.4/15 = 0.2933, 4.5/16 = 0.281: the best buys 0.9, 0.8, 0.7.
  Allocation allocation = allocate_rows(offers, 64, cost, 1.0);
  EXPECT_EQ(allocation.extra_rows, (std::vector<int>{2, 1}));
  EXPECT_EQ(allocation.total_rows, 5);
  EXPECT_NEAR(allocation.expected_tokens, 4.4, 1e-6);
  // The row budget caps the purchase.
  allocation = allocate_rows(offers, 3, cost, 1.0);
  EXPECT_EQ(allocation.extra_rows, (std::vector<int>{1, 0}));
}

TEST(Allocator, ZeroDraftsWinsWhenRowsCostMoreThanTheyBring) {
  std::vector<RowOffer> offers(1);
  offers[0].chances = {0.3f, 0.1f};
  auto cost = [](int rows, int, int) { return 1.0 + 2.0 * rows; };  // 1/3 = 0.333 vs 1.3/5 = 0.26
  EXPECT_EQ(allocate_rows(offers, 64, cost, 1.0).extra_rows, (std::vector<int>{0}));
  // A margin keeps plain unless drafting beats it by the factor.
  offers[0].chances = {0.75f};
  auto cheap = [](int rows, int, int) { return 10.0 + rows; };  // 1/11 = 0.0909 vs 1.75/12 = 0.1458
  EXPECT_EQ(allocate_rows(offers, 64, cheap, 1.0).extra_rows, (std::vector<int>{1}));
  EXPECT_EQ(allocate_rows(offers, 64, cheap, 1.7).extra_rows, (std::vector<int>{0}));
}

TEST(CostTables, VerifyCostsInterpolateAndStayMonotoneUnderObservations) {
  VerifyCosts costs;
  std::vector<TimedPoint> timed = {{1, 0, 10.0}, {4, 0, 13.0}, {8, 0, 21.0}};
  costs.init(8, timed);
  EXPECT_DOUBLE_EQ(costs.ms(1), 10.0);
  EXPECT_DOUBLE_EQ(costs.ms(2), 11.0);
  EXPECT_DOUBLE_EQ(costs.ms(6), 17.0);
  EXPECT_DOUBLE_EQ(costs.ms(10), 25.0);  // past the table: the last slope
  costs.observe(4, 30.0, 1.0);           // a slow measurement at 4 rows raises 5 .. 8 with it
  for (int rows = 2; rows <= 8; ++rows) EXPECT_GE(costs.ms(rows), costs.ms(rows - 1)) << rows;
  EXPECT_DOUBLE_EQ(costs.ms(5), 30.0);
  costs.observe(6, 5.0, 1.0);  // a fast one at 6 lowers 1 .. 5 with it
  for (int rows = 2; rows <= 8; ++rows) EXPECT_GE(costs.ms(rows), costs.ms(rows - 1)) << rows;
  EXPECT_DOUBLE_EQ(costs.ms(1), 5.0);
  costs.observe(3, 9.0, 0.5);  // moving average: halfway from 5 to 9
  EXPECT_DOUBLE_EQ(costs.ms(3), 7.0);
}

TEST(CostTables, ASlowMeasurementMakesWiderRowsDearOnlyUntilItsOwnRowIsMeasuredFastAgain) {
  // A CUDA target's first forward of a new shape is slow (eager launches, graph capture). Wider rows that priced
  // dear because of it are not bought again to be re-measured, so they must follow their narrower row back down.
  VerifyCosts verify;
  std::vector<TimedPoint> flat = {{1, 0, 10.0}, {8, 0, 10.0}};
  verify.init(8, flat);
  verify.observe(4, 30.0, 1.0);
  EXPECT_DOUBLE_EQ(verify.ms(8), 30.0);
  verify.observe(4, 10.0, 1.0);
  for (int rows = 1; rows <= 8; ++rows) EXPECT_DOUBLE_EQ(verify.ms(rows), 10.0) << rows;
  DraftCosts draft;
  std::vector<TimedPoint> timed = {{1, 1, 2.0}, {1, 8, 2.0}, {4, 1, 2.0}, {4, 8, 2.0}};
  draft.init(4, 8, timed);
  draft.observe(1, 3, 9.0, 1.0);
  EXPECT_DOUBLE_EQ(draft.ms(1, 8), 9.0);
  EXPECT_DOUBLE_EQ(draft.ms(4, 3), 9.0);
  draft.observe(1, 3, 2.0, 1.0);
  EXPECT_DOUBLE_EQ(draft.ms(1, 8), 2.0);
  EXPECT_DOUBLE_EQ(draft.ms(4, 9), 2.0);
}

TEST(CostTables, DraftCostsInterpolateBilinearlyAndStayMonotone) {
  DraftCosts costs;
  std::vector<TimedPoint> timed;
  for (int streams : {1, 4, 16}) {
    for (int depth : {1, 8}) timed.push_back({streams, depth, 1.0 + 0.5 * streams * depth});
  }
  costs.init(16, 8, timed);
  for (int streams = 1; streams <= 16; ++streams) {
    for (int depth = 1; depth <= 8; ++depth) {
      EXPECT_NEAR(costs.ms(streams, depth), 1.0 + 0.5 * streams * depth, 1e-9) << streams << "x" << depth;
    }
  }
  EXPECT_EQ(costs.ms(0, 3), 0.0);
  costs.observe(2, 2, 100.0, 1.0);
  for (int streams = 1; streams <= 16; ++streams) {
    for (int depth = 1; depth <= 8; ++depth) {
      if (streams > 1) {
        EXPECT_GE(costs.ms(streams, depth), costs.ms(streams - 1, depth));
      }
      if (depth > 1) {
        EXPECT_GE(costs.ms(streams, depth), costs.ms(streams, depth - 1));
      }
    }
  }
  EXPECT_DOUBLE_EQ(costs.ms(3, 5), 100.0);
}

TEST(Chances, AcceptanceByDepthMovesOnlyTheDepthsARoundReached) {
  AcceptanceByDepth acceptance;
  std::vector<double> prior = {0.5, 0.5, 0.5, 0.5};
  acceptance.reset(prior);
  acceptance.observe(3, 1, 0.5);  // draft 1 landed, draft 2 missed, draft 3 never reached
  EXPECT_DOUBLE_EQ(acceptance.conditional(0), 0.75);
  EXPECT_DOUBLE_EQ(acceptance.conditional(1), 0.25);
  EXPECT_DOUBLE_EQ(acceptance.conditional(2), 0.5);
  std::vector<float> chain = acceptance.chain(3);
  EXPECT_FLOAT_EQ(chain[0], 0.75f);
  EXPECT_FLOAT_EQ(chain[1], 0.75f * 0.25f);
  EXPECT_FLOAT_EQ(chain[2], 0.75f * 0.25f * 0.5f);
}

TEST(Chances, CalibrationLowersConfidencesThatOverpromise) {
  ConfidenceCalibration calibration(4);
  std::vector<float> raw = {0.9f, 0.81f};  // conditional 0.9, 0.9
  std::vector<float> before = calibration.calibrate(raw);
  EXPECT_NEAR(before[1], 0.81f, 1e-6);
  for (int round = 0; round < 200; ++round) calibration.observe(raw, 1, 0.05);  // depth 2 never lands
  std::vector<float> after = calibration.calibrate(raw);
  EXPECT_GT(after[0], 0.85f);
  EXPECT_LT(after[1], after[0] * 0.2f);
  EXPECT_LE(after[1], after[0]);
}

}  // namespace
}  // namespace ls
