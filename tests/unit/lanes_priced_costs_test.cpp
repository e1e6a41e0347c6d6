// The seventh session's pricing rules on fakes (lanes8): the batched absorb call priced, confidences for depths no
// verify reached, group probes on the probe budget. Each runs old vs new on one cost model.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "lanes/allocator.h"
#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

struct Outcome {
  double ms = 0;  // fixed-clock time from after setup to the end
  LanesStats stats;
  std::vector<Reply> replies;
  int64_t passes = 0;  // drafter passes after setup
};

Outcome run_lanes(FixedClock& clock, const FakeTargetOptions& target_options,
              const std::optional<FakeDrafterOptions>& drafter_options, const std::vector<Arrival>& arrivals,
              const LanesOptions& options) {
  FakeTarget target(target_options);
  std::optional<FakeDrafter> drafter;
  if (drafter_options) drafter.emplace(*drafter_options);
  auto lanes = Lanes::create(target, drafter ? &*drafter : nullptr, options, clock);
  EXPECT_TRUE(lanes.ok()) << lanes.status().to_string();
  Outcome run;
  if (!lanes.ok()) return run;
  const double start_ms = clock.now_ms();
  const int64_t setup_passes = drafter ? drafter->passes() : 0;
  auto replies = run_arrivals(**lanes, arrivals);
  EXPECT_TRUE(replies.ok());
  run.ms = clock.now_ms() - start_ms;
  run.stats = (*lanes)->stats();
  run.passes = drafter ? drafter->passes() - setup_passes : 0;
  if (replies.ok()) run.replies = *replies;
  return run;
}

std::vector<std::vector<int32_t>> tokens_of(const Outcome& run) {
  std::vector<std::vector<int32_t>> tokens;
  for (const Reply& reply : run.replies) tokens.push_back(reply.tokens);
  return tokens;
}

LanesOptions new_rules(bool on) {
  LanesOptions options;
  options.pricing.price_absorb_call = on;
  options.pricing.confidence_for_unexplored = on;
  options.pricing.budget_group_probes = on;
  options.pricing.bucket_verify_rows = on;
  return options;
}

TEST(LanesPricedCosts, ABatchedAbsorbCallDearerThanWhatDraftingGainsStopsDraftingOnlyWhenItIsPriced) {
  // One stream, taps on the device: a verify 10 ms + 0.5 ms a row, a pass 2 ms + 0.2 ms a draft row, and each
  // batched absorb call 30 ms (the nano pair on the H200 in miniature: a call is half a forward there). A drafting
  // round then costs about 45 ms for about 3.8 tokens against plain's 10.5 ms a token: drafting loses. Priced free
  // (the call's rows only), drafting runs on at a loss.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  target.device_taps = true;
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.2);
  drafter.device_taps = true;
  drafter.absorb_call_ms = 30.0;
  std::vector<Arrival> arrivals = endless_arrivals(1, target.shape.vocab_size, 300);
  Outcome plain = run_lanes(clock, target, std::nullopt, arrivals, LanesOptions{});
  LanesOptions old_options;
  LanesOptions new_options;
  new_options.pricing.price_absorb_call = true;
  Outcome old_run = run_lanes(clock, target, drafter, arrivals, old_options);
  Outcome new_run = run_lanes(clock, target, drafter, arrivals, new_options);
  ASSERT_EQ(tokens_of(old_run), tokens_of(plain));
  ASSERT_EQ(tokens_of(new_run), tokens_of(plain));
  EXPECT_GT(old_run.ms, plain.ms * 1.12) << "plain " << plain.ms << " ms, call priced free " << old_run.ms << " ms";
  // Within the probe budget (5%) and the two rounds a stream keeps tapping before it goes dormant.
  EXPECT_LT(new_run.ms, plain.ms * 1.09) << "plain " << plain.ms << " ms, call priced " << new_run.ms << " ms";
  EXPECT_LT(new_run.stats.absorb_calls * 5, old_run.stats.absorb_calls)
      << new_run.stats.absorb_calls << " calls priced vs " << old_run.stats.absorb_calls << " free";
}

