// Pricing on fakes with a fixed-clock cost model: drafts are bought where they pay, never where they do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

std::vector<Arrival> long_requests(int streams, int max_tokens) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.request = make_fake_request(index, false, 64);
    arrival.request.max_tokens = max_tokens;
    arrivals.push_back(arrival);
  }
  return arrivals;
}

TEST(LanesPricing, AnAlwaysWrongDrafterStopsBuyingDraftsAndKeepsPlainThroughput) {
  FixedClock clock;
  std::vector<Arrival> arrivals = long_requests(4, 400);
  FakeRun plain = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), std::nullopt, arrivals);
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), costed_fake_drafter(clock, 1.0), arrivals);
  ASSERT_EQ(plain.tokens, drafted.tokens);
  EXPECT_EQ(drafted.stats.drafts_accepted, 0);
  // Throughput within 3% of plain: a few early rounds pay for the prior, then only sparse probes.
  EXPECT_LT(drafted.ms, plain.ms * 1.03) << "plain " << plain.ms << " ms, drafted " << drafted.ms << " ms";
  // Verify rounds with drafts are a small minority: the first probes and the doubling backoff probes.
  EXPECT_LT(drafted.stats.windows_with_drafts * 20, drafted.stats.windows_verified)
      << drafted.stats.windows_with_drafts << " of " << drafted.stats.windows_verified;
  // Drafting that does not pay costs nothing: every drafter pass led to verified drafts.
  EXPECT_LE(drafted.drafter_passes, drafted.stats.windows_with_drafts);
}

TEST(LanesPricing, AlwaysDraftBuysEveryDraftOfAnAlwaysWrongDrafterAndKeepsTheTokens) {
  // Pricing would stop buying (the test above); always_draft (tests, --draft-always) keeps verifying full windows.
  FixedClock clock;
  std::vector<Arrival> arrivals = long_requests(2, 120);
  FakeRun plain = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), std::nullopt, arrivals);
  LanesOptions options;
  options.pricing.always_draft = true;
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), costed_fake_drafter(clock, 1.0), arrivals, options);
  ASSERT_EQ(plain.tokens, drafted.tokens);
  for (size_t i = 0; i < plain.replies.size(); ++i) EXPECT_EQ(plain.replies[i].tokens, drafted.replies[i].tokens);
  EXPECT_EQ(drafted.stats.drafts_accepted, 0);
  // Every decode window carries drafts (all but the prompt windows).
  EXPECT_GT(drafted.stats.windows_with_drafts * 10, drafted.stats.windows_verified * 9)
      << drafted.stats.windows_with_drafts << " of " << drafted.stats.windows_verified;
}

TEST(LanesPricing, AnAlwaysRightDrafterIsBoughtUpToTheCostOptimalDepth) {
  // With every draft landing and linear costs, the rate (d + 1) / (a + b (d + 1) + c + e d) grows with d: the
  // optimum is the deepest window the pair allows, 6 drafts (drafter depth 6, exact width 8).
  FixedClock clock;
  std::vector<Arrival> arrivals = long_requests(1, 600);
  FakeRun plain = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), std::nullopt, arrivals);
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), costed_fake_drafter(clock, 0.0), arrivals);
  ASSERT_EQ(plain.tokens, drafted.tokens);
  const int64_t full_windows = drafted.windows_by_drawn_rows[7];
  EXPECT_GT(full_windows * 10, drafted.stats.windows_verified * 9)
      << full_windows << " of " << drafted.stats.windows_verified << " windows verified 6 drafts";
  EXPECT_EQ(drafted.windows_by_drawn_rows.rbegin()->first, 7);  // never wider than the exact width allows
  EXPECT_LT(drafted.ms * 4, plain.ms) << "plain " << plain.ms << " ms, drafted " << drafted.ms << " ms";
}

