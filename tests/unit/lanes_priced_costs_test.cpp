// The seventh session's pricing rule on fakes (lanes8): confidences for depths no verify reached (the old rule,
// lanes_bench --deep-chances prior, removed in lanes17); and every reply exact with sampled passes at any width.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

TEST(LanesPricedCosts, WhereOnlyDeepWindowsPayAConfidentDrafterIsBoughtDeepWindows) {
  // 16 streams; a verify 10 ms + 0.1 ms a row, a pass 20 ms (nearly flat in depth), the drafter right 90% of the time
  // and saying so. Priced with the fixed prior past the depths the scout's probe reached (0.60, 0.55, ... a draft),
  // no group round looked worth its pass (lanes8); with the drafter's calibrated confidences there, 16 windows of 6
  // drafts at 90% each are: about 1.4x plain's tokens per ms.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.1, 128);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.1, 0.01);
  drafter.draft_fixed_ms = 20.0;
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(16, target.shape.vocab_size, 300);
  FakeRun plain = run_fakes(clock, target, std::nullopt, arrivals, sampled_any_streams());
  FakeRun run = run_fakes(clock, target, drafter, arrivals, sampled_any_streams());
  ASSERT_EQ(reply_tokens(run), reply_tokens(plain));
  EXPECT_LT(run.ms, plain.ms * 0.85) << "plain " << plain.ms << " ms, confidences " << run.ms << " ms";
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
  FakeRun plain = run_fakes(clock, target, std::nullopt, arrivals, sampled_any_streams());
  FakeRun run = run_fakes(clock, target, drafter, arrivals, sampled_any_streams());
  ASSERT_EQ(reply_tokens(run), reply_tokens(plain));
  EXPECT_GE(run.stats.windows_with_drafts, 50) << "drafted windows " << run.stats.windows_with_drafts;
  EXPECT_LT(run.ms, plain.ms * 0.8) << "plain " << plain.ms << " ms, drafted " << run.ms << " ms";
}

TEST(LanesPricedCosts, WithSampledPassesBoughtAtAnyWidthEveryReplyEqualsItsRequestRunAlonePlainGreedyAndSampled) {
  for (const std::string& inexact : inexact_cases(sampled_any_streams())) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
