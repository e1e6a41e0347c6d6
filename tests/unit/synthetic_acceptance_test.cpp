// Synthetic acceptance (benchmarks only): profiles hit their mean, the decorator keeps the real drafter's cost and
// faults, its proposals land at the profile's rates, and replies stay token-identical to plain through the lanes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "base/hash.h"
#include "draft/load.h"
#include "draft/synthetic/acceptance_profile.h"
#include "draft/synthetic/synthetic_acceptance_drafter.h"
#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "model/load.h"

namespace ls {
namespace {

const std::string kNanoTarget = std::string(LS_SOURCE_DIR) + "/models/nano/target";
const std::string kNanoDrafter = std::string(LS_SOURCE_DIR) + "/models/nano/drafter";

AcceptanceProfile profile_or_die(double mean, int depth) {
  Result<AcceptanceProfile> profile = profile_for_mean(mean, depth);
  EXPECT_TRUE(profile.ok()) << profile.status().to_string();
  return profile.ok() ? *profile : AcceptanceProfile{};
}

TEST(AcceptanceProfile, TheProfileForAMeanHasThatMeanWithTheBonusCounted) {
  for (auto [mean, depth] : {std::pair{5.02, 9}, std::pair{6.95, 9}, std::pair{2.5, 4}, std::pair{1.0, 7}}) {
    const AcceptanceProfile profile = profile_or_die(mean, depth);
    ASSERT_EQ(profile.depth(), depth);
    EXPECT_NEAR(profile.mean_accepted_length(), mean, 1e-9) << mean;
    double expected = 1.0, chain = 1.0;
    for (double q : profile.conditional) {
      EXPECT_GE(q, 0.0);
      EXPECT_LE(q, 1.0);
      EXPECT_EQ(q, profile.conditional[0]) << "the profile is constant over depths";
      chain *= q;
      expected += chain;
    }
    EXPECT_NEAR(expected, mean, 1e-9);
  }
  // 9 drafts at mean 5.02: q is about 0.832 (1 + q + ... + q^9 = 5.02).
  EXPECT_NEAR(profile_or_die(5.02, 9).conditional[0], 0.832, 0.002);
  EXPECT_EQ(profile_or_die(10.0, 9).conditional[0], 1.0);
}

TEST(AcceptanceProfile, ChancesAreTheCumulativeProductsOfTheConditionals) {
  AcceptanceProfile profile;
  profile.conditional = {0.9, 0.5, 0.25};
  const std::vector<float> chances = profile.chances();
  ASSERT_EQ(chances.size(), 3u);
  EXPECT_FLOAT_EQ(chances[0], 0.9f);
  EXPECT_FLOAT_EQ(chances[1], 0.45f);
  EXPECT_FLOAT_EQ(chances[2], 0.1125f);
  EXPECT_NEAR(profile.mean_accepted_length(), 1.0 + 0.9 + 0.45 + 0.1125, 1e-12);
}

TEST(AcceptanceProfile, MeansOutsideOneToDepthPlusOneAndEmptyProfilesAreRefused) {
  for (auto [mean, depth] : {std::pair{0.99, 9}, std::pair{10.01, 9}, std::pair{3.0, 0},
                             std::pair{std::numeric_limits<double>::quiet_NaN(), 9}}) {
    Result<AcceptanceProfile> profile = profile_for_mean(mean, depth);
    ASSERT_FALSE(profile.ok()) << mean << " " << depth;
    EXPECT_EQ(profile.status().code(), ErrorCode::InvalidArgument);
  }
  EXPECT_NE(profile_for_mean(11.5, 9).status().message().find("11.5"), std::string::npos);
}

// A recorded inner drafter with `rows` of context for stream 1 holding `sequence`.
struct DirectRig {
  std::vector<int32_t> sequence;
  RecordedDrafter inner;
  SyntheticAcceptanceDrafter synthetic;