TEST(LanesPricing, APartlyRightDrafterSettlesNearTheAnalyticOptimalDepth) {
  // Per-row verify cost is high (CPU-like): a = 5, b = 1, c = 0.5, e = 0.25, conditional acceptance 0.8.
  // E(d) = sum_{j<=d} 0.8^j; rate(d) = E(d) / (a + b (d + 1) + c + e d): d = 0 .. 6 give
  // 0.167, 0.232, 0.271, 0.288, 0.292, 0.289, 0.282 tokens / ms, so the optimum is 4 with 3 .. 5 within 1.5%.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  target.verify_fixed_ms = 5.0;
  target.verify_row_ms = 1.0;
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.2);
  drafter.draft_fixed_ms = 0.5;
  drafter.draft_row_ms = 0.25;
  std::vector<Arrival> arrivals = long_requests(1, 3000);
  FakeRun plain = run_fakes(clock, target, std::nullopt, arrivals);
  FakeRun drafted = run_fakes(clock, target, drafter, arrivals);
  ASSERT_EQ(plain.tokens, drafted.tokens);
  const double mean_drafts =
      static_cast<double>(drafted.stats.drafts_verified) / static_cast<double>(drafted.stats.windows_verified);
  EXPECT_GE(mean_drafts, 2.5);
  EXPECT_LE(mean_drafts, 5.5);
  const double rate = static_cast<double>(drafted.tokens) / drafted.ms;
  EXPECT_GT(rate, 0.292 * 0.9) << "tokens per ms " << rate << ", mean drafts " << mean_drafts;
  EXPECT_LT(drafted.ms, plain.ms);
}

TEST(LanesPricing, ConfidencesSayingPositionKIsHopelessKeepRowsPastKUnbought) {
  FixedClock clock;
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.0);
  drafter.confidences = true;
  drafter.hopeless_from = 2;  // drafts 3 .. 6 are always wrong and their confidence says 0.01
  std::vector<Arrival> arrivals = long_requests(2, 300);
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), drafter, arrivals);
  EXPECT_EQ(drafted.windows_by_drawn_rows.rbegin()->first, 3) << "a window verified a draft past position 2";
  EXPECT_GT(drafted.windows_by_drawn_rows[3] * 10, drafted.stats.windows_verified * 8);
}

TEST(LanesPricing, AStreamPricedToZeroProbesAgainAfterADoublingWait) {
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafter drafter(costed_fake_drafter(clock, 1.0));
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  Request request = make_fake_request(0, false, 64);
  request.max_tokens = 700;
  (*lanes)->submit(request);
  std::vector<int> pass_rounds;
  for (int round = 0; !(*lanes)->idle(); ++round) {
    const int64_t before = drafter.passes();
    ASSERT_TRUE((*lanes)->round().ok());
    if (drafter.passes() > before) pass_rounds.push_back(round);
  }
  std::vector<int> gaps;
  for (size_t index = 1; index < pass_rounds.size(); ++index) gaps.push_back(pass_rounds[index] - pass_rounds[index - 1]);
  // After the prior is spent, probes come after waits of 16, 32, 64, 128, then every 128 rounds.
  const std::vector<int> waits = {16, 32, 64, 128};
  auto doubling = std::search(gaps.begin(), gaps.end(), waits.begin(), waits.end());
  ASSERT_NE(doubling, gaps.end()) << testing::PrintToString(gaps);
  for (auto gap = doubling + 4; gap != gaps.end(); ++gap) EXPECT_EQ(*gap, 128) << testing::PrintToString(gaps);
  EXPECT_GE(gaps.end() - doubling, 6);
}

TEST(LanesPricing, NoDrafterPassRunsWhenNoStreamMayDraft) {
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafter drafter(costed_fake_drafter(clock, 0.0));
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  const int64_t setup_passes = drafter.passes();
  std::vector<Arrival> arrivals = long_requests(3, 50);
  for (Arrival& arrival : arrivals) arrival.request.max_draft = 0;
  ASSERT_TRUE(run_arrivals(**lanes, arrivals).ok());
  EXPECT_EQ(drafter.passes(), setup_passes);
  EXPECT_EQ((*lanes)->stats().drafts_verified, 0);
}

TEST(LanesPricing, LoadTimingRecoversTheFakeCostModel) {
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafter drafter(costed_fake_drafter(clock, 0.0));
  LanesOptions options;
  options.max_streams = 16;
  auto lanes = Lanes::create(target, &drafter, options, clock);
  ASSERT_TRUE(lanes.ok());
  const CostTables& tables = (*lanes)->pricing().tables();
  for (int rows = 1; rows <= 64; ++rows) EXPECT_DOUBLE_EQ(tables.verify.ms(rows), 10.0 + 0.5 * rows) << rows;
  for (int streams = 1; streams <= 16; ++streams) {
    for (int depth = 1; depth <= 6; ++depth) {
      EXPECT_NEAR(tables.draft.ms(streams, depth), 2.0 + 0.2 * streams * depth, 1e-9) << streams << "x" << depth;
    }
  }
}

