// Exactness of the lanes on fakes: every reply equals the same request run alone without a drafter, token for token.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

struct Case {
  int streams;
  bool sampled;
  bool drafter;
  bool device_taps = false;  // taps stay in the target and reach the drafter in one batched absorb per forward
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::to_string(info.param.streams) + "Streams" + (info.param.sampled ? "Sampled" : "Greedy") +
         (info.param.drafter ? "Drafted" : "Plain") + (info.param.device_taps ? "DeviceTaps" : "");
}

FakeTargetOptions target_options() {
  FakeTargetOptions options;
  options.max_rows = 48;
  options.exact_width = 8;
  options.eos_token_id = 5;  // some replies end at eos, some inside a drafted window
  return options;
}

FakeDrafterOptions drafter_options() {
  FakeDrafterOptions options;
  options.max_depth = 6;
  options.wrong_rate = 0.25;
  return options;
}

// Staggered arrivals; every third stream asks for no drafts, every fifth caps its drafts at 2.
std::vector<Arrival> staggered(int streams, bool sampled) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.round = (index * 3) % 11;
    arrival.request = make_fake_request(index, sampled, 64);
    if (index % 3 == 2) arrival.request.draft = false;
    if (index % 5 == 4) arrival.request.max_draft = 2;
    arrivals.push_back(arrival);
  }
  return arrivals;
}

class LanesExactness : public testing::TestWithParam<Case> {};