  DirectRig(int length, int vocab, const AcceptanceProfile& profile, uint64_t seed = 42)
      : sequence(make_sequence(length, vocab)),
        inner(inner_options(vocab, profile.depth())),
        synthetic(inner, SyntheticAcceptanceOptions{profile, seed, vocab}) {
    inner.expect(1, sequence);
    synthetic.expect(1, sequence);
  }
  static std::vector<int32_t> make_sequence(int length, int vocab) {
    std::vector<int32_t> tokens;
    for (int index = 0; index < length; ++index) tokens.push_back(static_cast<int32_t>(splitmix64(index) % vocab));
    return tokens;
  }
  static RecordedDrafterOptions inner_options(int vocab, int depth) {
    RecordedDrafterOptions options;
    options.vocab_size = vocab;
    options.max_depth = depth;
    options.wrong_rate = 1.0;  // the inner drafter alone is always wrong: every right token comes from the record
    return options;
  }
  DraftRequest request(int64_t anchor, int depth) const {
    DraftRequest request;
    request.stream = 1;
    request.anchor_position = anchor;
    request.anchor_token = sequence[anchor];
    request.depth = depth;
    return request;
  }
};

// Drafts `windows` full-depth windows of stream 1 the way the lanes do: each anchor lands past the last window's
// kept drafts and bonus (`stride` > 0: `stride` positions on instead). Returns each window's accepted length.
std::vector<int> run_windows(DirectRig& rig, int windows, int depth, int stride = 0) {
  std::vector<int> lengths;
  int64_t anchor = 1;
  EXPECT_TRUE(rig.synthetic.absorb(1, 0, 1, {}).ok());
  for (int window = 0; window < windows; ++window) {
    const DraftRequest request = rig.request(anchor, depth);
    const std::vector<Draft> drafts = rig.synthetic.draft(std::span(&request, 1));
    EXPECT_TRUE(drafts[0].status.ok()) << drafts[0].status.to_string();
    int kept = 0;
    while (kept < depth && drafts[0].tokens[kept] == rig.sequence[anchor + 1 + kept]) ++kept;
    lengths.push_back(1 + kept);
    const int64_t next = anchor + (stride > 0 ? stride : 1 + kept);
    EXPECT_TRUE(rig.synthetic.absorb(1, anchor, static_cast<int>(next - anchor), {}).ok());
    anchor = next;
  }
  return lengths;
}

double mean_of(const std::vector<int>& lengths) {
  return std::accumulate(lengths.begin(), lengths.end(), 0.0) / static_cast<double>(lengths.size());
}

TEST(SyntheticAcceptanceDrafter, AFewHundredWindowsRealizeTheProfileMeanWithinTwoPercentForEverySeed) {
  // One golden-ratio uniform a window: 300 windows' mean is within 1 % of the profile's for any start (independent
  // draws per window or per position miss 2 % in about half of such runs: 8 seeds all inside would be luck).
  for (auto [mean, depth] : {std::pair{5.02, 9}, std::pair{3.0, 7}}) {
    const AcceptanceProfile profile = profile_or_die(mean, depth);
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      DirectRig rig(300 * (depth + 1) + depth + 2, 1000, profile, seed);
      const double realized = mean_of(run_windows(rig, 300, depth));
      EXPECT_NEAR(realized, profile.mean_accepted_length(), 0.02 * profile.mean_accepted_length())
          << "seed " << seed << ", profile mean " << mean;
    }
  }
}

TEST(SyntheticAcceptanceDrafter, NeighbouringWindowsAreNearlyUncorrelated) {
  // In plain golden order a long window mostly follows a short one (lag-1 correlation -0.47 for any start); blocks
  // of 8 in a keyed order give -0.06 .. -0.20 over 2000 windows.
  const AcceptanceProfile profile = profile_or_die(5.02, 9);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    DirectRig rig(2000 + 12, 1000, profile, seed);
    const std::vector<int> lengths = run_windows(rig, 2000, 9, 1);
    const double mean = mean_of(lengths);
    double lagged = 0, spread = 0;
    for (size_t index = 0; index < lengths.size(); ++index) {
      spread += (lengths[index] - mean) * (lengths[index] - mean);
      if (index + 1 < lengths.size()) lagged += (lengths[index] - mean) * (lengths[index + 1] - mean);
    }
    EXPECT_GT(lagged / spread, -0.3) << "seed " << seed;
    EXPECT_NEAR(mean, profile.mean_accepted_length(), 0.005 * profile.mean_accepted_length()) << "seed " << seed;
  }
}

