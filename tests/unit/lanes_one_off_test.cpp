// The exploration gate's one-off priced at what it costs (lanes14, PricingOptions::one_off_by_costs): a target on the
// CPU captures no graphs, and the scout's probe verifies its forced draft, the trim buying the rest where they pay.
// Also the load-time pass table at depths 2 and 3 (CalibrationOptions::shallow_depths).
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions one_off(bool by_costs) {
  LanesOptions options;
  options.pricing.one_off_by_costs = by_costs;
  options.pricing.price_depth_asked = true;  // the pass asked at the depth bought: it grows with the depth
  return options;
}

TEST(LanesOneOff, OnTheCpuAShortStreamWhoseRoundsPayIsExploredOnlyWithTheOneOffItPays) {
  // 40 tokens: the prior's round (the pass asked at the depth bought) saves ~6.6 ms; the old one-off (two forwards of
  // capture, the whole chain's 7 verify rows, the prompt's absorb: 3.4 ms) times 3 is more, and so is either half of
  // the new one alone (no capture but 7 rows: 2.3 ms; 1 row but capture: 2.9 ms); what the CPU pays (1.9 ms) is not.
  CpuNanoLikeFakes pair;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(40), one_off(false), one_off(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_EQ(arms.off.drafter_passes, 0);
  EXPECT_GT(arms.on.drafter_passes, 5);
  EXPECT_LT(arms.on.ms, 0.97 * arms.plain.ms) << "plain " << arms.plain.ms << " ms, passes " << arms.on.drafter_passes
                                              << ", kept " << arms.on.stats.drafts_accepted << " of "
                                              << arms.on.stats.drafts_verified;
}

TEST(LanesOneOff, ATargetWithGraphsKeepsItsNewShapesInTheOneOff) {
  // The same costs on a target that captures graphs: the new shapes' two forwards stay in the one-off, which the
  // 40-token run's gain does not repay three times.
  CpuNanoLikeFakes pair;
  pair.target.cpu_pool = false;
  pair.target.new_shape_ms = 0.5;
  const FakeRun cpu_rule = run_fakes(pair.clock, pair.target, pair.drafter, pair.arrivals(40), one_off(true));
  EXPECT_EQ(cpu_rule.drafter_passes, 0);
}

TEST(LanesOneOff, ThePassTableTimesDepthsTwoAndThreeWhenAsked) {
  // A pass that costs half its fixed part up to depth 3 (a short block): timed at {1, 4, 7} the table interpolates
  // depths 2-3 toward depth 4's full price; timed at {1, 2, 3, 4, 7} they are what they cost.
  for (bool shallow : {false, true}) {
    CpuNanoLikeFakes pair;
    pair.drafter.short_block_depth = 3;
    LanesOptions options;
    options.calibration.shallow_depths = shallow;
    double depth3_ms = 0;
    run_fakes(pair.clock, pair.target, pair.drafter, pair.arrivals(8), options, [&](const Lanes& lanes) {
      depth3_ms = lanes.pricing().tables().draft.ms(1, 3);
    });
    const double short_ms = 0.5 * 0.15 + 0.05 * 3;
    if (shallow) {
      EXPECT_NEAR(depth3_ms, short_ms, 1e-9);
    } else {
      EXPECT_GT(depth3_ms, short_ms + 0.03);
    }
  }
}

TEST(LanesOneOff, EveryReplyEqualsItsRequestRunAlonePlain) {
  LanesOptions options = one_off(true);
  options.calibration.shallow_depths = true;
  for (const std::string& inexact : inexact_cases(options)) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
