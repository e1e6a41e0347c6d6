// Drafting that does not pay costs nothing: dormant streams ask for no taps, hold none and absorb none, and a
// stream that resumes restarts its drafter context past the rows it skipped, with exact replies throughout.
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

FakeDrafterOptions costed_drafter(FixedClock& clock, double wrong_rate, double row_ms) {
  FakeDrafterOptions options = costed_fake_drafter(clock, wrong_rate, row_ms);
  options.absorb_call_ms = 0.1;
  options.absorb_row_ms = 0.05;
  return options;
}

std::vector<Arrival> requests(int streams, int prompt_tokens, int max_tokens) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.request = make_fake_request(index, index % 2 == 1, 64);
    arrival.request.prompt.resize(prompt_tokens, 7);
    arrival.request.max_tokens = max_tokens;
    arrivals.push_back(arrival);
  }
  return arrivals;
}

TEST(LanesDormant, AStreamPricedToZeroGetsNoTapRowsAndNoAbsorbsAfterItsProbes) {
  // An always-wrong drafter at 4 streams: pricing turns drafting off after the first probes. From then on a stream
  // taps only in the round before its own probe, so past the first 20 rounds the target returns taps for a few
  // rows in a hundred and the drafter absorbs as few (before: every row of every drafting stream was tapped, held
  // and, every 512 rows, absorbed).
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5, 128));
  FakeDrafter drafter(costed_drafter(clock, 1.0, 0.2));
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  const std::vector<Arrival> arrivals = requests(4, 40, 400);
  for (const Arrival& arrival : arrivals) (*lanes)->submit(arrival.request);
  std::vector<int32_t> ignored;
  int64_t tap_rows_then = 0, absorbed_then = 0, rows_then = 0, drafted_windows_then = 0;
  for (int round = 0; !(*lanes)->idle(); ++round) {
    if (round == 20) {
      tap_rows_then = target.tap_rows();
      absorbed_then = drafter.absorbed_rows();
      rows_then = (*lanes)->stats().rows_verified;
      drafted_windows_then = (*lanes)->stats().windows_with_drafts;
    }
    ASSERT_TRUE((*lanes)->round().ok());
  }
  const LanesStats& stats = (*lanes)->stats();
  const int64_t rows = stats.rows_verified - rows_then;
  const int64_t tap_rows = target.tap_rows() - tap_rows_then;
  const int64_t absorbed = drafter.absorbed_rows() - absorbed_then;
  EXPECT_GT(rows, 1400);
  EXPECT_LT(tap_rows * 30, rows) << tap_rows << " tapped rows of " << rows;
  EXPECT_LT(absorbed * 30, rows) << absorbed << " absorbed rows of " << rows;
  EXPECT_GE(stats.dormant_entries, 4);
  EXPECT_EQ(stats.drafter_faults, 0);
  EXPECT_GE(stats.windows_with_drafts - drafted_windows_then, 8);  // the probes still ran
}

TEST(LanesDormant, DraftFalseStreamsAskTheTargetForNoTaps) {
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5, 128));
  FakeDrafter drafter(costed_drafter(clock, 0.2, 0.2));
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  const int64_t setup_tap_rows = target.tap_rows();
  std::vector<Arrival> arrivals = requests(3, 12, 60);
  for (Arrival& arrival : arrivals) arrival.request.draft = false;
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  EXPECT_EQ(target.tap_rows(), setup_tap_rows);
  EXPECT_EQ((*lanes)->stats().tap_rows, 0);
  EXPECT_EQ((*lanes)->stats().absorb_calls, 0);
}

