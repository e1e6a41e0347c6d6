// The CUDA target through the lanes: drafted replies on the GPU equal the GPU's plain replies run alone; and the
// `--device` flag (no device needed).
// Shared setup: cuda_target_test_util.h.
#include <gtest/gtest.h>

#include "cli/options.h"

// `--device` (generate): cpu and cuda parse, anything else is refused by name (no device needed).
TEST(DeviceFlag, AcceptsCpuAndCudaAndRefusesOtherNamesByName) {
  EXPECT_EQ(*ls::cli::parse_device("cpu"), ls::Device::Cpu);
  EXPECT_EQ(*ls::cli::parse_device("cuda"), ls::Device::Cuda);
  const ls::Result<ls::Device> refused = ls::cli::parse_device("gpu");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ls::ErrorCode::InvalidArgument);
  EXPECT_NE(refused.status().message().find("'gpu'"), std::string::npos);
}

#ifdef LS_HAVE_CUDA
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "cuda_target_test_util.h"

namespace ls::lfm2 {
namespace {

using namespace cuda_test;

// Exactness through the lanes: drafted replies on the GPU equal the GPU's plain replies run alone.
class CudaLanes : public ::testing::TestWithParam<std::pair<int, bool>> {};

TEST_P(CudaLanes, DraftedRepliesOnTheGpuEqualPlainRepliesRunAlone) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_cuda_target(128);
  if (!target) GTEST_SKIP() << "no nano target";
  const auto [streams, sampled] = GetParam();
  const std::vector<Arrival> arrivals = staggered_arrivals(streams, sampled, target->facts().vocab_size, 12);
  std::vector<Reply> alone = run_each_alone_plain(*target, arrivals);
  RecordedDrafterOptions drafter_options;
  drafter_options.tap_layers = {1, 4};
  drafter_options.vocab_size = target->facts().vocab_size;
  drafter_options.hidden_size = target->facts().hidden_size;
  drafter_options.wrong_rate = 0.3;
  RecordedDrafter drafter(drafter_options);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    std::vector<int32_t> sequence = arrivals[index].request.prompt;
    sequence.insert(sequence.end(), alone[index].tokens.begin(), alone[index].tokens.end());
    drafter.expect(static_cast<StreamId>(index + 1), sequence);
  }
  FixedClock clock;
  // Sampled drafting among several streams is asked for (the default buys sampled passes in 1-stream rounds only).
  LanesOptions options = sampled_any_streams();
  options.measure_width = 8;
  options.max_streams = 16;
  options.calibration.repeats = 1;
  auto lanes = Lanes::create(*target, &drafter, options, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  ASSERT_GE((*lanes)->width(), 2);
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_FALSE(alone[index].tokens.empty());
    EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index;
  }
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Nano, CudaLanes,
                         ::testing::Values(std::pair{1, false}, std::pair{1, true}, std::pair{4, false},
                                           std::pair{4, true}, std::pair{16, false}, std::pair{16, true}));


}  // namespace
}  // namespace ls::lfm2
#endif  // LS_HAVE_CUDA