TEST(SyntheticAcceptanceDrafter, AWindowsDrawDependsOnSeedStreamAndWindowIndexOnly) {
  const AcceptanceProfile profile = profile_or_die(5.02, 9);
  DirectRig first(4000, 1000, profile, 7), again(4000, 1000, profile, 7), other_seed(4000, 1000, profile, 8);
  const std::vector<int> lengths = run_windows(first, 200, 9);
  EXPECT_EQ(run_windows(again, 200, 9), lengths) << "the same (seed, stream) draws the same windows";
  EXPECT_NE(run_windows(other_seed, 200, 9), lengths);
  // The n-th window accepts as many whatever its anchor (q is the same at every depth).
  DirectRig strided(4000, 1000, profile, 7);
  EXPECT_EQ(run_windows(strided, 200, 9, 13), lengths);
  // Another stream id has its own sequence.
  DirectRig stream_two(4000, 1000, profile, 7);
  stream_two.inner.expect(2, stream_two.sequence);
  stream_two.synthetic.expect(2, stream_two.sequence);
  ASSERT_TRUE(stream_two.synthetic.absorb(2, 0, 1, {}).ok());
  std::vector<int> lengths_two;
  for (int64_t anchor = 1; anchor <= 200; ++anchor) {
    DraftRequest request = stream_two.request(anchor, 9);
    request.stream = 2;
    const std::vector<Draft> drafts = stream_two.synthetic.draft(std::span(&request, 1));
    int kept = 0;
    while (kept < 9 && drafts[0].tokens[kept] == stream_two.sequence[anchor + 1 + kept]) ++kept;
    lengths_two.push_back(1 + kept);
    ASSERT_TRUE(stream_two.synthetic.absorb(2, anchor, 1, {}).ok());
  }
  EXPECT_NE(lengths_two, lengths);
}

TEST(SyntheticAcceptanceDrafter, ARepeatedAnchorIsTheSameWindowAndExpectOrReleaseStartsOver) {
  const AcceptanceProfile profile = profile_or_die(5.02, 9);
  DirectRig rig(4000, 1000, profile, 7);
  const std::vector<int> lengths = run_windows(rig, 40, 9, 1);
  // Draft every anchor twice: the repeat is the same window (same tokens), so the sequence of windows is unchanged.
  DirectRig twice(4000, 1000, profile, 7);
  ASSERT_TRUE(twice.synthetic.absorb(1, 0, 1, {}).ok());
  for (int64_t anchor = 1; anchor <= 40; ++anchor) {
    const DraftRequest request = twice.request(anchor, 9);
    const std::vector<Draft> drafts = twice.synthetic.draft(std::span(&request, 1));
    EXPECT_EQ(twice.synthetic.draft(std::span(&request, 1))[0].tokens, drafts[0].tokens) << anchor;
    int kept = 0;
    while (kept < 9 && drafts[0].tokens[kept] == twice.sequence[anchor + 1 + kept]) ++kept;
    EXPECT_EQ(1 + kept, lengths[anchor - 1]) << anchor;
    ASSERT_TRUE(twice.synthetic.absorb(1, anchor, 1, {}).ok());
  }
  // expect() and release() both restart the stream's windows at 0.
  rig.synthetic.expect(1, rig.sequence);
  rig.inner.release(1);
  rig.inner.expect(1, rig.sequence);
  EXPECT_EQ(run_windows(rig, 40, 9, 1), lengths);
  rig.synthetic.release(1);
  rig.inner.expect(1, rig.sequence);
  EXPECT_EQ(run_windows(rig, 40, 9, 1), lengths);
}