TEST(LanesDormant, AStreamResumingAfterDormancyDraftsWithAValidContextAndStaysExact) {
  // Rows cost 2 ms to verify and a drafter pass 2 ms per stream and depth: at 16 streams even an always-right
  // drafter loses to plain, alone it wins. The long stream goes dormant while 15 short ones run beside it, then
  // resumes alone: its context restarts past the rows it skipped, the fake drafter (which checks every absorbed
  // row's position and history) accepts the rows after the restart, and its drafts land again.
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 2.0, 128));
  FakeDrafter drafter(costed_drafter(clock, 0.0, 2.0));
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  std::vector<Arrival> arrivals = requests(16, 10, 40);
  arrivals[0].request.max_tokens = 300;
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  std::vector<Reply> alone = run_each_alone_plain(costed_fake_target(clock, 10.0, 2.0, 128), arrivals);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index;
  }
  const LanesStats& stats = (*lanes)->stats();
  EXPECT_GE(stats.dormant_entries, 1);
  EXPECT_GE(drafter.restarts(), 1);
  EXPECT_EQ(stats.drafter_restarts, drafter.restarts());
  EXPECT_EQ(stats.drafter_faults, 0);
  // Alone, the long stream drafts with every draft right: most of its 300 tokens come as accepted drafts.
  const StreamStats& long_stream = (*replies)[0].stats;
  EXPECT_GT(long_stream.drafts_accepted * 2, 300) << long_stream.drafts_accepted << " accepted of "
                                                  << long_stream.drafts_verified;
}

TEST(LanesDormant, WhereEvenAnAlwaysRightDrafterCannotPayAtThisManyStreamsNoPromptIsTapped) {
  // 2 ms a verify row and 2 ms a pass per stream and depth: at 16 streams drafting cannot pay even if every draft
  // landed, so the scout's probe would be skipped and its prompt's taps and absorb would buy nothing (the CPU nano
  // pair at 4-16 streams tapped and absorbed the scout's 192-row prompt). All 16 start dormant (and no drafter
  // fault follows). With only 2 streams the same pair can pay: both start dormant too, and the scout taps only the row
  // its probe drafts over (the scout over a restarted context, lanes17).
  auto run = [](int streams, int64_t& tap_rows) {
    FixedClock clock;
    FakeTarget target(costed_fake_target(clock, 10.0, 2.0, 128));
    FakeDrafter drafter(costed_drafter(clock, 0.0, 2.0));
    LanesOptions options = sampled_any_streams();
    options.pricing.explore_repay = 0;  // the always-right rule under test, not lanes11's exploration gate
    options.scout_prompt_only = true;   // (the rule holds with the scout alone)
    auto lanes = Lanes::create(target, &drafter, options, clock);
    EXPECT_TRUE(lanes.ok());
    const int64_t setup_tap_rows = target.tap_rows();
    const std::vector<Arrival> arrivals = requests(streams, 10, 40);
    for (const Arrival& arrival : arrivals) (*lanes)->submit(arrival.request);
    EXPECT_TRUE((*lanes)->round().ok());
    tap_rows = target.tap_rows() - setup_tap_rows;
    const int64_t dormant = (*lanes)->stats().dormant_entries;
    while (!(*lanes)->idle()) EXPECT_TRUE((*lanes)->round().ok());
    EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
    return dormant;
  };
  int64_t tap_rows = 0;
  EXPECT_EQ(run(16, tap_rows), 16);
  EXPECT_EQ(tap_rows, 0);
  EXPECT_EQ(run(2, tap_rows), 2);
  EXPECT_EQ(tap_rows, 1);  // the scout's first verify row
}

TEST(LanesDormant, WithScoutPromptOnlyOffWhereThePriorPaysEveryPromptIsTappedBeforeTheDrafterIsProven) {
  // The fifth session's admission (LanesOptions::scout_prompt_only = false, lanes_bench --admit all): at 2 streams
  // (cheap rows, cheap passes) every stream may draft, so every prompt is tapped; by default only the scout's is.
  auto tapped = [](bool scout_prompt_only) {
    FixedClock clock;
    FakeTarget target(costed_fake_target(clock, 10.0, 0.5, 128));
    FakeDrafter drafter(costed_drafter(clock, 0.0, 0.2));
    LanesOptions options = sampled_any_streams();
    options.scout_prompt_only = scout_prompt_only;
    auto lanes = Lanes::create(target, &drafter, options, clock);
    EXPECT_TRUE(lanes.ok());
    const int64_t setup_tap_rows = target.tap_rows();
    for (const Arrival& arrival : requests(2, 10, 40)) (*lanes)->submit(arrival.request);
    EXPECT_TRUE((*lanes)->round().ok());
    EXPECT_EQ((*lanes)->stats().dormant_entries, scout_prompt_only ? 1 : 0);
    return target.tap_rows() - setup_tap_rows;
  };
  EXPECT_EQ(tapped(false), 2 * 10 + 2);
  EXPECT_EQ(tapped(true), 10 + 1);  // the scout's prompt and first row (no other stream probes before it)
}

