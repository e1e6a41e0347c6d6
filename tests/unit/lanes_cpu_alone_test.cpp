// A/B rules of cpu20 for the lone CPU stream (off by default, lanes_bench --alone-whole / --calibration-start):
// LanesOptions::alone_keeps_context and PricingOptions::calibration_mean_start.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/chances.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions alone_whole(bool on) {
  LanesOptions options;
  options.alone_keeps_context = on;
  return options;
}

TEST(LanesCpuAlone, ALoneStreamOnACpuTargetKeepsItsContextWholeThroughRoundsThatBuyNothing) {
  // A drafter right half the time: pricing buys some rounds and not others, so the stream goes dormant between them
  // and each later probe restarts its context; with the rule it keeps tapping and never restarts.
  NanoLikeFakes pair = xeon_nano_pair();
  pair.drafter.wrong_rate = 0.5;
  pair.drafter.restarted_wrong_rate = 0.5;
  const RuleArms arms = run_rule_arms(pair, long_prompt_arrivals(pair, 1, 256), alone_whole(false), alone_whole(true));
  EXPECT_TRUE(arms.exact());
  EXPECT_GT(arms.off.stats.dormant_entries, 0);
  EXPECT_GT(arms.off.stats.drafter_restarts, 0);
  EXPECT_EQ(arms.on.stats.dormant_entries, 0);
  EXPECT_EQ(arms.on.stats.drafter_restarts, 0);
  EXPECT_GT(arms.on.stats.drafter_passes, 0);
}

TEST(LanesCpuAlone, TheRuleLeavesSeveralStreamsAndTargetsWithGraphsAsTheyWere) {
  for (bool cpu : {true, false}) {
    for (int streams : {1, 2}) {
      if (cpu && streams == 1) continue;  // the rule's own case (above)
      NanoLikeFakes pair = xeon_nano_pair();
      pair.target.cpu_pool = cpu;
      pair.target.verify_wide_row_ms = 0.0;  // rows as cheap as the first two: drafting pays at 2 streams too
      pair.drafter.wrong_rate = 0.4;
      pair.drafter.restarted_wrong_rate = 0.4;
      LanesOptions off = alone_whole(false);
      LanesOptions on = alone_whole(true);
      for (LanesOptions* options : {&off, &on}) options->pricing.explore_repay = 0;  // explore at any stream count
      const RuleArms arms = run_rule_arms(pair, long_prompt_arrivals(pair, streams, 256), off, on);
      EXPECT_TRUE(arms.exact());
      EXPECT_EQ(arms.on.stats.dormant_entries, arms.off.stats.dormant_entries) << cpu << " " << streams;
      EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-9 * arms.off.ms) << cpu << " " << streams;
    }
  }
}

TEST(LanesCpuAlone, TheCalibrationsMeanStartBelievesTheFirstOutcomes) {
  // An underconfident head (raw 0.4 a draft) whose drafts land: after three windows the running mean's scale is
  // near what was seen (1 / 0.4 = 2.5; counting the 0.5 / 0.5 start as one outcome, 3.5 / 1.7 = 2.06), the moving
  // average's at 1.5.
  ConfidenceCalibration ema;
  ConfidenceCalibration mean;
  mean.set_mean_start(true);
  const std::vector<float> raw = {0.4f};
  for (int window = 0; window < 3; ++window) {
    ema.observe(raw, 1, 0.15);
    mean.observe(raw, 1, 0.15);
  }
  EXPECT_NEAR(mean.scale(0), (0.5 + 3.0) / (0.5 + 3 * 0.4), 1e-6);
  EXPECT_LT(ema.scale(0), 1.6);
  // Past 1/(n+2) < rate, both move at the rate.
  ConfidenceCalibration late;
  late.set_mean_start(true);
  for (int window = 0; window < 40; ++window) late.observe(raw, 0, 0.15);
  ConfidenceCalibration late_ema;
  for (int window = 0; window < 40; ++window) late_ema.observe(raw, 0, 0.15);
  EXPECT_NEAR(late.scale(0), late_ema.scale(0), 0.01);
}

}  // namespace
}  // namespace ls
