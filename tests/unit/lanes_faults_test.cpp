// Refusals, planted faults, releases and fairness of the lanes on fakes.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

FakeTargetOptions target_options() {
  FakeTargetOptions options;
  options.max_rows = 48;
  options.exact_width = 8;
  options.eos_token_id = 5;
  return options;
}

std::vector<Arrival> mixed_requests(int streams) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.round = index % 4;
    arrival.request = make_fake_request(index, index % 2 == 1, 64);
    arrivals.push_back(arrival);
  }
  return arrivals;
}

TEST(LanesRefusals, ADrafterOnAWidth1TargetIsRefusedWithDrafterNeedsWideVerify) {
  FakeTargetOptions options = target_options();
  options.exact_width = 1;
  FakeTarget target(options);
  FakeDrafter drafter(FakeDrafterOptions{});
  FixedClock clock;
  auto refused = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::DrafterNeedsWideVerify);
  EXPECT_EQ(drafter.absorbs(), 0);
  // The target still serves plainly at width 1.
  auto plain = Lanes::create(target, nullptr, sampled_any_streams(), clock);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(run_arrivals(**plain, mixed_requests(2)).ok());
}

TEST(LanesRefusals, ADrafterTappingALayerTheTargetLacksIsRefusedWithDraftTargetMismatch) {
  FakeTarget target(target_options());
  FakeDrafterOptions options;
  options.tap_layers = {1, 4};  // the fake target has 4 layers: 0 .. 3
  FakeDrafter drafter(options);
  FixedClock clock;
  auto refused = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::DraftTargetMismatch);
}

struct FaultCase {
  FakeDraftFault fault;
  bool confidences;
};

std::string fault_name(const testing::TestParamInfo<FaultCase>& info) {
  switch (info.param.fault) {
    case FakeDraftFault::NonfiniteChance: return "NonfiniteChance";
    case FakeDraftFault::InfiniteChance: return "InfiniteChance";
    case FakeDraftFault::OutOfRangePick: return "OutOfRangePick";
    case FakeDraftFault::DraftError: return "DraftError";
    case FakeDraftFault::AbsorbError: return "AbsorbError";
    default: return "None";
  }
}

class LanesDrafterFaults : public testing::TestWithParam<FaultCase> {};

TEST_P(LanesDrafterFaults, FallBackToPlainForThatStreamAreCountedAndOutputStaysExact) {
  FakeTarget target(target_options());
  FakeDrafterOptions options;
  options.max_depth = 5;
  options.wrong_rate = 0.2;
  options.confidences = GetParam().confidences;
  options.fault = GetParam().fault;
  options.fault_every = 7;
  FakeDrafter drafter(options);
  FixedClock clock;
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  const int64_t planted_at_setup = drafter.faults_planted();
  std::vector<Arrival> arrivals = mixed_requests(8);
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  std::vector<Reply> alone = run_each_alone_plain(target_options(), arrivals);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index;
    EXPECT_NE((*replies)[index].finish, FinishReason::Error);
  }
  const int64_t planted = drafter.faults_planted() - planted_at_setup;
  ASSERT_GT(planted, 0);
  EXPECT_EQ((*lanes)->stats().drafter_faults, planted);
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
  for (auto [stream, releases] : drafter.release_counts()) EXPECT_EQ(releases, 1) << "stream " << stream;
}

INSTANTIATE_TEST_SUITE_P(Planted, LanesDrafterFaults,
                         testing::Values(FaultCase{FakeDraftFault::NonfiniteChance, true},
                                         FaultCase{FakeDraftFault::InfiniteChance, true},
                                         FaultCase{FakeDraftFault::OutOfRangePick, false},
                                         FaultCase{FakeDraftFault::DraftError, false},
                                         FaultCase{FakeDraftFault::AbsorbError, false}),
                         fault_name);

