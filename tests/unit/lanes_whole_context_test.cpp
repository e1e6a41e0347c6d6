// Whole contexts where the prior pays well (lanes12, PricingOptions::whole_context_share with
// LanesOptions::scout_prompt_only off): every prompt is tapped only where the prior's round saves that share. And
// whole contexts priced per stream count (lanes15, PricingOptions::whole_contexts_priced): where the prior's gain
// repays the scout's one-off, every other prompt's absorb and the group's first shapes.
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
  options.pricing.whole_contexts_priced = false;
  return options;
}

LanesOptions whole(double share) {
  LanesOptions options;
  options.scout_prompt_only = false;
  options.pricing.whole_contexts_priced = false;
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

LanesOptions priced(bool on) {
  LanesOptions options;
  options.pricing.whole_contexts_priced = on;
  return options;
}

// The nano-like fakes with the H200's verify past 32 rows (0.27 ms at 32, 0.44 at 48-64): what 8-16 streams' windows
// cost there.
void h200_wide_verify(NanoLikeFakes& pair) {
  pair.target.verify_wide_from = 32;
  pair.target.verify_wide_row_ms = 0.006;
}

TEST(LanesWholeContextPriced, FourStreamsTapEveryPromptWhereThePriorRepaysTheirAbsorbs) {
  // 4 nano-like streams of 256 tokens (s13final: whole contexts 1.40x against 0.94x scouted on the H200): the
  // prior's gain repays the scout's one-off and three more prompts' absorbs three times.
  NanoLikeFakes pair;
  h200_wide_verify(pair);
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(4, 256), priced(false), priced(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_GT(arms.off.stats.drafter_restarts, 0);
  EXPECT_EQ(arms.on.stats.drafter_restarts, 0);
  EXPECT_GE(arms.on.stats.tap_rows, 4 * 64);
  EXPECT_LT(arms.on.ms, 0.85 * arms.off.ms) << "scouted " << arms.off.ms << " ms, plain " << arms.plain.ms;
}

TEST(LanesWholeContextPriced, EightAndSixteenStreamsKeepTheScoutWhereThePriorCannotRepayEveryPrompt) {
  // The prior's best round at 8 streams saves ~7 % of plain's time there (3 ms of a 256-token run), which does not
  // repay three times the scout's one-off, seven more prompts and the group's first shapes; at 16 it saves nothing.
  for (int streams : {8, 16}) {
    NanoLikeFakes pair;
    h200_wide_verify(pair);
    const RuleArms arms = run_rule_arms(pair, pair.arrivals(streams, 256), priced(false), priced(true));
    ASSERT_TRUE(arms.exact());
    EXPECT_EQ(arms.on.stats.tap_rows, arms.off.stats.tap_rows) << streams;
    EXPECT_EQ(arms.on.drafter_passes, arms.off.drafter_passes) << streams;
    EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-6 * arms.off.ms) << streams;
  }
}

TEST(LanesWholeContextPriced, TheOtherPromptsAndTheGroupsFirstShapesAreInTheOneOff) {
  // 8 streams of 160 tokens on the flat-verify fakes: the prior's gain (~3.8 ms) repays three times the scout's own
  // one-off (0.6 ms), not with seven more prompts and the group's first verify and pass (1.9 ms in all).
  NanoLikeFakes pair;
  const RuleArms arms = run_rule_arms(pair, pair.arrivals(8, 160), priced(false), priced(true));
  ASSERT_TRUE(arms.exact());
  EXPECT_EQ(arms.on.stats.tap_rows, arms.off.stats.tap_rows);
  EXPECT_NEAR(arms.on.ms, arms.off.ms, 1e-6 * arms.off.ms);
}

TEST(LanesWholeContextPriced, EveryReplyEqualsItsRequestRunAlonePlain) {
  for (const std::string& inexact : inexact_cases(priced(true))) ADD_FAILURE() << inexact;
}

}  // namespace
}  // namespace ls