TEST(LanesPricing, LoadTimingRecoversTheFakeAbsorbCostAsACallPlusRows) {
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.0);
  drafter_options.absorb_call_ms = 0.7;
  drafter_options.absorb_row_ms = 0.05;
  FakeDrafter drafter(drafter_options);
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  const CostTables& tables = (*lanes)->pricing().tables();
  EXPECT_NEAR(tables.absorb_call_ms, 0.7, 1e-9);
  EXPECT_NEAR(tables.absorb_ms_per_row, 0.05, 1e-9);
  EXPECT_NEAR(tables.absorb_ms(192), 0.7 + 0.05 * 192, 1e-9);
  // The pass table holds the pass alone (the fake's absorbs advance the same clock).
  EXPECT_NEAR(tables.draft.ms(1, 1), 2.0 + 0.2, 1e-9);
}

// Long prompts: the first drafting round makes the drafter catch up on the whole prompt.
std::vector<Arrival> long_prompt_requests(int streams, int prompt_tokens, int max_tokens) {
  std::vector<Arrival> arrivals = long_requests(streams, max_tokens);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    std::vector<int32_t>& prompt = arrivals[index].request.prompt;
    while (static_cast<int>(prompt.size()) < prompt_tokens) prompt.push_back((prompt.size() * 7 + index) % 64);
  }
  return arrivals;
}

TEST(LanesPricing, AOneOffCatchUpAbsorbDoesNotMoveThePerPassDrafterCost) {
  // A 200-row catch-up costs 40 ms here, 20 drafter passes: counted as pass time it would make drafting look
  // dear for the rest of the reply. Every observed pass is the fake's exact 2 + 0.2 * depth, so the table
  // must still say so at the end, and the absorb costs must still be the fake's.
  FixedClock clock;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.0);
  drafter_options.absorb_call_ms = 0.1;
  drafter_options.absorb_row_ms = 0.2;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafter drafter(drafter_options);
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  auto replies = run_arrivals(**lanes, long_prompt_requests(1, 200, 120));
  ASSERT_TRUE(replies.ok());
  const LanesStats& stats = (*lanes)->stats();
  EXPECT_GT(stats.drafter_passes, 5);
  EXPECT_GT(stats.drafts_accepted * 10, stats.drafts_verified * 9);
  const CostTables& tables = (*lanes)->pricing().tables();
  for (int depth = 1; depth <= 6; ++depth) {
    EXPECT_NEAR(tables.draft.ms(1, depth), 2.0 + 0.2 * depth, 1e-9) << "depth " << depth;
  }
  EXPECT_NEAR(tables.absorb_call_ms, 0.1, 1e-9);
  EXPECT_NEAR(tables.absorb_ms_per_row, 0.2, 1e-9);
}

TEST(LanesPricing, UntilADraftIsVerifiedOnlyOneStreamPaysItsCatchUpAbsorb) {
  FixedClock clock;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.0);
  drafter_options.absorb_row_ms = 0.01;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafter drafter(drafter_options);
  // One pool for every stream: the restarted streams wake together.
  LanesOptions options;
  options.scout_prompt_only = true;  // the scout rule under test, not whole contexts where the prior pays
  options.pricing.whole_contexts_priced = false;
  auto lanes = Lanes::create(target, &drafter, options, clock);
  ASSERT_TRUE(lanes.ok());
  for (Arrival& arrival : long_prompt_requests(4, 40, 200)) (*lanes)->submit(arrival.request);
  const int64_t setup_requests = drafter.requests();
  const int64_t setup_absorbs = drafter.absorbs();
  const int64_t setup_absorbed_rows = drafter.absorbed_rows();
  ASSERT_TRUE((*lanes)->round().ok());  // prefill, verify the first pending rows, the first drafting decision
  EXPECT_EQ(drafter.requests() - setup_requests, 1);
  EXPECT_EQ(drafter.absorbs() - setup_absorbs, 1);
  // Once that stream's drafts were verified (and all landed), the others are bought drafts on merit: they never
  // tapped their prompts, so they wake (tap this round) and draft from the next, over a restarted context.
  ASSERT_TRUE((*lanes)->round().ok());
  EXPECT_EQ(drafter.requests() - setup_requests, 1 + 1);
  ASSERT_TRUE((*lanes)->round().ok());
  EXPECT_EQ(drafter.requests() - setup_requests, 1 + 1 + 4);
  EXPECT_EQ(drafter.absorbs() - setup_absorbs, 1 + 1 + 4);  // the scout's kept rows twice, the others' last rows
  EXPECT_EQ(drafter.restarts(), 4);  // the scout's too: it explores over a restarted context (lanes17)
  // A few kept rows: no prompt (40 rows each) was absorbed.
  EXPECT_LT(drafter.absorbed_rows() - setup_absorbed_rows, 40 + 20);
}

