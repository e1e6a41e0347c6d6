// Drafting rounds priced with what the verify after a pass costs (lanes14, PricingOptions::after_pass_priced): on a
// CPU the pass evicts the target's weights and the forward after it is dearer than its table, which the tables never
// see (those forwards are left out as slow outliers).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions after_pass(bool priced) {
  LanesOptions options;
  options.pricing.one_off_by_costs = true;
  options.pricing.price_depth_asked = true;
  options.pricing.after_pass_priced = priced;
  return options;
}

TEST(LanesAfterPass, TheLoadTimeTimingSeesTheEvictedForward) {
  CpuNanoLikeFakes pair;
  pair.target.evicted_forward_ms = 0.3;
  double timed_ms = -1;
  run_fakes(pair.clock, pair.target, pair.drafter, pair.arrivals(8), after_pass(true), [&](const Lanes& lanes) {
    timed_ms = lanes.pricing().tables().after_pass_ms;
  });
  EXPECT_NEAR(timed_ms, 0.3, 1e-9);
}

TEST(LanesAfterPass, WhereTheForwardAfterAPassEatsTheGainDraftingStopsAndCostsLess) {
  // The CPU-nano-like pair whose verify after a pass costs 0.3 ms more: a depth-2 round (0.61 ms verify + 0.25 ms
  // pass) beats plain's 0.53 ms a token at the tables, not with the evicted forward.
  CpuNanoLikeFakes pair;
  pair.target.evicted_forward_ms = 0.3;
  const std::vector<Arrival> arrivals = pair.arrivals(256);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, after_pass(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, after_pass(true));
  ASSERT_EQ(reply_tokens(old_rule), reply_tokens(plain));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(plain));
  EXPECT_GT(old_rule.ms, plain.ms) << "the tables' rule loses here: plain " << plain.ms << " ms";
  EXPECT_LT(2 * new_rule.drafter_passes, old_rule.drafter_passes)
      << "passes " << new_rule.drafter_passes << " against " << old_rule.drafter_passes;
  EXPECT_LT(new_rule.ms, old_rule.ms) << "plain " << plain.ms << " ms";
}

TEST(LanesAfterPass, WithoutEvictionItDraftsAsBefore) {
  CpuNanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(256);
  const FakeRun old_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, after_pass(false));
  const FakeRun new_rule = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, after_pass(true));
  ASSERT_EQ(reply_tokens(new_rule), reply_tokens(old_rule));
  EXPECT_GT(new_rule.drafter_passes, 20);
  EXPECT_EQ(new_rule.drafter_passes, old_rule.drafter_passes);
  EXPECT_NEAR(new_rule.ms, old_rule.ms, 1e-9 * old_rule.ms);
}

TEST(LanesAfterPass, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (bool sampled : {false, true}) {
    for (bool device : {false, true}) {
      const ExactnessRun run = run_exactness_case(sampled, device, sampled_any_streams(after_pass(true)));
      EXPECT_EQ(reply_tokens(run.drafted), run.alone) << "sampled " << sampled << " device " << device;
      EXPECT_GT(run.drafted.stats.drafts_verified, 0) << "sampled " << sampled << " device " << device;
    }
  }
}

}  // namespace
}  // namespace ls