TEST(SyntheticAcceptanceDrafter, FullDepthWindowsAcceptTheProfileMeanOnALongRun) {
  const AcceptanceProfile profile = profile_or_die(5.02, 9);
  DirectRig rig(20000, 1000, profile);
  ASSERT_TRUE(rig.synthetic.absorb(1, 0, 1, {}).ok());
  double accepted_total = 0;
  int windows = 0;
  std::vector<int64_t> right_by_depth(9, 0), reached_by_depth(9, 0);
  for (int64_t anchor = 1; anchor + 9 < 20000; ++anchor) {
    ASSERT_TRUE(rig.synthetic.absorb(1, anchor - 1, 1, {}).ok());
    const DraftRequest request = rig.request(anchor, 9);
    const std::vector<Draft> drafts = rig.synthetic.draft(std::span(&request, 1));
    ASSERT_EQ(drafts.size(), 1u);
    ASSERT_TRUE(drafts[0].status.ok()) << drafts[0].status.to_string();
    ASSERT_EQ(drafts[0].tokens.size(), 9u);
    int kept = 0;
    while (kept < 9 && drafts[0].tokens[kept] == rig.sequence[anchor + 1 + kept]) ++kept;
    for (int depth = 0; depth <= std::min(kept, 8); ++depth) {
      ++reached_by_depth[depth];
      if (depth < kept) ++right_by_depth[depth];
    }
    for (int depth = 0; depth < 9; ++depth) {
      const int32_t token = drafts[0].tokens[depth];
      EXPECT_TRUE(token >= 0 && token < 1000) << token;
    }
    accepted_total += 1 + kept;  // the bonus counts
    ++windows;
  }
  EXPECT_NEAR(accepted_total / windows, 5.02, 0.08) << "over " << windows << " windows";
  for (int depth = 0; depth < 9; ++depth) {
    const double rate = double(right_by_depth[depth]) / double(reached_by_depth[depth]);
    EXPECT_NEAR(rate, profile.conditional[depth], 0.03) << "conditional acceptance at depth " << depth + 1;
  }
  EXPECT_EQ(rig.synthetic.record_mismatches(), 0);
}

TEST(SyntheticAcceptanceDrafter, TheInnerDrafterRunsForEveryCallAndChancesAreTheProfiles) {
  AcceptanceProfile profile;
  profile.conditional = {0.9, 0.8, 0.7, 0.6};
  DirectRig rig(64, 50, profile);
  EXPECT_TRUE(rig.synthetic.facts().has_confidence);
  EXPECT_EQ(rig.synthetic.facts().max_depth, rig.inner.facts().max_depth);
  EXPECT_EQ(rig.synthetic.facts().tap_layers, rig.inner.facts().tap_layers);
  ASSERT_TRUE(rig.synthetic.absorb(1, 0, 10, {}).ok());
  EXPECT_EQ(rig.inner.absorbs(), 1);
  const DraftRequest requests[] = {rig.request(10, 4), rig.request(10, 6)};
  const std::vector<Draft> drafts = rig.synthetic.draft(requests);
  EXPECT_EQ(rig.inner.passes(), 1) << "one inner pass for the whole batch";
  ASSERT_EQ(drafts.size(), 2u);
  const std::vector<float> expected = {0.9f, 0.72f, 0.504f, 0.3024f, 0.18144f, 0.108864f};
  ASSERT_EQ(drafts[1].chances.size(), 6u);
  for (size_t depth = 0; depth < 6; ++depth) EXPECT_NEAR(drafts[1].chances[depth], expected[depth], 1e-6);
  ASSERT_EQ(drafts[0].chances.size(), 4u);
  EXPECT_EQ(drafts[0].tokens, std::vector<int32_t>(drafts[1].tokens.begin(), drafts[1].tokens.begin() + 4))
      << "the same anchor gets the same keyed proposals whatever the depth";
  rig.synthetic.release(1);
  EXPECT_EQ(rig.inner.release_counts().at(1), 1);
}