TEST(LanesDormant, StreamsThatAreNotDraftingTakeNoTapRowsAndNoAbsorbCalls) {
  // 1.2B at 64 streams on the H200 (ebbe22d): the prior said drafting could pay, so every prompt was tapped and
  // absorbed before the drafter was proven (8389 rows in 9 calls, about 20 ms), the scout's probe landed nothing
  // and no stream ever drafted (0.99x). Here 16 streams with 40-token prompts, cheap rows and passes (the prior
  // pays), and a drafter that is always wrong: only the scout's prompt and the probes' rows may reach the drafter.
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5, 128));
  FakeDrafter drafter(costed_drafter(clock, 1.0, 0.2));
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  const int64_t setup_tap_rows = target.tap_rows();
  const int64_t setup_absorbs = drafter.absorbs();
  const int64_t setup_absorbed = drafter.absorbed_rows();
  const std::vector<Arrival> arrivals = requests(16, 40, 200);
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  const LanesStats& stats = (*lanes)->stats();
  EXPECT_EQ(stats.drafter_faults, 0);
  EXPECT_EQ(stats.drafts_accepted, 0);
  // Every row the lanes verified or prefilled: 16 * 40 prompt rows and about 16 * 200 verify rows.
  const int64_t tap_rows = target.tap_rows() - setup_tap_rows;
  const int64_t absorbed = drafter.absorbed_rows() - setup_absorbed;
  EXPECT_LE(tap_rows, 40 + 2 * stats.drafter_passes + 8) << tap_rows << " tap rows, " << stats.drafter_passes
                                                        << " passes";
  EXPECT_LE(absorbed, tap_rows);
  EXPECT_LE(drafter.absorbs() - setup_absorbs, stats.drafter_passes) << "absorb calls";
  EXPECT_EQ(stats.tap_rows, tap_rows);
  EXPECT_LT(stats.drafter_passes, 12);
}

TEST(LanesDormant, ARoundThatBuysNoDraftsCallsTheDrafterZeroTimes) {
  // Host and device taps: in every round without a drafter pass (and 3 rounds past the last one), the drafter sees
  // no absorb, restart or device absorb either (a probe's taps are taken only in the round its probe runs; at 16 streams on the H200 27 absorb
  // calls and 50 restarts came with 2 passes: probes tapped for, then skipped).
  for (bool device_taps : {false, true}) {
    FixedClock clock;
    FakeTargetOptions target_options = costed_fake_target(clock, 10.0, 2.0, 128);
    target_options.device_taps = device_taps;
    FakeTarget target(target_options);
    FakeDrafterOptions drafter_options = costed_drafter(clock, 0.5, 2.0);
    drafter_options.device_taps = device_taps;
    FakeDrafter drafter(drafter_options);
    auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
    ASSERT_TRUE(lanes.ok());
    ASSERT_EQ((*lanes)->device_taps(), device_taps);
    for (const Arrival& arrival : requests(16, 24, 300)) (*lanes)->submit(arrival.request);
    auto calls = [&] { return drafter.absorbs() + drafter.device_absorbs() + drafter.restarts() + drafter.passes(); };
    int quiet_rounds = 0;
    int last_pass_round = 0;
    for (int round = 0; !(*lanes)->idle(); ++round) {
      const int64_t passes = drafter.passes();
      const int64_t before = calls();
      ASSERT_TRUE((*lanes)->round().ok());
      if (drafter.passes() != passes) last_pass_round = round;
      // A stream that drafted keeps tapping through 2 unpaid decisions before it goes dormant (its context stays
      // whole through a single unpaid round); with device taps those rows are absorbed as they come.
      if (round == 0 || round - last_pass_round <= 2) continue;
      ++quiet_rounds;
      EXPECT_EQ(calls(), before) << "round " << round << (device_taps ? " (device taps)" : " (host taps)");
    }
    EXPECT_GT(quiet_rounds, 200);
    EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
  }
}

