// Sampled passes timed at load like greedy ones (lanes12, CalibrationOptions::sampled_repeats_as_greedy): a drafter
// that captures a pass shape's graph at its second sighting must not have the capture priced into every sampled pass.
#include <gtest/gtest.h>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

// The pricing tables of lanes created on a drafter whose sampled passes cost what greedy ones do (2 ms + 0.2 ms a
// draft row) and whose every pass shape costs 5 ms more at its second sighting.
CostTables tables_with(bool sampled_repeats_as_greedy) {
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.2);
  drafter_options.capture_ms = 5.0;
  FakeDrafter drafter(drafter_options);
  LanesOptions options;
  options.calibration.sampled_repeats_as_greedy = sampled_repeats_as_greedy;
  auto lanes = Lanes::create(target, &drafter, options, clock);
  EXPECT_TRUE(lanes.ok()) << lanes.status().to_string();
  return lanes.ok() ? (*lanes)->pricing().tables() : CostTables{};
}

TEST(LanesSampledTiming, ASampledPassIsTimedAtItsSteadyCostNotAtItsGraphCapture) {
  const CostTables once = tables_with(false);
  const CostTables repeated = tables_with(true);
  ASSERT_FALSE(once.sampled_draft.empty());
  ASSERT_FALSE(repeated.sampled_draft.empty());
  const int depth = repeated.draft.max_depth();
  for (int streams : {1, 4}) {
    const double greedy_ms = repeated.draft.ms(streams, depth);
    EXPECT_NEAR(once.draft.ms(streams, depth), greedy_ms, 1e-9);  // greedy passes: the fastest of three already
    // One timed run after the untimed one is the capture: 5 ms on a 2-3 ms pass.
    EXPECT_GT(once.sampled_draft.ms(streams, depth), greedy_ms + 4.0) << streams;
    EXPECT_NEAR(repeated.sampled_draft.ms(streams, depth), greedy_ms, 1e-9) << streams;
  }
}

}  // namespace
}  // namespace ls
