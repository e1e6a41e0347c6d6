// Exactness of the lanes on a real LFM2 target (the tiny random dense checkpoint of the golden tests), with a
// drafter that proposes from a plain run's recorded replies, right at a rate.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "model/load.h"

namespace ls {
namespace {

const std::string kModelDir = std::string(LS_SOURCE_DIR) + "/tests/golden/lfm2_dense";

struct RealCase {
  int streams;
  bool sampled;
};

class LanesOnRealTarget : public testing::TestWithParam<RealCase> {};

TEST_P(LanesOnRealTarget, DraftedRepliesEqualPlainRepliesRunAloneTokenForToken) {
  if (!std::filesystem::exists(kModelDir + "/config.json")) GTEST_SKIP() << "no checkpoint at " << kModelDir;
  LoadOptions load;
  load.threads = 2;
  load.max_rows = 64;
  auto target = load_target(kModelDir, load);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const TargetFacts& facts = (*target)->facts();

  std::vector<Arrival> arrivals;
  for (int index = 0; index < GetParam().streams; ++index) {
    Arrival arrival;
    arrival.round = index % 3;
    arrival.request = make_fake_request(index, GetParam().sampled, facts.vocab_size);
    arrival.request.max_tokens = 16 + index % 9;
    if (index % 4 == 3) arrival.request.draft = false;
    arrivals.push_back(arrival);
  }
  std::vector<Reply> alone = run_each_alone_plain(**target, arrivals);

  RecordedDrafterOptions drafter_options;
  drafter_options.tap_layers = {1, 3};
  drafter_options.vocab_size = facts.vocab_size;
  drafter_options.hidden_size = facts.hidden_size;
  drafter_options.wrong_rate = 0.3;
  RecordedDrafter drafter(drafter_options);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    std::vector<int32_t> sequence = arrivals[index].request.prompt;
    sequence.insert(sequence.end(), alone[index].tokens.begin(), alone[index].tokens.end());
    drafter.expect(static_cast<StreamId>(index + 1), sequence);  // lanes number streams 1, 2, ... in submit order
  }
  FixedClock clock;
  LanesOptions options;
  options.measure_width = 8;
  auto lanes = Lanes::create(**target, &drafter, options, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  ASSERT_GE((*lanes)->width(), 2) << "the CPU target should verify windows exactly";
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_FALSE(alone[index].tokens.empty());
    EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index;
    EXPECT_EQ((*replies)[index].finish, alone[index].finish) << "stream " << index;
  }
  EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
  for (auto [stream, releases] : drafter.release_counts()) EXPECT_EQ(releases, 1) << "stream " << stream;
}

INSTANTIATE_TEST_SUITE_P(TinyLfm2, LanesOnRealTarget,
                         testing::Values(RealCase{1, false}, RealCase{1, true}, RealCase{4, false},
                                         RealCase{4, true}, RealCase{16, false}, RealCase{16, true}),
                         [](const testing::TestParamInfo<RealCase>& info) {
                           return std::to_string(info.param.streams) + (info.param.sampled ? "Sampled" : "Greedy");
                         });

}  // namespace
}  // namespace ls
