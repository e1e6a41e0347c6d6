// Taps that stay on the device: the CUDA target leaves its taps in device memory, the CUDA DSpark drafter absorbs
// every stream of a forward in one batched call, and the lanes' replies stay equal to plain replies run alone.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/load.h"
#include "lanes/lanes.h"
#include "cuda_target_test_util.h"
#include "lanes/testing/harness.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/load.h"

namespace ls {
namespace {

const std::string kNanoTarget = std::string(LS_SOURCE_DIR) + "/models/nano/target";
const std::string kNanoDrafter = std::string(LS_SOURCE_DIR) + "/models/nano/drafter";

std::unique_ptr<Target> nano_target(int max_rows = 128) {
  if (!std::filesystem::exists(kNanoTarget + "/config.json")) return nullptr;
  auto loaded = load_target(kNanoTarget, lfm2::cuda_test::cuda_options(max_rows));
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

std::unique_ptr<Drafter> nano_drafter(Target& target) {
  if (!std::filesystem::exists(kNanoDrafter + "/config.json")) return nullptr;
  DrafterOptions options;
  options.device = Device::Cuda;
  options.max_streams = 16;
  auto loaded = load_drafter(kNanoDrafter, target, options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

class CudaLanesDeviceTaps : public ::testing::TestWithParam<std::pair<int, bool>> {};

TEST_P(CudaLanesDeviceTaps, DraftedRepliesWithTapsOnTheDeviceEqualPlainRepliesRunAlone) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_target();
  if (!target) GTEST_SKIP() << "no nano target";
  auto drafter = nano_drafter(*target);
  if (!drafter) GTEST_SKIP() << "no nano drafter";
  const auto [streams, sampled] = GetParam();
  const std::vector<Arrival> arrivals = staggered_arrivals(streams, sampled, target->facts().vocab_size, 12);
  std::vector<Reply> alone = run_each_alone_plain(*target, arrivals);
  FixedClock clock;
  LanesOptions options;
  options.measure_width = 8;
  options.max_streams = 16;
  options.calibration.repeats = 1;
  options.pricing.always_draft = true;  // every drafting stream drafts, whatever the timings
  auto lanes = Lanes::create(*target, drafter.get(), options, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  ASSERT_TRUE((*lanes)->device_taps());
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_FALSE(alone[index].tokens.empty());
    EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index;
  }
  const LanesStats& stats = (*lanes)->stats();
  EXPECT_EQ(stats.drafter_faults, 0);
  EXPECT_GT(stats.drafts_verified, 0);
  EXPECT_GT(stats.absorb_calls, 0);
  EXPECT_GT(stats.absorbed_rows, stats.absorb_calls);
  target->keep_taps_on_device(false);
}

INSTANTIATE_TEST_SUITE_P(Nano, CudaLanesDeviceTaps,
                         ::testing::Values(std::pair{1, false}, std::pair{4, true}, std::pair{16, false}));

// `count` token ids of a prompt, different per `seed`.
std::vector<int32_t> prompt_ids(int count, int seed) {
  std::vector<int32_t> ids;
  for (int index = 0; index < count; ++index) ids.push_back(16 + (index * 97 + seed * 31 + index * index) % 4000);
  return ids;
}

// Two streams' prompt rows through one target forward, tapped to the host and (same rows, fresh streams) left on
// the device; the drafter absorbs the host taps stream by stream and the device taps in one batch. The second
// case (100 + 60 rows) takes two chunks of the batched absorb, the second stream's rows split between them.
class CudaLanesBatchedAbsorb : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(CudaLanesBatchedAbsorb, ABatchedDeviceAbsorbDraftsLikeHostAbsorbsOfTheSameRows) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_target(256);
  if (!target) GTEST_SKIP() << "no nano target";
  auto drafter = nano_drafter(*target);
  if (!drafter) GTEST_SKIP() << "no nano drafter";
  ASSERT_GE(drafter->facts().tap_device, 0);
  ASSERT_TRUE(target->set_taps(drafter->facts().tap_layers).ok());
  const std::vector<int32_t> first = prompt_ids(GetParam().first, 1);
  const std::vector<int32_t> second = prompt_ids(GetParam().second, 2);
  auto run = [&](StreamId a, StreamId b) {
    std::vector<Window> windows(2);
    windows[0].stream = a;
    windows[0].tokens = first;
    windows[0].first_drawn_row = static_cast<int>(first.size()) - 1;
    windows[1].stream = b;
    windows[1].tokens = second;
    windows[1].first_drawn_row = static_cast<int>(second.size()) - 1;
    Result<Verified> verified = target->forward(windows);
    EXPECT_TRUE(verified.ok()) << verified.status().to_string();
    return verified;
  };
  Result<Verified> host = run(1, 2);
  ASSERT_TRUE(host.ok());
  ASSERT_TRUE(target->commit(1, static_cast<int>(first.size())).ok());
  ASSERT_TRUE(target->commit(2, static_cast<int>(second.size())).ok());
  const size_t row_values = host->taps.size() / static_cast<size_t>(host->row_begin.back());
  ASSERT_TRUE(drafter->absorb(1, 0, static_cast<int>(first.size()),
                              std::span<const float>(host->taps).first(first.size() * row_values)).ok());
  ASSERT_TRUE(drafter->absorb(2, 0, static_cast<int>(second.size()),
                              std::span<const float>(host->taps).subspan(first.size() * row_values,
                                                                         second.size() * row_values)).ok());
  ASSERT_TRUE(target->keep_taps_on_device(true));
  Result<Verified> device = run(3, 4);
  ASSERT_TRUE(device.ok());
  EXPECT_TRUE(device->taps.empty());
  ASSERT_NE(device->device_taps.data, nullptr);
  EXPECT_EQ(device->device_taps.row_values, static_cast<int64_t>(row_values));
  // A refusal (rows past the forward) absorbs nothing.
  const TapRows outside[] = {{3, 0, 0, static_cast<int>(first.size())},
                             {4, 0, static_cast<int64_t>(first.size() + second.size()) - 2, 8}};
  EXPECT_EQ(drafter->absorb_device(outside, device->device_taps).code(), ErrorCode::InvalidArgument);
  const TapRows both[] = {{3, 0, 0, static_cast<int>(first.size())},
                          {4, 0, static_cast<int64_t>(first.size()), static_cast<int>(second.size())}};
  ASSERT_TRUE(drafter->absorb_device(both, device->device_taps).ok());
  // absorb_device returns without waiting; settle waits (the lanes call it before the target's next forward).
  ASSERT_TRUE(drafter->settle().ok());
  ASSERT_TRUE(drafter->settle().ok());
  target->keep_taps_on_device(false);

  std::vector<DraftRequest> requests(4);
  for (int index = 0; index < 4; ++index) {
    requests[index].stream = static_cast<StreamId>(index + 1);
    requests[index].anchor_token = index % 2 == 0 ? 17 : 29;
    requests[index].anchor_position = static_cast<int64_t>(index % 2 == 0 ? first.size() : second.size());
    requests[index].depth = drafter->facts().max_depth;
  }
  std::vector<Draft> drafts = drafter->draft(requests);
  ASSERT_EQ(drafts.size(), 4u);
  for (int index = 0; index < 2; ++index) {
    const Draft& from_host = drafts[index];
    const Draft& from_device = drafts[index + 2];
    ASSERT_TRUE(from_host.status.ok() && from_device.status.ok());
    // The same bf16 features; the GEMMs see a different row count, so values agree to bf16 tolerance.
    ASSERT_EQ(from_host.chances.size(), from_device.chances.size());
    for (size_t k = 0; k < from_host.chances.size(); ++k) {
      EXPECT_NEAR(from_host.chances[k], from_device.chances[k], 2e-2) << "stream " << index << " depth " << k;
    }
    EXPECT_EQ(from_host.tokens.front(), from_device.tokens.front()) << "stream " << index;
  }
}

INSTANTIATE_TEST_SUITE_P(Nano, CudaLanesBatchedAbsorb, ::testing::Values(std::pair{10, 6}, std::pair{100, 60}));

// Setting the same tap layers again (every Lanes::create does) keeps the captured graphs; other layers drop them.
// Before, each drafted lanes_bench run cleared every graph of the shared target, plain's included, and paid every
// shape's eager run and capture again inside its timed rounds.
TEST(CudaLanesDeviceTaps, SettingTheSameTapLayersAgainKeepsTheCapturedGraphs) {
  LS_SKIP_WITHOUT_DEVICE();
  auto loaded = nano_target();
  if (!loaded) GTEST_SKIP() << "no nano target";
  auto* target = dynamic_cast<lfm2::CudaTarget*>(loaded.get());
  ASSERT_NE(target, nullptr);
  const std::vector<int> layers = {1, 3};
  ASSERT_TRUE(target->set_taps(layers).ok());
  const std::vector<int32_t> prompt = {11, 400, 23};
  std::vector<Window> windows(2);
  std::vector<int32_t> pending(2, 0);
  for (int index = 0; index < 2; ++index) {
    windows[index].stream = 40 + index;
    windows[index].tokens = prompt;
  }
  Result<Verified> prefill = target->forward(windows);
  ASSERT_TRUE(prefill.ok()) << prefill.status().to_string();
  for (int index = 0; index < 2; ++index) {
    ASSERT_TRUE(target->commit(windows[index].stream, 3).ok());
    pending[index] = prefill->draws[prefill->row_begin[index] + 2];
  }
  int64_t position = 3;
  auto step = [&]() {
    for (int index = 0; index < 2; ++index) {
      windows[index].tokens = std::span<const int32_t>(&pending[index], 1);
      windows[index].start_position = position;
      windows[index].want_taps = index == 0;
    }
    Result<Verified> verified = target->forward(windows);
    ASSERT_TRUE(verified.ok()) << verified.status().to_string();
    for (int index = 0; index < 2; ++index) {
      ASSERT_TRUE(target->commit(windows[index].stream, 1).ok());
      pending[index] = verified->draws[verified->row_begin[index]];
    }
    ++position;
  };
  for (int round = 0; round < 3; ++round) step();
  const int graphs = target->graph_count();
  ASSERT_GT(graphs, 0);
  ASSERT_TRUE(target->set_taps(layers).ok());
  EXPECT_EQ(target->graph_count(), graphs);
  step();
  EXPECT_EQ(target->graph_count(), graphs);  // replayed, not captured again
  ASSERT_TRUE(target->set_taps(std::vector<int>{1, 4}).ok());
  EXPECT_EQ(target->graph_count(), 0);
  step();
  for (int index = 0; index < 2; ++index) target->release(windows[index].stream);
}

// A round of dormant streams asks for no taps: the forward then copies none (its graph is a plain forward's) and
// returns no device taps, with the same draws as a forward of the same rows that taps.
TEST(CudaLanesDeviceTaps, AForwardNoWindowWantsTapsOfCopiesNoneAndDrawsTheSame) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_target();
  if (!target) GTEST_SKIP() << "no nano target";
  const std::vector<int> layers = {1, 3, 4, 6};
  ASSERT_TRUE(target->set_taps(layers).ok());
  const std::vector<int32_t> tokens = {11, 400, 23, 9, 1000, 77};
  for (bool on_device : {true, false}) {
    ASSERT_EQ(target->keep_taps_on_device(on_device), true);
    auto run = [&](StreamId base, bool wants) {
      std::vector<Window> windows(2);
      for (int index = 0; index < 2; ++index) {
        windows[index].stream = base + index;
        windows[index].tokens = std::span<const int32_t>(tokens).first(3 + 3 * index);
        windows[index].want_taps = wants;
      }
      Result<Verified> verified = target->forward(windows);
      EXPECT_TRUE(verified.ok()) << verified.status().to_string();
      for (const Window& window : windows) target->release(window.stream);
      return verified;
    };
    const StreamId base = on_device ? 10 : 20;
    Result<Verified> none = run(base, false);
    Result<Verified> tapped = run(base + 2, true);
    ASSERT_TRUE(none.ok() && tapped.ok());
    EXPECT_EQ(none->device_taps.data, nullptr);
    EXPECT_TRUE(none->taps.empty());
    EXPECT_EQ(none->tap_row_begin, (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(none->draws, tapped->draws);
    if (on_device) {
      EXPECT_NE(tapped->device_taps.data, nullptr);
    } else {
      EXPECT_EQ(tapped->taps.size(), 9 * layers.size() * static_cast<size_t>(target->facts().hidden_size));
    }
  }
  target->keep_taps_on_device(false);
}

TEST(CudaLanesDeviceTaps, ARestartedContextDraftsAtTheAnchorAndRefusesRewritesBeforeIt) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_target();
  if (!target) GTEST_SKIP() << "no nano target";
  auto drafter = nano_drafter(*target);
  if (!drafter) GTEST_SKIP() << "no nano drafter";
  ASSERT_TRUE(drafter->facts().restarts);
  const int64_t row_values =
      static_cast<int64_t>(drafter->facts().tap_layers.size()) * target->facts().hidden_size;
  std::vector<float> taps(static_cast<size_t>(6 * row_values));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = round_to_bf16(std::sin(0.37f * static_cast<float>(i)));
  ASSERT_TRUE(drafter->absorb(9, 0, 3, std::span<const float>(taps).first(3 * row_values)).ok());
  EXPECT_EQ(drafter->restart(9, 2).code(), ErrorCode::InvalidArgument);  // before what it covers
  ASSERT_TRUE(drafter->restart(9, 40).ok());
  EXPECT_EQ(drafter->absorb(9, 39, 1, std::span<const float>(taps).first(row_values)).code(),
            ErrorCode::InvalidArgument);  // a rewrite before the restart
  ASSERT_TRUE(drafter->absorb(9, 40, 3, std::span<const float>(taps).subspan(3 * row_values)).ok());
  DraftRequest request;
  request.stream = 9;
  request.anchor_token = 5;
  request.anchor_position = 43;
  request.depth = drafter->facts().max_depth;
  std::vector<Draft> drafts = drafter->draft({&request, 1});
  ASSERT_EQ(drafts.size(), 1u);
  EXPECT_TRUE(drafts[0].status.ok()) << drafts[0].status.to_string();
  EXPECT_EQ(static_cast<int>(drafts[0].tokens.size()), request.depth);
  request.anchor_position = 6;  // the anchor must be where the context ends, restart included
  EXPECT_FALSE(drafter->draft({&request, 1})[0].status.ok());
}

}  // namespace
}  // namespace ls
#endif  // LS_HAVE_CUDA
