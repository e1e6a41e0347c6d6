// Whole contexts where the prior pays well (lanes12, PricingOptions::whole_context_share with
// LanesOptions::scout_prompt_only off): every prompt is tapped only where the prior's round saves that share.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

// The scout alone (the eleventh session's default) against every prompt where the prior saves `share`.
LanesOptions scout_alone() {
  LanesOptions options;
  options.scout_prompt_only = true;
  return options;
}

LanesOptions whole(double share) {
  LanesOptions options;
  options.scout_prompt_only = false;
  options.pricing.whole_context_share = share;
  return options;
}

TEST(LanesWholeContext, FourStreamsWhereThePriorSavesMuchTapEveryPromptAndBeatTheScoutAlone) {
  // 4 nano-like streams of 256 tokens: with the scout alone the other three restart past their prompts and land 15 %
  // (0.90x of plain on these fakes); with every prompt tapped they draft over whole contexts.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(4, 256);
  const FakeRun scout = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, scout_alone());
  const FakeRun every = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, whole(0.15));
  ASSERT_EQ(reply_tokens(every), reply_tokens(scout));
  EXPECT_GT(scout.stats.drafter_restarts, 0);
  EXPECT_EQ(every.stats.drafter_restarts, 0);
  EXPECT_GE(every.stats.tap_rows, 4 * 64);
  EXPECT_GT(every.stats.drafts_accepted, 3 * scout.stats.drafts_accepted);
  EXPECT_LT(every.ms, 0.85 * scout.ms) << "scout alone " << scout.ms << " ms, every prompt " << every.ms << " ms";
}

TEST(LanesWholeContext, EightStreamsWhereThePriorSavesLittleKeepTheScoutAlone) {
  // 8 streams: the prior's round saves 10-15 % here; every prompt tapped drafts a group that does not pay (0.90x
  // against the scout's 0.95x). At a 15 % share only the scout taps, exactly as without the rule.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(8, 256);
  const FakeRun scout = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, scout_alone());
  const FakeRun share = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, whole(0.15));
  const FakeRun any = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, whole(0.0));
  ASSERT_EQ(reply_tokens(share), reply_tokens(scout));
  EXPECT_EQ(share.stats.tap_rows, scout.stats.tap_rows);
  EXPECT_EQ(share.stats.drafter_passes, scout.stats.drafter_passes);
  EXPECT_NEAR(share.ms, scout.ms, 1e-6 * scout.ms);
  EXPECT_GT(any.stats.tap_rows, 8 * 64);  // the old --admit all taps every prompt here
}

}  // namespace
}  // namespace ls