TEST(LanesReleases, EveryStreamIsReleasedExactlyOnceFromTheTargetAndTheDrafter) {
  FakeTarget target(target_options());
  FakeDrafterOptions options;
  options.fault = FakeDraftFault::AbsorbError;  // some streams leave the drafter early
  options.fault_every = 11;
  FakeDrafter drafter(options);
  FixedClock clock;
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  std::vector<Arrival> arrivals = mixed_requests(12);
  arrivals[2].cancel_round = 3;
  arrivals[5].cancel_round = 0;
  arrivals[7].request.max_tokens = 1;  // ends at its prefill
  arrivals[8].request.draft = false;
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  // Cancelling an unknown or finished stream is harmless.
  (*lanes)->cancel((*replies)[0].stream);
  (*lanes)->cancel(9999);
  EXPECT_EQ(target.open_streams(), 0u);
  EXPECT_EQ(drafter.open_streams(), 0u);
  for (auto [stream, releases] : target.release_counts()) EXPECT_EQ(releases, 1) << "target stream " << stream;
  for (auto [stream, releases] : drafter.release_counts()) EXPECT_EQ(releases, 1) << "drafter stream " << stream;
  EXPECT_EQ(drafter.release_counts().count((*replies)[8].stream), 0u);  // draft: false never reached it
  EXPECT_EQ((*replies)[7].tokens.size(), 1u);
  EXPECT_EQ((*replies)[7].finish, FinishReason::Length);
}

TEST(LanesReleases, ATargetForwardFailureEndsItsStreamsWithAnErrorAndReleasesThem) {
  FakeTargetOptions options = target_options();
  options.fail_forward_at = 6;
  FakeTarget target(options);
  FixedClock clock;
  auto lanes = Lanes::create(target, nullptr, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  std::vector<Arrival> arrivals = mixed_requests(3);
  for (Arrival& arrival : arrivals) arrival.round = 0;
  for (const Arrival& arrival : arrivals) (*lanes)->submit(arrival.request);
  Status failed;
  while (!(*lanes)->idle()) {
    Status status = (*lanes)->round();
    if (!status.ok()) failed = status;
  }
  EXPECT_EQ(failed.code(), ErrorCode::Internal);
  int errors = 0;
  for (const StreamEvent& event : (*lanes)->take_events()) {
    if (event.finish == FinishReason::Error) {
      ++errors;
      EXPECT_NE(event.error.find("planted forward fault"), std::string::npos);
    }
  }
  EXPECT_EQ(errors, 3);
  EXPECT_EQ(target.open_streams(), 0u);
  for (auto [stream, releases] : target.release_counts()) EXPECT_EQ(releases, 1);
  // The lanes keep serving after the failure.
  (*lanes)->submit(arrivals[0].request);
  while (!(*lanes)->idle()) ASSERT_TRUE((*lanes)->round().ok());
}

TEST(LanesFairness, NoStreamStarvesAt64Streams) {
  FakeTargetOptions options = target_options();
  options.max_rows = 16;  // 16 streams per round at most: each of 64 must wait its turn
  FakeTarget target(options);
  FakeDrafter drafter(FakeDrafterOptions{});
  FixedClock clock;
  auto lanes = Lanes::create(target, &drafter, sampled_any_streams(), clock);
  ASSERT_TRUE(lanes.ok());
  const std::vector<Arrival> arrivals = endless_arrivals(64, 64, 80, [](int index) { return index % 2 == 0; });
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok());
  std::vector<Reply> alone = run_each_alone_plain(options, arrivals);
  for (size_t index = 0; index < replies->size(); ++index) {
    const Reply& reply = (*replies)[index];
    EXPECT_EQ(reply.tokens, alone[index].tokens);
    for (size_t turn = 1; turn < reply.rounds_with_tokens.size(); ++turn) {
      EXPECT_LE(reply.rounds_with_tokens[turn] - reply.rounds_with_tokens[turn - 1], 5)
          << "stream " << index << " waited from round " << reply.rounds_with_tokens[turn - 1];
    }
  }
}

}  // namespace
}  // namespace ls