TEST(SyntheticAcceptanceDrafter, WrongProposalsAreNeverTheRecordedToken) {
  AcceptanceProfile profile;
  profile.conditional = {0.0, 0.0, 0.0};  // always wrong
  DirectRig rig(400, 2, profile);           // a two-token vocabulary: the wrong token is the other one
  ASSERT_TRUE(rig.synthetic.absorb(1, 0, 1, {}).ok());
  for (int64_t anchor = 1; anchor + 3 < 400; ++anchor) {
    ASSERT_TRUE(rig.synthetic.absorb(1, anchor - 1, 1, {}).ok());
    const DraftRequest request = rig.request(anchor, 3);
    const std::vector<Draft> drafts = rig.synthetic.draft(std::span(&request, 1));
    for (int depth = 0; depth < 3; ++depth) {
      EXPECT_EQ(drafts[0].tokens[depth], 1 - rig.sequence[anchor + 1 + depth]) << anchor << " " << depth;
    }
  }
}

TEST(SyntheticAcceptanceDrafter, InnerFaultsStayFaultsAndAForeignRecordIsCountedNotUsed) {
  AcceptanceProfile profile;
  profile.conditional = {1.0, 1.0};
  DirectRig rig(64, 50, profile);
  ASSERT_TRUE(rig.synthetic.absorb(1, 0, 10, {}).ok());
  // The inner drafter refuses an anchor its context does not reach: the decorator passes that error on.
  const DraftRequest gap = rig.request(20, 2);
  std::vector<Draft> drafts = rig.synthetic.draft(std::span(&gap, 1));
  EXPECT_FALSE(drafts[0].status.ok());
  // An anchor token that is not the record's: the record belongs to another run, so nothing is replaced.
  DraftRequest foreign = rig.request(10, 2);
  foreign.anchor_token = (foreign.anchor_token + 1) % 50;
  drafts = rig.synthetic.draft(std::span(&foreign, 1));
  ASSERT_TRUE(drafts[0].status.ok());
  EXPECT_EQ(rig.synthetic.record_mismatches(), 1);
  EXPECT_NE(drafts[0].tokens[0], rig.sequence[11]) << "the always-wrong inner proposal was kept";
  // With q = 1 and the right anchor every proposal is the record.
  const DraftRequest right = rig.request(10, 2);
  drafts = rig.synthetic.draft(std::span(&right, 1));
  EXPECT_EQ(drafts[0].tokens, (std::vector<int32_t>{rig.sequence[11], rig.sequence[12]}));
}