TEST(LanesPricedCosts, WhereOnlyDeepWindowsPayAConfidentDrafterIsBoughtDeepWindowsOnlyWhenUnexploredDepthsReadTheConfidences) {
  // 16 streams; a verify 10 ms + 0.1 ms a row, a pass 20 ms (nearly flat in depth), the drafter right 90% of the time
  // and saying so. Priced with the fixed prior past the depths the scout's probe reached (0.60, 0.55, ... a
  // draft), no group round looks worth its pass; with the drafter's calibrated confidences there, 16 windows of 6
  // drafts at 90% each are: about 1.4x plain's tokens per ms.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.1, 128);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.1, 0.01);
  drafter.draft_fixed_ms = 20.0;
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(16, target.shape.vocab_size, 300);
  Outcome plain = run_lanes(clock, target, std::nullopt, arrivals, LanesOptions{});
  LanesOptions new_options;
  new_options.pricing.confidence_for_unexplored = true;
  LanesOptions old_options;
  old_options.pricing.confidence_for_unexplored = false;
  Outcome old_run = run_lanes(clock, target, drafter, arrivals, old_options);
  Outcome new_run = run_lanes(clock, target, drafter, arrivals, new_options);
  ASSERT_EQ(tokens_of(old_run), tokens_of(plain));
  ASSERT_EQ(tokens_of(new_run), tokens_of(plain));
  EXPECT_LT(new_run.ms, plain.ms * 0.85) << "plain " << plain.ms << " ms, confidences " << new_run.ms << " ms";
  EXPECT_LT(new_run.ms, old_run.ms * 0.9) << "prior " << old_run.ms << " ms, confidences " << new_run.ms << " ms";
}

TEST(LanesPricedCosts, AnUnderconfidentHeadDoesNotPriceUnexploredDepthsBelowThePrior) {
  // One stream; the drafter lands 90% of its drafts but its head reports 40%. The depths no verify has reached are
  // priced at the better of the prior and the calibrated confidences, so drafting starts as it does with the prior
  // (the DSpark nano pair's head is underconfident: priced at its confidences alone, its one-stream greedy win of
  // 1.63x fell to 0.86x in H200 batch s7A).
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.1);
  drafter.confidences = true;
  drafter.reported_wrong_rate = 0.6;
  drafter.draft_fixed_ms = 8.0;
  std::vector<Arrival> arrivals = endless_arrivals(1, target.shape.vocab_size, 300);
  Outcome plain = run_lanes(clock, target, std::nullopt, arrivals, LanesOptions{});
  LanesOptions prior_options;
  prior_options.pricing.confidence_for_unexplored = false;
  Outcome prior_run = run_lanes(clock, target, drafter, arrivals, prior_options);
  Outcome new_run = run_lanes(clock, target, drafter, arrivals, LanesOptions{});
  ASSERT_EQ(tokens_of(new_run), tokens_of(plain));
  ASSERT_GT(prior_run.stats.windows_with_drafts, 20);
  EXPECT_GE(new_run.stats.windows_with_drafts * 10, prior_run.stats.windows_with_drafts * 9)
      << "drafted windows: prior " << prior_run.stats.windows_with_drafts << ", new " << new_run.stats.windows_with_drafts;
  EXPECT_LT(new_run.ms, plain.ms * 0.8) << "plain " << plain.ms << " ms, new " << new_run.ms << " ms";
}

TEST(LanesPricedCosts, GroupProbesOfADrafterThatNeverLandsTakeAtMostTheProbeBudgetWhenTheyDrawOnIt) {
  // 16 streams where only the group pays (a verify 10 ms + 0.25 ms a row; a pass 20 ms + 0.05 ms a draft row), a
  // drafter that is always wrong: every group probe (a pass and its verify rows, ~22 ms against a 14 ms plain round)
  // is lost. On their doubling wait alone they run at rounds 8, 24, 56, ... whatever they cost.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.25, 128);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 1.0, 0.05);
  drafter.draft_fixed_ms = 20.0;
  std::vector<Arrival> arrivals = endless_arrivals(16, target.shape.vocab_size, 120);
  Outcome plain = run_lanes(clock, target, std::nullopt, arrivals, LanesOptions{});
  LanesOptions new_options;
  new_options.pricing.budget_group_probes = true;
  Outcome old_run = run_lanes(clock, target, drafter, arrivals, LanesOptions{});
  Outcome new_run = run_lanes(clock, target, drafter, arrivals, new_options);
  ASSERT_EQ(tokens_of(old_run), tokens_of(plain));
  ASSERT_EQ(tokens_of(new_run), tokens_of(plain));
  EXPECT_LT(new_run.passes, old_run.passes) << "passes: wait alone " << old_run.passes << ", budget " << new_run.passes;
  EXPECT_LT(new_run.ms, plain.ms * 1.06) << "plain " << plain.ms << " ms, budget " << new_run.ms << " ms (wait alone "
                                         << old_run.ms << " ms)";
}

