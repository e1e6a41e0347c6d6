// The CUDA drafter with int8 weights (--drafter-bits 8) beside the nano CUDA target through the lanes: every reply
// equals the plain reply run alone (a drafter's bits change what it proposes, never a reply), drafts land, and the
// share of drafts accepted stays the bf16 drafter's (planted: every int8 column on its neighbour's scale loses it).
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_drafter_test_util.h"
#include "cuda_target_test_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/load.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "model/load.h"
#include "nano_lanes.h"

namespace ls {
namespace {

std::unique_ptr<Target> nano_target() {
  auto loaded = load_target(nano_target_dir(), lfm2::cuda_test::cuda_options(128));
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

std::unique_ptr<Drafter> nano_drafter(Target& target, int bits) {
  DrafterOptions options;
  options.device = Device::Cuda;
  options.max_streams = 16;
  options.bits = bits;
  auto loaded = load_drafter(nano_drafter_dir(), target, options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

// One lanes run of `arrivals`, every round drafting; the replies and the share of verified drafts accepted.
struct LanesRun {
  std::vector<Reply> replies;
  LanesStats stats;
  double accepted_share() const {
    return stats.drafts_verified > 0 ? static_cast<double>(stats.drafts_accepted) / stats.drafts_verified : 0.0;
  }
};

LanesRun run_lanes(Target& target, Drafter& drafter, const std::vector<Arrival>& arrivals) {
  FixedClock clock;
  LanesRun run;
  auto lanes = Lanes::create(target, &drafter, always_drafting_options(), clock);
  EXPECT_TRUE(lanes.ok()) << lanes.status().to_string();
  if (!lanes.ok()) return run;
  auto replies = run_arrivals(**lanes, arrivals);
  EXPECT_TRUE(replies.ok()) << replies.status().to_string();
  if (replies.ok()) run.replies = std::move(replies).value();
  run.stats = (*lanes)->stats();
  target.keep_taps_on_device(false);
  return run;
}

struct Int8Case {
  int streams;
  bool sampled;
  int splits = 0;       // set_int8_splits: the narrow matrices' K over CTAs
  bool x_l1 = false;    // set_int8_x_l1: x through L1 too
};

class CudaInt8DrafterLanes : public ::testing::TestWithParam<Int8Case> {};

// The int8 GEMMs take every GEMM of up to 32 rows here (set_int8_rows), so 1 and 4 streams run them in the pass and
// 16 streams in the absorbs.
TEST_P(CudaInt8DrafterLanes, DraftedRepliesEqualPlainRepliesRunAloneAndDraftsLand) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!nano_pair_present()) GTEST_SKIP() << "no nano pair";
  auto target = nano_target();
  ASSERT_NE(target, nullptr);
  auto drafter = nano_drafter(*target, 8);
  ASSERT_NE(drafter, nullptr);
  auto& cuda_drafter = dynamic_cast<dspark::cuda::CudaDsparkDrafter&>(*drafter);
  EXPECT_GE(cuda_drafter.int8_weights().matrices(), 7u);  // fc, 4 a layer, the absorb's K/V, the head
  cuda_drafter.set_int8_rows(dspark::cuda::kInt8GemmMaxRows);
  cuda_drafter.set_int8_splits(GetParam().splits);
  cuda_drafter.set_int8_x_l1(GetParam().x_l1);
  cuda_drafter.capture_bucket_graphs();
  const std::vector<Arrival> arrivals =
      staggered_arrivals(GetParam().streams, GetParam().sampled, target->facts().vocab_size, 24);
  const std::vector<Reply> alone = run_each_alone_plain(*target, arrivals);
  const LanesRun run = run_lanes(*target, *drafter, arrivals);
  expect_replies_equal_alone(run.replies, alone);
  EXPECT_EQ(run.stats.drafter_faults, 0);
  EXPECT_GT(run.stats.drafts_accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Nano, CudaInt8DrafterLanes,
                         ::testing::Values(Int8Case{1, false}, Int8Case{1, true}, Int8Case{4, false},
                                           Int8Case{4, true}, Int8Case{16, false}, Int8Case{16, true},
                                           Int8Case{1, false, 1}, Int8Case{4, true, 1}, Int8Case{1, false, 2},
                                           Int8Case{1, false, 0, true}, Int8Case{4, false, 2, true}),
                         [](const ::testing::TestParamInfo<Int8Case>& info) {
                           return std::to_string(info.param.streams) + (info.param.sampled ? "Sampled" : "Greedy") +
                                  (info.param.splits ? "KSplit" + std::to_string(info.param.splits) : "") +
                                  (info.param.x_l1 ? "XL1" : "");
                         });

// The share of drafts accepted with int8 weights against bf16's on the same greedy arrivals (1 and 4 streams): at
// least 0.85 of it; planted (every int8 column on its neighbour's scale) it must fall below that.
TEST(CudaInt8Drafter, AcceptsAsManyDraftsAsTheBf16Drafter) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!nano_pair_present()) GTEST_SKIP() << "no nano pair";
  for (const int streams : {1, 4}) {
    SCOPED_TRACE(std::to_string(streams) + " streams");
    double shares[3] = {};  // bf16, int8, int8 planted
    for (int arm = 0; arm < 3; ++arm) {
      auto target = nano_target();  // a fresh pair an arm
      ASSERT_NE(target, nullptr);
      const std::vector<Arrival> arrivals = staggered_arrivals(streams, false, target->facts().vocab_size, 48);
      auto drafter = nano_drafter(*target, arm == 0 ? 0 : 8);
      ASSERT_NE(drafter, nullptr);
      auto& cuda_drafter = dynamic_cast<dspark::cuda::CudaDsparkDrafter&>(*drafter);
      if (arm > 0) {
        cuda_drafter.set_int8_rows(dspark::cuda::kInt8GemmMaxRows, arm == 2);
        cuda_drafter.capture_bucket_graphs();
      }
      const LanesRun run = run_lanes(*target, *drafter, arrivals);
      drafter.reset();  // before its target
      EXPECT_EQ(run.stats.drafter_faults, 0);
      shares[arm] = run.accepted_share();
      std::printf("[ int8 acceptance ] %d streams, %s: %lld of %lld drafts accepted (%.4f)\n", streams,
                  arm == 0 ? "bf16" : (arm == 1 ? "int8" : "int8 planted"),
                  static_cast<long long>(run.stats.drafts_accepted), static_cast<long long>(run.stats.drafts_verified),
                  shares[arm]);
    }
    EXPECT_GT(shares[0], 0.0);
    EXPECT_GE(shares[1], 0.85 * shares[0]);
    EXPECT_LT(shares[2], 0.85 * shares[0]) << "the planted scales went unseen";
  }
}

// Every quantized GEMM of a one-request pass takes its int8 copy: an eager pass enqueues 4 int8 GEMMs a layer (q/k/v,
// o, gate/up + SwiGLU, down) and the head's, none with set_int8_rows(0); a host absorb's fc takes its copy.
TEST(CudaInt8Drafter, EveryQuantizedGemmOfAOneRequestPassTakesItsInt8Copy) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!nano_pair_present()) GTEST_SKIP() << "no nano pair";
  dspark::cuda_test::NanoDrafter nano;
  DrafterOptions options = dspark::cuda_test::cuda_options();
  options.bits = 8;
  ASSERT_TRUE(nano.load(options));
  dspark::cuda::CudaDsparkDrafter& drafter = *nano.gpu;
  drafter.set_graphs(false);
  drafter.set_absorb_in_pass(false);
  const int rows = 11;
  std::vector<float> taps(static_cast<size_t>(rows * nano.width));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  const int64_t before_absorb = drafter.int8_gemms_enqueued();
  ASSERT_TRUE(drafter.absorb(1, 0, rows, taps).ok());
  ASSERT_TRUE(drafter.settle().ok());
  EXPECT_EQ(drafter.int8_gemms_enqueued() - before_absorb, 1);  // fc (the host absorb's per-layer K / V: bf16)
  for (const int int8_rows : {16, 0, 16}) {
    SCOPED_TRACE("int8 rows " + std::to_string(int8_rows));
    drafter.set_int8_rows(int8_rows);
    drafter.set_int8_splits(drafter.int8_splits() == 0 ? 1 : 0);  // the split launches count the same
    const int64_t before = drafter.int8_gemms_enqueued();
    const DraftRequest request = dspark::cuda_test::request_at(1, rows, 17, nano.c.block_size);
    const std::vector<Draft> drafts = drafter.draft(std::span<const DraftRequest>(&request, 1));
    ASSERT_EQ(drafts.size(), 1u);
    ASSERT_TRUE(drafts[0].status.ok()) << drafts[0].status.to_string();
    EXPECT_EQ(drafter.int8_gemms_enqueued() - before, int8_rows > 0 ? 4 * nano.c.num_layers + 1 : 0);
  }
}

}  // namespace
}  // namespace ls
#endif  // LS_HAVE_CUDA
