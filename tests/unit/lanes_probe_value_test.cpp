// The eighth session's probes that pay their way (lanes9) on fakes. (Its depth asked priced with the pass table's depth
// axis, lanes_bench --depth-ask priced, lost in s8A and was removed in lanes17 with its tests.)
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions probe_rule() {
  LanesOptions options;
  options.pricing.explore_repay = 0;  // the probe rules under test, not lanes11's exploration gate
  return options;
}

TEST(LanesProbeValue, WhereNeitherAProbeNorTheGroupAtThePriorCanPayOnlyTheScoutProbes) {
  // Four streams, a launch-bound verify (10 ms + 0.05 ms a row: the nano target on the H200 in miniature), a pass
  // 25 ms + 0.2 ms a draft row, a drafter right 50% of the time and 15% after a restart. If every draft landed, four
  // streams drafting 6 deep would pay (28 tokens in 41 ms against plain's 4 in 10.2); at the prior's chances they
  // would not (14 in 41), and one probe window wins at most 6 x 2.55 ms against its 26.2 ms pass. The scout still
  // probes once (before any draft there are no confidences to judge a group by: it keeps the always-right test).
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.05);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.5, 0.2);
  drafter.draft_fixed_ms = 25.0;
  drafter.restarted_wrong_rate = 0.85;
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(4, target.shape.vocab_size, 120);
  FakeRun plain = run_fakes(clock, target, std::nullopt, arrivals, LanesOptions{});
  FakeRun new_run = run_fakes(clock, target, drafter, arrivals, probe_rule());
  ASSERT_EQ(reply_tokens(new_run), reply_tokens(plain));
  // (Probes priced on the tables alone, lanes_bench --probe-value off before lanes17, ran more than 1 % slower here.)
  EXPECT_LE(new_run.drafter_passes, 1);
  EXPECT_LT(new_run.ms, plain.ms * 1.025) << "plain " << plain.ms << " ms, probes that pay " << new_run.ms << " ms";
}

TEST(LanesProbeValue, ProbesThatPayTheirWayStillFindAndBuyADrafterThatPaysAtOneStream) {
  // One stream, a verify 10 ms + 0.5 ms a row, a pass 2 ms + 0.2 ms a draft row, right 80% of the time.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter = costed_fake_drafter(clock, 0.2);
  drafter.confidences = true;
  std::vector<Arrival> arrivals = endless_arrivals(1, target.shape.vocab_size, 300);
  FakeRun plain = run_fakes(clock, target, std::nullopt, arrivals, LanesOptions{});
  FakeRun new_run = run_fakes(clock, target, drafter, arrivals, probe_rule());
  ASSERT_EQ(reply_tokens(new_run), reply_tokens(plain));
  EXPECT_GT(new_run.stats.windows_with_drafts, 50);
  EXPECT_LT(new_run.ms, plain.ms * 0.7) << "plain " << plain.ms << " ms, probes that pay " << new_run.ms << " ms";
}

TEST(LanesProbeValue, AStreamsOwnProbePaysOnlyWhereItsWindowCanWinItsPassItsRowsAndTheMeanOneOff) {
  // The arithmetic of Pricing::probe_pays on fixed tables: 4 pending rows at 10 ms (2.5 ms a token), a 6-draft
  // probe wins at most 15 ms; its pass costs 2 + 0.2 x 6 = 3.2 ms and its 6 rows 3 ms.
  FixedClock clock;
  FakeTargetOptions target = costed_fake_target(clock, 10.0, 0.5);
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.2);
  drafter_options.confidences = true;
  FakeTarget fake_target(target);
  FakeDrafter drafter(drafter_options);
  auto lanes = Lanes::create(fake_target, &drafter, probe_rule(), clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  Pricing pricing = (*lanes)->pricing();
  Stream stream;
  const int rows = 4;
  EXPECT_TRUE(pricing.probe_pays(stream, 6, rows));
  const double plain_token_ms = pricing.tables().verify.ms(rows) / rows + pricing.overhead_ms() / rows;
  const VerifyCosts& verify = pricing.tables().verify;
  const double cost_ms =
      pricing.draft_ms(1, 6) + verify.ms(rows + 6) - verify.ms(rows) + pricing.tables().absorb_ms(1);
  const double margin_ms = 6 * plain_token_ms - cost_ms;
  ASSERT_GT(margin_ms, 1.0);
  // A slow forward's excess (a new shape's one-off) above the margin makes the same probe not pay.
  pricing.observe_slow_forward(margin_ms + 0.5);
  EXPECT_NEAR(pricing.one_off_ms(), margin_ms + 0.5, 1e-9);
  EXPECT_FALSE(pricing.probe_pays(stream, 6, rows));
  EXPECT_FALSE(pricing.probe_pays(stream, 0, rows));
}

}  // namespace
}  // namespace ls