TEST(LanesDormant, OnTheFakesARoundsTimeIsItsForwardsPlusItsDrafterCallsAndNothingElse) {
  // The fakes advance the fixed clock only inside forwards, absorbs and passes, so the lanes' own host work reads 0:
  // the round split the benchmark reports must account for every advanced millisecond in the right bucket.
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5, 128));
  FakeDrafter drafter(costed_drafter(clock, 0.2, 0.2));
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  const double start_ms = clock.now_ms();
  auto replies = run_arrivals(**lanes, requests(4, 20, 60));
  ASSERT_TRUE(replies.ok());
  const LanesStats& stats = (*lanes)->stats();
  const double forwards_ms = 10.0 * double(stats.verify_forwards + stats.prefill_forwards) +
                             0.5 * double(stats.rows_verified + 4 * 20);
  EXPECT_GT(stats.drafter_passes, 0);
  EXPECT_GT(stats.absorb_calls, 0);
  EXPECT_NEAR(stats.forward_ms, forwards_ms, 1e-6);
  EXPECT_NEAR(stats.round_ms, clock.now_ms() - start_ms, 1e-6);
  EXPECT_NEAR(stats.round_ms, stats.forward_ms + stats.drafter_ms, 1e-6);
  EXPECT_GT(stats.drafter_ms, 2.0 * double(stats.drafter_passes));
}

TEST(LanesDormant, ADrafterThatCannotRestartIsHandedEveryKeptRowAsBefore) {
  FixedClock clock;
  FakeTarget target(costed_fake_target(clock, 10.0, 0.5, 128));
  FakeDrafterOptions drafter_options = costed_drafter(clock, 1.0, 0.2);
  drafter_options.restarts = false;
  FakeDrafter drafter(drafter_options);
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  const int64_t setup_tap_rows = target.tap_rows();
  const std::vector<Arrival> arrivals = requests(4, 40, 200);
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  const LanesStats& stats = (*lanes)->stats();
  EXPECT_EQ(stats.dormant_entries, 0);
  EXPECT_EQ(drafter.restarts(), 0);
  EXPECT_EQ(target.tap_rows() - setup_tap_rows, stats.rows_verified + 4 * 40);
  EXPECT_EQ(stats.drafter_faults, 0);
}

TEST(LanesDormant, RoundsOfDormantStreamsRunTheRowAllocatorOnlyEveryEighthDecision) {
  // 1.2B at 64 streams on the H200: every stream dormant for the whole run, yet each round priced all 64 streams
  // through the row allocator (+0.03 ms of host work a round against plain, 1.5% of the round). Now a decision over
  // dormant streams only, after one that bought nothing, reprices them together only every 8th time.
  auto allocations_per_round = [](int reprice_every) {
    FixedClock clock;
    FakeTarget target(costed_fake_target(clock, 10.0, 0.5, 128));
    FakeDrafter drafter(costed_drafter(clock, 1.0, 0.2));
    LanesOptions options = sampled_any_streams();
    options.pricing.quiet_reprice_every = reprice_every;
    auto lanes = Lanes::create(target, &drafter, options, clock);
    EXPECT_TRUE(lanes.ok());
    const std::vector<Arrival> arrivals = requests(16, 24, 200);
    for (const Arrival& arrival : arrivals) (*lanes)->submit(arrival.request);
    int64_t allocations_then = 0, rounds_then = 0;
    for (int round = 0; !(*lanes)->idle(); ++round) {
      if (round == 40) {
        allocations_then = (*lanes)->pricing().depth_allocations();
        rounds_then = (*lanes)->stats().rounds;
      }
      EXPECT_TRUE((*lanes)->round().ok());
    }
    EXPECT_EQ((*lanes)->stats().drafts_accepted, 0);
    const int64_t rounds = (*lanes)->stats().rounds - rounds_then;
    EXPECT_GT(rounds, 100);
    return static_cast<double>((*lanes)->pricing().depth_allocations() - allocations_then) / static_cast<double>(rounds);
  };
  EXPECT_GT(allocations_per_round(1), 0.95);
  EXPECT_LT(allocations_per_round(8), 0.2);
}

}  // namespace
}  // namespace ls
