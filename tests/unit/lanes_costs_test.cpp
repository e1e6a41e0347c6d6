// Pricing against what passes really cost: measured passes that exceed the load-time tables move them even when
// the pass shapes vary, and with a confidence head every pass asks the whole depth (few drafter graph shapes).
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/pricing.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

CostTables flat_tables() {
  CostTables tables;
  std::vector<TimedPoint> verify = {{1, 0, 1.0}, {64, 0, 1.0}};
  tables.verify.init(64, verify);
  std::vector<TimedPoint> draft = {{1, 1, 0.2}, {1, 7, 0.2}, {4, 1, 0.2}, {4, 7, 0.2}};
  tables.draft.init(4, 7, draft);
  return tables;
}

TEST(LanesCosts, PassesDearerThanTheTablesAtEveryShapeMoveTheTablesThoughNoShapeRepeatsThreeTimesInARow) {
  // The H200's nano pair with sampled requests: every pass cost 4-10x the load-time table, but the (streams, depth)
  // of consecutive passes kept changing, so no entry saw three outliers in a row and pricing never learned it.
  Pricing pricing(flat_tables(), PricingOptions{}, 64, true);
  const std::vector<std::pair<int, int>> shapes = {{1, 3}, {2, 5}, {3, 7}, {4, 2}, {1, 6}, {2, 4}, {3, 1}, {4, 7}};
  for (int round = 0; round < 2; ++round) {
    for (auto [streams, depth] : shapes) pricing.observe_draft(streams, depth, 1.0);
  }
  for (auto [streams, depth] : shapes) {
    EXPECT_GT(pricing.tables().draft.ms(streams, depth), 0.3) << streams << " streams, depth " << depth;
  }
}

TEST(LanesCosts, AOneOffSlowPassAmongFastOnesLeavesTheTablesAlone) {
  // One or two slow passes in a row (a new shape's eager run and capture) are still left out.
  Pricing pricing(flat_tables(), PricingOptions{}, 64, true);
  for (int round = 0; round < 6; ++round) {
    pricing.observe_draft(1 + round % 4, 7, 2.0);
    pricing.observe_draft(1 + round % 4, 7, 2.0);
    pricing.observe_draft(1 + round % 4, 7, 0.2);
  }
  for (int streams = 1; streams <= 4; ++streams) EXPECT_DOUBLE_EQ(pricing.tables().draft.ms(streams, 7), 0.2);
}

TEST(LanesCosts, AOneOffSlowAbsorbLeavesTheAbsorbCostsAloneAndThreeInARowMoveThem) {
  // The synth 1.2B on the H200 at 64 whole contexts (s14A): the first batched absorb of 64 streams' rows captured a
  // graph (9.9 ms against 0.29 after); taken as 64 rows' cost it priced every row at 12x and no pass was ever bought.
  CostTables tables = flat_tables();
  tables.absorb_call_ms = 0.165;
  tables.absorb_ms_per_row = 0.0027;
  Pricing pricing(tables, PricingOptions{}, 64, true);
  pricing.observe_absorb(64, 9.87);
  EXPECT_DOUBLE_EQ(pricing.absorb_ms(64), 0.165 + 0.0027 * 64);
  pricing.observe_absorb(64, 0.29);  // a fast one in between starts the count again
  pricing.observe_absorb(64, 9.87);
  pricing.observe_absorb(64, 9.87);
  EXPECT_LT(pricing.absorb_ms(64), 0.5);
  pricing.observe_absorb(64, 9.87);  // three in a row: what absorbs cost now
  EXPECT_GT(pricing.absorb_ms(64), 1.0);
}