TEST_P(LanesExactness, EveryReplyEqualsTheSameRequestRunAloneWithoutADrafter) {
  const Case& param = GetParam();
  FakeTargetOptions device_target_options = target_options();
  device_target_options.device_taps = param.device_taps;
  FakeTarget target(device_target_options);
  FakeDrafterOptions device_drafter_options = drafter_options();
  device_drafter_options.device_taps = param.device_taps;
  // As the CUDA drafter: a device absorb's reads happen after it returns, so the lanes must settle them before the
  // target's next forward overwrites the taps (a read of the next forward's rows fails the fake's history check).
  device_drafter_options.absorb_in_flight = param.device_taps;
  FakeDrafter drafter(device_drafter_options);
  FixedClock clock;
  auto lanes = Lanes::create(target, param.drafter ? &drafter : nullptr, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  std::vector<Arrival> arrivals = staggered(param.streams, param.sampled);
  const int64_t setup_tap_rows = target.tap_rows();
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  std::vector<Reply> alone = run_each_alone_plain(target_options(), arrivals);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index;
    EXPECT_EQ((*replies)[index].finish, alone[index].finish) << "stream " << index;
    EXPECT_FALSE(alone[index].tokens.empty());
  }
  if (param.drafter) {
    // The drafter really took part: drafts were verified and many landed, in shared passes when streams overlap.
    // No drafter fault: a stale or rejected row absorbed, or a wrong anchor, would show up here.
    EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
    EXPECT_GT((*lanes)->stats().drafts_accepted, (*lanes)->stats().drafts_verified / 5);
    if (param.streams >= 4) {
      EXPECT_GE(drafter.widest_pass(), 2);
    }
    EXPECT_EQ((*lanes)->device_taps(), param.device_taps);
    // On the device no tap row is copied out, and each forward's rows reach the drafter in one call.
    if (param.device_taps) {
      EXPECT_EQ(target.tap_rows(), setup_tap_rows);
      EXPECT_GT(drafter.device_absorbs(), 0);
      EXPECT_EQ(drafter.device_absorbs(), (*lanes)->stats().absorb_calls);
      EXPECT_GE(drafter.settles(), (*lanes)->stats().verify_forwards);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FakePair, LanesExactness,
                         testing::Values(Case{1, false, false}, Case{1, false, true}, Case{1, true, true},
                                         Case{4, false, true}, Case{4, true, true}, Case{8, false, true},
                                         Case{8, true, false}, Case{8, true, true}, Case{16, false, true},
                                         Case{16, true, true}, Case{1, false, true, true},
                                         Case{4, true, true, true}, Case{16, false, true, true}),
                         case_name);

TEST(LanesExactness, DraftFalseStreamsNeverReachTheDrafter) {
  FakeTarget target(target_options());
  FakeDrafter drafter(drafter_options());
  FixedClock clock;
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  const int64_t calibration_absorbs = drafter.absorbs();
  const int64_t calibration_passes = drafter.passes();
  std::vector<Arrival> arrivals = staggered(6, true);
  for (Arrival& arrival : arrivals) arrival.request.draft = false;
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  EXPECT_EQ(drafter.absorbs(), calibration_absorbs);
  EXPECT_EQ(drafter.passes(), calibration_passes);
  std::vector<Reply> alone = run_each_alone_plain(target_options(), arrivals);
  for (size_t index = 0; index < arrivals.size(); ++index) EXPECT_EQ((*replies)[index].tokens, alone[index].tokens);
}

TEST(LanesExactness, CancellingMidReplyLeavesAPrefixAndOtherStreamsExact) {
  FakeTarget target(target_options());
  FakeDrafter drafter(drafter_options());
  FixedClock clock;
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  std::vector<Arrival> arrivals = staggered(8, true);
  for (Arrival& arrival : arrivals) arrival.request.max_tokens = 60;
  arrivals[1].cancel_round = arrivals[1].round + 3;
  arrivals[4].cancel_round = arrivals[4].round;  // cancelled while still queued
  arrivals[6].cancel_round = arrivals[6].round + 6;
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  std::vector<Reply> alone = run_each_alone_plain(target_options(), arrivals);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    const Reply& reply = (*replies)[index];
    if (arrivals[index].cancel_round >= 0) {
      EXPECT_EQ(reply.finish, FinishReason::Cancelled) << "stream " << index;
      ASSERT_LE(reply.tokens.size(), alone[index].tokens.size());
      EXPECT_TRUE(std::equal(reply.tokens.begin(), reply.tokens.end(), alone[index].tokens.begin()));
    } else {
      EXPECT_EQ(reply.tokens, alone[index].tokens) << "stream " << index;
    }
  }
  EXPECT_TRUE((*replies)[4].tokens.empty());
  EXPECT_FALSE((*replies)[1].tokens.empty());
  EXPECT_EQ(target.open_streams(), 0u);
  EXPECT_EQ(drafter.open_streams(), 0u);
}

TEST(LanesExactness, AStreamEndsExactlyWhereEosMaxTokensOrTheStopHookEndIt) {
  FakeTarget target(target_options());
  FakeDrafterOptions always_right = drafter_options();
  always_right.wrong_rate = 0.0;  // whole windows land, so ends fall inside drafted windows
  FakeDrafter drafter(always_right);
  FixedClock clock;
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  std::vector<Arrival> arrivals = staggered(12, false);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    arrivals[index].request.draft = true;
    arrivals[index].request.max_draft = -1;
    if (index % 2 == 0) {
      // Stop once the reply holds token 9 twice.
      arrivals[index].request.stop = [](std::span<const int32_t> generated) {
        return std::count(generated.begin(), generated.end(), 9) >= 2;
      };
    }
  }
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  std::vector<Reply> alone = run_each_alone_plain(target_options(), arrivals);
  int ended_by_stop = 0;
  int ended_by_length = 0;
  for (size_t index = 0; index < arrivals.size(); ++index) {
    const Reply& reply = (*replies)[index];
    EXPECT_EQ(reply.tokens, alone[index].tokens) << "stream " << index;
    EXPECT_EQ(reply.finish, alone[index].finish);
    if (reply.finish == FinishReason::Length) {
      ++ended_by_length;
      EXPECT_EQ(static_cast<int>(reply.tokens.size()), arrivals[index].request.max_tokens);
    } else {
      ASSERT_EQ(reply.finish, FinishReason::Stop);
      ++ended_by_stop;
      const bool eos = reply.tokens.back() == 5;
      const bool hook = std::count(reply.tokens.begin(), reply.tokens.end(), 9) == 2 && reply.tokens.back() == 9;
      EXPECT_TRUE(eos || hook) << "stream " << index;
    }
  }
  EXPECT_GT(ended_by_stop, 0);
  EXPECT_GT(ended_by_length, 0);
}