TEST(LanesPricing, WhileNothingIsKnownAboutTheDrafterTheScoutProbesAtItsFirstDecision) {
  // A 15 ms pass: the prior's chances do not buy drafts (2.5 tokens for 27 ms against 1 token for 10.5 ms), but
  // an always-right drafter would (7 tokens for 30 ms): the scout probes at once instead of after 8 rounds.
  FixedClock clock;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.0);
  drafter_options.draft_fixed_ms = 15.0;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafter drafter(drafter_options);
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  for (Arrival& arrival : long_prompt_requests(2, 40, 200)) (*lanes)->submit(arrival.request);
  const int64_t setup_requests = drafter.requests();
  ASSERT_TRUE((*lanes)->round().ok());
  EXPECT_EQ(drafter.requests() - setup_requests, 1);
}

TEST(LanesPricing, ADrafterThatCannotPayEvenIfAlwaysRightIsNotRunToProbeBeforeTheLongestWait) {
  // A pass costs 80 ms against a 10 ms + 0.5 ms/row verify: even 6 landed drafts per stream for all 8 streams at
  // once cannot repay it (56 tokens in 38 + 89.6 ms against 8 in 14 ms). Probes that only re-measure the cost come
  // after waits of 8 + 16 + 32 + 64 + 128 decisions; 200 tokens end first.
  FixedClock clock;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.0);
  drafter_options.draft_fixed_ms = 80.0;
  std::vector<Arrival> arrivals = long_prompt_requests(8, 40, 200);
  FakeRun plain = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), std::nullopt, arrivals);
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), drafter_options, arrivals);
  ASSERT_EQ(plain.tokens, drafted.tokens);
  EXPECT_EQ(drafted.drafter_passes, 0);
  EXPECT_EQ(drafted.stats.drafts_verified, 0);
  EXPECT_DOUBLE_EQ(drafted.ms, plain.ms);
}

TEST(LanesPricing, AProbeWhoseCatchUpAbsorbTheReplyCannotRepayIsSkipped) {
  // A 200-row prompt costs the drafter 1000 ms to catch up on; 100 tokens at 7 per window leave about 12 rounds
  // to spread it over, 83 ms each: even an always-right drafter would lose to plain, so no probe is paid (a
  // drafter that cannot restart past the prompt must absorb all of it first).
  FixedClock clock;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.0);
  drafter_options.absorb_row_ms = 5.0;
  drafter_options.restarts = false;
  std::vector<Arrival> arrivals = long_prompt_requests(1, 200, 100);
  FakeRun plain = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), std::nullopt, arrivals);
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), drafter_options, arrivals);
  ASSERT_EQ(plain.tokens, drafted.tokens);
  EXPECT_EQ(drafted.drafter_passes, 0);
  EXPECT_DOUBLE_EQ(drafted.ms, plain.ms);
}

TEST(LanesPricing, ProbesTakeAtMostTheirBudgetOfTheTimeWhenEachCostsACatchUpAbsorb) {
  // Absorbing costs 0.3 ms a row: a probe pays for every row its stream kept since its last one, up to a whole
  // 12 ms round. Four always-wrong streams probing on their own doubling waits would add about a tenth to the
  // run; the budget (5% of the plain rounds' time) keeps them within a few percent of plain.
  FixedClock clock;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 1.0);
  drafter_options.absorb_row_ms = 0.3;
  std::vector<Arrival> arrivals = long_prompt_requests(4, 40, 300);
  FakeRun plain = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), std::nullopt, arrivals);
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), drafter_options, arrivals);
  ASSERT_EQ(plain.tokens, drafted.tokens);
  EXPECT_GE(drafted.drafter_passes, 3);  // the scout and later probes still run
  EXPECT_LT(drafted.ms, plain.ms * 1.05) << "plain " << plain.ms << " ms, drafted " << drafted.ms << " ms";
}