TEST(LanesPricedCosts, WhereEachNewVerifyShapeCostsAOneOffBucketedTrimsUseFewerShapesAndRunFaster) {
  // 16 streams, a drafter right 80% of the time, and the first two forwards of every shape (total rows, windows) 20 ms
  // dearer (a CUDA target's eager run, then its graph capture): a trim free to pick any of 16..112 rows pays that again
  // and again.
  FixedClock clock;
  FakeTargetOptions target_options = costed_fake_target(clock, 10.0, 0.1, 128);
  target_options.new_shape_ms = 20.0;
  target_options.shape_by_windows = true;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.2, 0.05);
  drafter_options.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(16, target_options.shape.vocab_size, 120);
  size_t shapes[2] = {0, 0};
  double ms[2] = {0, 0};
  std::vector<std::vector<int32_t>> tokens[2];
  for (int bucketed = 0; bucketed < 2; ++bucketed) {
    FakeTarget target(target_options);
    FakeDrafter drafter(drafter_options);
    LanesOptions options;
    options.pricing.bucket_verify_rows = bucketed == 1;
    auto lanes = Lanes::create(target, &drafter, options, clock);
    ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
    const size_t setup_shapes = target.shapes_seen();
    const double start_ms = clock.now_ms();
    auto replies = run_arrivals(**lanes, arrivals);
    ASSERT_TRUE(replies.ok());
    ms[bucketed] = clock.now_ms() - start_ms;
    shapes[bucketed] = target.shapes_seen() - setup_shapes;
    for (const Reply& reply : *replies) tokens[bucketed].push_back(reply.tokens);
    EXPECT_GT((*lanes)->stats().drafts_accepted, 100) << "bucketed " << bucketed;
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_LT(shapes[1], shapes[0]) << "new shapes: free " << shapes[0] << ", bucketed " << shapes[1];
  EXPECT_LT(ms[1], ms[0]) << "free " << ms[0] << " ms, bucketed " << ms[1] << " ms";
}

TEST(LanesPricedCosts, BucketedExtraRowsArePowersOfTwoAndOneAndAHalfTimesThem) {
  std::vector<int> bucketed;
  for (int rows = 0; rows <= 64; ++rows) {
    if (bucketed_extra_rows(rows)) bucketed.push_back(rows);
  }
  EXPECT_EQ(bucketed, (std::vector<int>{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}));
  EXPECT_FALSE(bucketed_extra_rows(-1));
}

TEST(LanesPricedCosts, WithTheSeventhSessionsRulesEveryReplyEqualsItsRequestRunAlonePlainGreedyAndSampled) {
  for (bool sampled : {false, true}) {
    for (bool device : {false, true}) {
      FixedClock clock;
      FakeTargetOptions target_options = costed_fake_target(clock, 10.0, 0.5);
      target_options.device_taps = device;
      FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.2);
      drafter_options.device_taps = device;
      drafter_options.confidences = true;
      drafter_options.restarted_wrong_rate = 0.6;
      std::vector<Arrival> arrivals = staggered_arrivals(16, sampled, target_options.shape.vocab_size, 40);
      std::vector<Reply> alone = run_each_alone_plain(target_options, arrivals);
      FakeTarget target(target_options);
      FakeDrafter drafter(drafter_options);
      auto lanes = Lanes::create(target, &drafter, new_rules(true), clock);
      ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
      auto replies = run_arrivals(**lanes, arrivals);
      ASSERT_TRUE(replies.ok());
      ASSERT_EQ(replies->size(), alone.size());
      for (size_t index = 0; index < alone.size(); ++index) {
        EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index << " sampled " << sampled;
      }
      EXPECT_GT((*lanes)->stats().drafts_verified, 0) << "sampled " << sampled << " device " << device;
    }
  }
}

}  // namespace
}  // namespace ls
