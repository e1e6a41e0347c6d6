// Exactness of the lanes on real LFM2 targets (the tiny random dense checkpoint of the golden tests, and the bundled
// nano target once it is in models/nano/target), with a drafter that proposes from a plain run's recorded replies,
// right at a rate.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "model/load.h"
#include "nano_pair.h"

namespace ls {
namespace {

const std::string kTinyDir = std::string(LS_SOURCE_DIR) + "/tests/golden/lfm2_dense";
const std::string kNanoDir = nano_target_dir();

struct RealCase {
  const std::string* model_dir;
  int streams;
  bool sampled;
  int tokens = 16;  // max_tokens of stream 0; later streams ask up to 8 more
};

class LanesOnRealTarget : public testing::TestWithParam<RealCase> {};

TEST_P(LanesOnRealTarget, DraftedRepliesEqualPlainRepliesRunAloneTokenForToken) {
  const std::string& model_dir = *GetParam().model_dir;
  if (!std::filesystem::exists(model_dir + "/config.json")) GTEST_SKIP() << "no checkpoint at " << model_dir;
  LoadOptions load;
  load.threads = 2;
  load.max_rows = 64;
  auto target = load_target(model_dir, load);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const TargetFacts& facts = (*target)->facts();

  const std::vector<Arrival> arrivals =
      staggered_arrivals(GetParam().streams, GetParam().sampled, facts.vocab_size, GetParam().tokens);
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
  LanesOptions options = sampled_any_streams();
  options.measure_width = 8;
  options.max_streams = 16;
  options.calibration.repeats = 1;  // timing steers rows, never tokens: one timed run keeps the test fast
  auto lanes = Lanes::create(**target, &drafter, options, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  ASSERT_GE((*lanes)->width(), 2) << "the CPU target should verify windows exactly";
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  expect_replies_equal_alone(*replies, alone);
  EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
  for (auto [stream, releases] : drafter.release_counts()) EXPECT_EQ(releases, 1) << "stream " << stream;
}

std::string real_case_name(const testing::TestParamInfo<RealCase>& info) {
  return std::to_string(info.param.streams) + (info.param.sampled ? "Sampled" : "Greedy");
}

INSTANTIATE_TEST_SUITE_P(TinyLfm2, LanesOnRealTarget,
                         testing::Values(RealCase{&kTinyDir, 1, false}, RealCase{&kTinyDir, 1, true},
                                         RealCase{&kTinyDir, 4, false}, RealCase{&kTinyDir, 4, true},
                                         RealCase{&kTinyDir, 16, false}, RealCase{&kTinyDir, 16, true}),
                         real_case_name);

INSTANTIATE_TEST_SUITE_P(NanoLfm2, LanesOnRealTarget,
                         testing::Values(RealCase{&kNanoDir, 1, false, 24}, RealCase{&kNanoDir, 4, true, 12},
                                         RealCase{&kNanoDir, 16, false, 6}),
                         real_case_name);

TEST(LanesOnRealTarget, AForwardWhoseWindowsWantNoTapsReturnsNoTapsAndTheSameDraws) {
  // A round of dormant streams asks for no taps: the CPU target then copies none (before, it tapped every row of
  // every forward once taps were declared). One window wanting taps brings every row's taps back.
  if (!std::filesystem::exists(kTinyDir + "/config.json")) GTEST_SKIP() << "no checkpoint at " << kTinyDir;
  LoadOptions load;
  load.threads = 2;
  auto target = load_target(kTinyDir, load);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const std::vector<int> layers = {0, 1};
  ASSERT_TRUE((*target)->set_taps(layers).ok());
  const TargetFacts& facts = (*target)->facts();
  const std::vector<int32_t> tokens = {3, 17, 5, 9, 11};
  auto run = [&](StreamId base, bool first_wants, bool second_wants) {
    std::vector<Window> windows(2);
    for (int index = 0; index < 2; ++index) {
      windows[index].stream = base + index;
      windows[index].tokens = std::span<const int32_t>(tokens).first(3 + index);
      windows[index].want_taps = index == 0 ? first_wants : second_wants;
    }
    Result<Verified> verified = (*target)->forward(windows);
    for (const Window& window : windows) (*target)->release(window.stream);
    return verified;
  };
  Result<Verified> none = run(10, false, false);
  Result<Verified> one = run(20, false, true);
  ASSERT_TRUE(none.ok() && one.ok());
  EXPECT_TRUE(none->taps.empty()) << none->taps.size() << " tap values for windows that wanted none";
  EXPECT_EQ(none->tap_row_begin, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(none->draws, one->draws);
  // The window that wanted taps gets them (rows 3 .. 6 of the forward), whatever the other one asked.
  const std::vector<int64_t>& begin = one->tap_row_begin.empty() ? one->row_begin : one->tap_row_begin;
  ASSERT_EQ(begin.size(), 3u);
  EXPECT_EQ(begin[2] - begin[1], 4);
  EXPECT_EQ(one->taps.size(), static_cast<size_t>(begin[2]) * layers.size() * facts.hidden_size);
}

}  // namespace
}  // namespace ls