TEST(LanesPricing, StreamsPricedToZeroProbeOneAtATime) {
  // An always-wrong drafter at 8 streams: once pricing has turned drafting off, every drafter pass is one
  // stream's probe, never a pass where every stream pays its catch-up absorb at once.
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5));
  FakeDrafter drafter(costed_fake_drafter(clock, 1.0));
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  for (Arrival& arrival : long_prompt_requests(8, 40, 400)) (*lanes)->submit(arrival.request);
  int probe_passes = 0;
  for (int round = 0; !(*lanes)->idle(); ++round) {
    const int64_t passes = drafter.passes();
    const int64_t requests = drafter.requests();
    ASSERT_TRUE((*lanes)->round().ok());
    if (round < 40 || drafter.passes() == passes) continue;
    EXPECT_EQ(drafter.requests() - requests, 1) << "round " << round;
    ++probe_passes;
  }
  EXPECT_GE(probe_passes, 8);  // every stream still probes now and then
}

TEST(LanesPricing, AtOneStreamWithNearlyFlatVerifyAConfidentDrafterIsBoughtItsWholeDepth) {
  // The H200's shape at one stream: a verify costs about the same for 1 or 10 rows, a drafter pass about half a
  // verify, an absorb call a quarter, and a row count's first two forwards cost 3x (run eagerly, then captured as a
  // CUDA graph). Drafts land with q = 0.833 each (mean accepted length 5.02 at depth 9) and the confidences say
  // exactly that. Every draft up to 9 pays (each adds q^k tokens for almost no time), so the windows should carry
  // nearly all 9: one-off slow forwards of new shapes must not make wide windows look dear for good.
  FixedClock clock;
  FakeTargetOptions target_options;
  target_options.max_rows = 64;
  target_options.exact_width = 16;
  target_options.clock = &clock;
  target_options.verify_fixed_ms = 2.7;
  target_options.verify_row_ms = 0.01;
  target_options.new_shape_ms = 6.0;  // the first two forwards of each row count: eager launches, graph capture
  FakeDrafterOptions drafter_options;
  drafter_options.max_depth = 9;
  drafter_options.wrong_rate = 1.0 - 0.8327;
  drafter_options.confidences = true;
  drafter_options.clock = &clock;
  drafter_options.draft_fixed_ms = 1.5;
  drafter_options.draft_row_ms = 0.01;
  drafter_options.absorb_call_ms = 0.7;
  drafter_options.absorb_row_ms = 0.001;
  FakeRun drafted = run_fakes(clock, target_options, drafter_options, long_requests(1, 400));
  ASSERT_GT(drafted.stats.windows_with_drafts, 0);
  const double drafts_per_window =
      static_cast<double>(drafted.stats.drafts_verified) / static_cast<double>(drafted.stats.windows_with_drafts);
  EXPECT_GT(drafts_per_window, 7.5) << drafted.stats.drafts_verified << " drafts in "
                                    << drafted.stats.windows_with_drafts << " windows";
}

TEST(LanesPricing, ADrafterWhoseConfidencesDoubtEveryDraftIsNotRunEveryRound) {
  // Always wrong, and its confidences say so (0.05 a draft): the trim cuts every held draft, so no draft is ever
  // verified and the measured acceptance never falls from the prior. Before, the depth decision priced on that
  // acceptance alone and bought a full pass for every stream every round, for drafts no verify took (a pass a
  // round at 64 streams on the fakes); now it prices no better than the confidences of the drafts the trim cut.
  FixedClock clock;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 1.0);
  drafter_options.confidences = true;
  FakeRun drafted = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), drafter_options, long_requests(4, 300));
  FakeRun plain = run_fakes(clock, costed_fake_target(clock, 10.0, 0.5), std::nullopt, long_requests(4, 300));
  ASSERT_EQ(drafted.tokens, plain.tokens);
  EXPECT_LT(drafted.drafter_passes * 5, drafted.stats.rounds)
      << drafted.drafter_passes << " passes in " << drafted.stats.rounds << " rounds, "
      << drafted.stats.drafts_verified << " drafts verified";
  EXPECT_LT(drafted.ms, plain.ms * 1.05) << "plain " << plain.ms << " ms, drafted " << drafted.ms << " ms";
}