TEST(LanesCosts, PassesSlowOneTimeInTwoArePricedAtTheirMeanCostUntilTheyStopComing) {
  // The H200's nano pair in a 64-token run at 16 streams: a CUDA drafter's first two passes of each new request
  // count run eagerly and capture a graph, so about one pass in two cost 4x the table; each was an outlier (never
  // three in a row), so the table kept the fast price and pricing drafted on at 0.52x of plain. The outliers'
  // excess now scales the priced pass, and fades once no pass is measured.
  Pricing pricing(flat_tables(), PricingOptions{}, 64, true);
  for (int round = 0; round < 20; ++round) {
    pricing.observe_draft(4, 7, 0.8);
    pricing.observe_draft(4, 7, 0.2);
  }
  EXPECT_DOUBLE_EQ(pricing.tables().draft.ms(4, 7), 0.2);  // the table itself keeps the fast price
  EXPECT_GT(pricing.draft_ms(4, 7), 0.4);
  EXPECT_LT(pricing.draft_ms(4, 7), 0.6);
  std::vector<Stream*> none;
  std::vector<int> caps;
  for (int decision = 0; decision < 300; ++decision) pricing.plan_depths(none, caps, 4);
  EXPECT_LT(pricing.draft_ms(4, 7), 0.21);
}

TEST(LanesCosts, AtSixteenStreamsADrafterThatPaysOnlyWhenEveryStreamDraftsIsFoundAndBought) {
  // Verifies of 10 ms + 0.5 ms a row, passes of 2 ms + 0.2 ms per stream and depth, every draft right: one stream
  // drafting alone among 16 cannot repay a pass, all 16 together can (the lanes bench's fake pair: 1.23x). Before,
  // the scout's probe was skipped because its stream alone could not pay even if always right, so the drafter was
  // never proven and 16 streams decoded plainly (1.00x).
  auto run = [](bool drafted) {
    FixedClock clock;
    FakeTargetOptions target_options;
    target_options.max_rows = 64;
    target_options.exact_width = 8;
    target_options.clock = &clock;
    FakeTarget target(target_options);
    FakeDrafterOptions drafter_options;
    drafter_options.max_depth = 7;
    drafter_options.wrong_rate = 0.0;
    drafter_options.clock = &clock;
    FakeDrafter drafter(drafter_options);
    auto lanes = Lanes::create(target, drafted ? &drafter : nullptr, LanesOptions{}, clock);
    EXPECT_TRUE(lanes.ok());
    const std::vector<Arrival> arrivals = endless_arrivals(16, 64, 256);
    const double start_ms = clock.now_ms();
    auto replies = run_arrivals(**lanes, arrivals);
    EXPECT_TRUE(replies.ok());
    return clock.now_ms() - start_ms;
  };
  const double plain_ms = run(false);
  const double drafted_ms = run(true);
  EXPECT_LT(drafted_ms * 1.15, plain_ms) << "plain " << plain_ms << " ms, drafted " << drafted_ms << " ms";
}

TEST(LanesCosts, WithAConfidenceHeadEveryDraftingStreamAsksItsWholeDepth) {
  // The trim cuts what the confidences doubt, so a pass asks the drafter's whole depth: one pass shape per stream
  // count (before: the bought depth + 2, a different CUDA graph per depth, each captured in the rounds).
  FixedClock clock;
  FakeTargetOptions target_options;
  target_options.max_rows = 64;
  target_options.exact_width = 8;
  target_options.clock = &clock;
  FakeTarget target(target_options);
  FakeDrafterOptions drafter_options;
  drafter_options.max_depth = 6;
  drafter_options.wrong_rate = 0.3;
  drafter_options.confidences = true;
  drafter_options.clock = &clock;
  FakeDrafter drafter(drafter_options);
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  const std::map<int, int64_t> setup = drafter.passes_by_depth();
  std::vector<Arrival> arrivals;
  for (int index = 0; index < 4; ++index) {
    Arrival arrival;
    arrival.request = make_fake_request(index, false, 64);
    arrival.request.max_tokens = 300;
    arrivals.push_back(arrival);
  }
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  int64_t passes = 0, full_depth = 0;
  for (auto [depth, count] : drafter.passes_by_depth()) {
    const int64_t run_count = count - (setup.count(depth) ? setup.at(depth) : 0);
    passes += run_count;
    if (depth == 6) full_depth += run_count;
  }
  ASSERT_GT(passes, 20);
  // Only the last rounds of a reply (fewer tokens left than the depth) ask less.
  EXPECT_GE(full_depth * 10, passes * 9) << full_depth << " of " << passes << " passes at the whole depth";
  EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
}

}  // namespace
}  // namespace ls
