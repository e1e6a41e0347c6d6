// Pricing that sees real costs: the verify table is timed on rows that route like real ones. (Measured rounds and the
// batched absorb call they priced lost in H200 batch B at bda0938 and were removed in lanes15.)
#include <gtest/gtest.h>

#include "lanes/calibrate.h"
#include "lanes/testing/fake_target.h"

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

}  // namespace
}  // namespace ls