TEST(LanesPricing, AtOneStreamTheWindowIsAsDeepAsTheChancesAndCostsSayAndItsTokensMatchTheFormula) {
  // The 1.2B's round on the H200 at one stream: a verify of 1 row 1.07 ms, of 10 rows 1.22 ms; a depth-9 pass
  // 0.73 ms, the device absorb call 0.1 ms (verify nearly flat to 8 rows, 3x steeper past them). Drafts land with
  // q = 0.79 each (what the synthetic 5.02 profile, q = 0.8327, realized on the bench's one stream) and the
  // confidences say so. A round costs verify + pass whatever the trim keeps, so every draft up to 9 pays: the trim
  // must price rows against the whole round, not the verify alone (which cut windows to 7.7 drafts here, 7.0 on the
  // H200). Every window's tokens must match the formula 1 + q + ... + q^d for its depth d, within noise.
  FixedClock clock;
  FakeTargetOptions target_options;
  target_options.max_rows = 64;
  target_options.exact_width = 16;
  target_options.clock = &clock;
  target_options.verify_fixed_ms = 1.06;
  target_options.verify_row_ms = 0.0115;  // 1.152 ms at 8 rows
  target_options.verify_wide_from = 8;
  target_options.verify_wide_row_ms = 0.025;  // 1.225 ms at 10 rows
  FakeDrafterOptions drafter_options;
  drafter_options.max_depth = 9;
  constexpr double kQ = 0.79;
  drafter_options.wrong_rate = 1.0 - kQ;
  drafter_options.confidences = true;
  drafter_options.clock = &clock;
  drafter_options.draft_fixed_ms = 0.64;
  drafter_options.draft_row_ms = 0.01;
  drafter_options.absorb_call_ms = 0.1;
  drafter_options.absorb_row_ms = 0.002;
  constexpr int kTokens = 3000;
  FakeRun drafted = run_fakes(clock, target_options, drafter_options, long_requests(1, kTokens));
  ASSERT_EQ(drafted.tokens, kTokens);
  ASSERT_GT(drafted.stats.windows_with_drafts, 0);
  const double drafts_per_window =
      static_cast<double>(drafted.stats.drafts_verified) / static_cast<double>(drafted.stats.windows_with_drafts);
  EXPECT_GT(drafts_per_window, 8.5) << drafted.stats.drafts_verified << " drafts in "
                                    << drafted.stats.windows_with_drafts << " windows";
  // Expected tokens of every verify window by its depth (the prompt's window drew one row: the first token).
  double expected = 0, variance = 0;
  int64_t windows = 0;
  for (auto [drawn_rows, count] : drafted.windows_by_drawn_rows) {
    const int depth = drawn_rows - 1;
    double mean = 1.0, second = 1.0, chain = 1.0;  // tokens T = 1 + kept; E[T], E[T^2]
    for (int k = 1; k <= depth; ++k) {
      chain *= kQ;
      mean += chain;
      second += (2.0 * k + 1.0) * chain;  // E[T^2] = sum_t (2t - 1) P(T >= t), P(T >= k + 1) = q^k
    }
    expected += mean * double(count);
    variance += (second - mean * mean) * double(count);
    windows += count;
  }
  // Windows cut by max_tokens at the end deliver fewer tokens than drawn: at most the last window's depth.
  const double generated = static_cast<double>(drafted.stats.tokens_generated);
  EXPECT_NEAR(generated, expected, 4.0 * std::sqrt(variance) + 10.0)
      << windows << " windows, " << drafts_per_window << " drafts a window";
  double full_depth = 1.0, chain = 1.0;
  for (int k = 1; k <= drafter_options.max_depth; ++k) full_depth += (chain *= kQ);
  EXPECT_GT(generated / double(drafted.stats.windows_verified), 0.97 * full_depth) << "tokens a window";
}

}  // namespace
}  // namespace ls