TEST(SyntheticAcceptanceDrafter, ThroughTheLanesWithFreeRowsTheMeasuredMeanIsTheProfiles) {
  // Verify costs the same whatever its rows and drafting costs nothing: pricing buys every draft (an unlimited
  // depth budget), so the measured mean accepted length over drafted windows is the profile's.
  FixedClock clock;
  FakeTargetOptions target_options;
  target_options.clock = &clock;
  target_options.verify_fixed_ms = 10.0;
  target_options.verify_row_ms = 0.0;
  const std::vector<Arrival> arrivals =
      endless_arrivals(4, target_options.shape.vocab_size, 2500, [](int index) { return index % 2 == 1; });
  FakeTarget plain_target(target_options);
  const std::vector<Reply> plain = run_each_alone_plain(plain_target, arrivals);
  FakeDrafterOptions inner_options;
  inner_options.max_depth = 9;
  inner_options.wrong_rate = 1.0;
  FakeDrafter inner(inner_options);
  const AcceptanceProfile profile = profile_or_die(5.02, 9);
  SyntheticAcceptanceDrafter synthetic(inner, {profile, 7, target_options.shape.vocab_size});
  for (size_t index = 0; index < arrivals.size(); ++index) {
    std::vector<int32_t> sequence = arrivals[index].request.prompt;
    sequence.insert(sequence.end(), plain[index].tokens.begin(), plain[index].tokens.end());
    synthetic.expect(static_cast<StreamId>(index + 1), sequence);
  }
  FakeTarget target(target_options);
  auto lanes = Lanes::create(target, &synthetic, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  for (size_t index = 0; index < arrivals.size(); ++index) EXPECT_EQ((*replies)[index].tokens, plain[index].tokens);
  const LanesStats& stats = (*lanes)->stats();
  ASSERT_GT(stats.windows_with_drafts, 1000);
  const double mean = 1.0 + double(stats.drafts_accepted) / double(stats.windows_with_drafts);
  EXPECT_NEAR(mean, 5.02, 0.02 * 5.02) << stats.windows_with_drafts << " drafted windows, " << stats.drafts_verified
                               << " drafts verified";
  EXPECT_GT(double(stats.drafts_verified) / double(stats.windows_with_drafts), 8.5) << "full-depth windows";
  EXPECT_EQ(synthetic.record_mismatches(), 0);
  EXPECT_GE(inner.passes(), stats.drafter_passes) << "every lanes pass reached the inner drafter";
}

struct NanoCase {
  int streams;
  bool sampled;
};

class SyntheticAcceptanceOnNano : public testing::TestWithParam<NanoCase> {};

TEST_P(SyntheticAcceptanceOnNano, DraftedRepliesWithSyntheticAcceptanceEqualPlainReplies) {
  if (!std::filesystem::exists(kNanoTarget + "/config.json") || !std::filesystem::exists(kNanoDrafter + "/config.json"))
    GTEST_SKIP() << "no nano pair under models/nano";
  LoadOptions load;
  load.threads = 2;
  load.max_rows = 64;
  load.exact_width_probe = 8;
  auto target = load_target(kNanoTarget, load);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  DrafterOptions drafter_options;
  drafter_options.threads = 2;
  drafter_options.max_streams = 16;
  auto dspark = load_drafter(kNanoDrafter, **target, drafter_options);
  ASSERT_TRUE(dspark.ok()) << dspark.status().to_string();
  const int vocab = (*target)->facts().vocab_size;

  std::vector<Arrival> arrivals;
  for (int index = 0; index < GetParam().streams; ++index) {
    Arrival arrival;
    arrival.round = index % 3;
    arrival.request = make_fake_request(index, GetParam().sampled, vocab);
    arrival.request.max_tokens = (GetParam().streams > 4 ? 8 : 24) + index % 5;
    arrivals.push_back(arrival);
  }
  const std::vector<Reply> plain = run_each_alone_plain(**target, arrivals);
  SyntheticAcceptanceDrafter synthetic(**dspark, {profile_or_die(5.02, (*dspark)->facts().max_depth), 3, vocab});
  // The lanes number streams 1, 2, ... in submit order: by arrival round, then by index.
  std::vector<size_t> submit_order(arrivals.size());
  std::iota(submit_order.begin(), submit_order.end(), size_t{0});
  std::stable_sort(submit_order.begin(), submit_order.end(),
                   [&](size_t a, size_t b) { return arrivals[a].round < arrivals[b].round; });
  for (size_t position = 0; position < submit_order.size(); ++position) {
    const size_t index = submit_order[position];
    std::vector<int32_t> sequence = arrivals[index].request.prompt;
    sequence.insert(sequence.end(), plain[index].tokens.begin(), plain[index].tokens.end());
    synthetic.expect(static_cast<StreamId>(position + 1), sequence);
  }
  FixedClock clock;
  LanesOptions options = sampled_any_streams();
  options.max_streams = 16;
  options.calibration.repeats = 1;
  auto lanes = Lanes::create(**target, &synthetic, options, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_FALSE(plain[index].tokens.empty());
    EXPECT_EQ((*replies)[index].tokens, plain[index].tokens) << "stream " << index;
    EXPECT_EQ((*replies)[index].finish, plain[index].finish) << "stream " << index;
  }
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
  EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
  EXPECT_EQ(synthetic.record_mismatches(), 0);
}

INSTANTIATE_TEST_SUITE_P(Streams, SyntheticAcceptanceOnNano,
                         testing::Values(NanoCase{1, false}, NanoCase{1, true}, NanoCase{4, false}, NanoCase{4, true},
                                         NanoCase{16, false}, NanoCase{16, true}));

}  // namespace
}  // namespace ls