TEST(LanesExactness, LongPromptsPrefillInChunksAndStayExact) {
  FakeTargetOptions options = target_options();
  options.max_rows = 16;
  FakeTarget target(options);
  FakeDrafter drafter(drafter_options());
  FixedClock clock;
  auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok());
  std::vector<Arrival> arrivals = staggered(3, true);
  for (int position = 0; position < 70; ++position) arrivals[0].request.prompt.push_back((position * 7) % 64);
  for (int position = 0; position < 33; ++position) arrivals[2].request.prompt.push_back((position * 5) % 64);
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  std::vector<Reply> alone = run_each_alone_plain(options, arrivals);
  for (size_t index = 0; index < arrivals.size(); ++index) EXPECT_EQ((*replies)[index].tokens, alone[index].tokens);
}

TEST(LanesExactness, ARequestWithoutASeedDrawsWithTheSeedDerivedFromItsPrompt) {
  std::vector<Arrival> arrivals = {Arrival{0, make_fake_request(0, true, 64), -1}};
  arrivals[0].request.has_seed = false;
  std::vector<Arrival> seeded = arrivals;
  seeded[0].request.has_seed = true;
  seeded[0].request.sampling.seed = seed_from_prompt(arrivals[0].request.prompt);
  std::vector<Arrival> other_seed = seeded;
  other_seed[0].request.sampling.seed += 1;
  EXPECT_EQ(run_each_alone_plain(target_options(), arrivals)[0].tokens,
            run_each_alone_plain(target_options(), seeded)[0].tokens);
  EXPECT_NE(run_each_alone_plain(target_options(), seeded)[0].tokens,
            run_each_alone_plain(target_options(), other_seed)[0].tokens);
}

TEST(FakeTarget, RefusesAWindowWhosePositionIsNotTheHistoryLength) {
  FakeTarget target(target_options());
  std::vector<int32_t> tokens = {1, 2, 3};
  Window window;
  window.stream = 1;
  window.tokens = tokens;
  window.start_position = 0;
  ASSERT_TRUE(target.forward({&window, 1}).ok());
  ASSERT_TRUE(target.commit(1, 2).ok());
  window.start_position = 3;  // the history holds 2 positions
  auto refused = target.forward({&window, 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("PositionMismatch"), std::string::npos);
}

TEST(FakeTarget, ARolledBackWindowContinuesLikeTheKeptPrefixFedAlone) {
  FakeTarget target(target_options());
  std::vector<int32_t> long_window = {4, 8, 15, 16, 23};
  std::vector<int32_t> prefix = {4, 8};
  std::vector<int32_t> next = {42};
  Window window;
  window.stream = 1;
  window.tokens = long_window;
  ASSERT_TRUE(target.forward({&window, 1}).ok());
  ASSERT_TRUE(target.commit(1, 2).ok());  // rows 2..4 dropped and poisoned
  window.tokens = next;
  auto rolled_back = target.forward({&window, 1});
  ASSERT_TRUE(rolled_back.ok()) << rolled_back.status().to_string();
  window.stream = 2;
  window.tokens = prefix;
  ASSERT_TRUE(target.forward({&window, 1}).ok());
  ASSERT_TRUE(target.commit(2, 2).ok());
  window.tokens = next;
  auto fed_alone = target.forward({&window, 1});
  ASSERT_TRUE(fed_alone.ok());
  EXPECT_EQ(rolled_back->draws, fed_alone->draws);
  EXPECT_EQ(rolled_back->taps, fed_alone->taps);
}

}  // namespace
}  // namespace ls
