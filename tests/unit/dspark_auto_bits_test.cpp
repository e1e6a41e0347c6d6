// --drafter-bits auto (-1, the CLI's default): int8 on a CPU drafter where the w8a8 kernel runs (AVX-512 VNNI), with or
// without the AMX tiles, bf16 as stored elsewhere (dspark::resolve_draft_bits); the loaded drafter holds the resolved
// bits, and the nano pair's drafted replies with it equal plain replies run alone.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_amx.h"
#include "draft/dspark/config.h"
#include "draft/dspark/dspark_drafter.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "nano_lanes.h"
#include "nano_pair.h"

namespace ls {
namespace {

using compute::NumericMode;

// The drafter's AMX switch for one test (drafters loaded under it keep their layouts), restored after.
class ScopedDrafterAmx {
 public:
  explicit ScopedDrafterAmx(bool on) : saved_(compute::set_drafter_amx(on)) {}
  ~ScopedDrafterAmx() { compute::set_drafter_amx(saved_); }

 private:
  bool saved_;
};

// The bits auto gives a CPU drafter in bf16 mode on this CPU.
int int8_where_vnni() { return compute::cpu_features().avx512_vnni ? 8 : 0; }

TEST(DraftBitsAuto, IsInt8OnACpuDrafterWithVnniWithOrWithoutTheTiles) {
  {
    ScopedDrafterAmx amx(false);
    EXPECT_EQ(dspark::resolve_draft_bits(dspark::kDraftBitsAuto, Device::Cpu, NumericMode::Bf16), int8_where_vnni());
  }
  if (compute::cpu_amx_runnable()) {  // (the switch refuses to turn on without the tile unit)
    ScopedDrafterAmx amx(true);
    EXPECT_EQ(dspark::resolve_draft_bits(dspark::kDraftBitsAuto, Device::Cpu, NumericMode::Bf16), int8_where_vnni());
  }
}

TEST(DraftBitsAuto, IsBf16OnTheDeviceAndInFp32Mode) {
  ScopedDrafterAmx amx(false);
  EXPECT_EQ(dspark::resolve_draft_bits(dspark::kDraftBitsAuto, Device::Cuda, NumericMode::Bf16), 0);
  EXPECT_EQ(dspark::resolve_draft_bits(dspark::kDraftBitsAuto, Device::Cpu, NumericMode::Fp32), 0);
}

TEST(DraftBitsAuto, AnAskedWidthIsKeptAndOthersAreStillRefused) {
  ScopedDrafterAmx amx(false);
  for (int bits : {0, 8, 4})
    for (Device device : {Device::Cpu, Device::Cuda})
      EXPECT_EQ(dspark::resolve_draft_bits(bits, device, NumericMode::Bf16), bits);
  EXPECT_FALSE(dspark::check_draft_bits(dspark::resolve_draft_bits(4, Device::Cpu, NumericMode::Bf16)).ok());
}

TEST(DraftBitsAuto, TheLoadedDrafterHoldsTheResolvedBits) {
  if (!nano_pair_present()) GTEST_SKIP() << "no nano pair";
  ScopedDrafterAmx amx(false);
  NanoPair pair;
  ASSERT_NO_FATAL_FAILURE(load_nano_pair(pair, dspark::kDraftBitsAuto));
  const auto& drafter = dynamic_cast<const dspark::DsparkDrafter&>(*pair.drafter);
  EXPECT_EQ(drafter.bits(), int8_where_vnni());
  for (const dspark::DraftLayerWeights& layer : drafter.weights().layers)
    EXPECT_EQ(layer.gate_proj.quantized(), int8_where_vnni() == 8);
  // Asked for bf16, it stays bf16.
  NanoPair bf16_pair;
  ASSERT_NO_FATAL_FAILURE(load_nano_pair(bf16_pair, 0));
  EXPECT_EQ(dynamic_cast<const dspark::DsparkDrafter&>(*bf16_pair.drafter).bits(), 0);
}

// The nano pair through the lanes with the drafter's auto bits (int8 on a VNNI CPU without the tiles), always drafting:
// every drafted reply equals the plain reply run alone, and drafts land.
struct AutoCase {
  int streams;
  bool sampled;
};

class AutoBitsNanoLanes : public ::testing::TestWithParam<AutoCase> {};

TEST_P(AutoBitsNanoLanes, DraftedRepliesEqualPlainRepliesRunAlone) {
  if (!nano_pair_present()) GTEST_SKIP() << "no nano pair";
  ScopedDrafterAmx amx(false);
  NanoPair pair;
  ASSERT_NO_FATAL_FAILURE(load_nano_pair(pair, dspark::kDraftBitsAuto));
  EXPECT_EQ(dynamic_cast<const dspark::DsparkDrafter&>(*pair.drafter).bits(), int8_where_vnni());
  expect_drafted_replies_equal_alone(pair, GetParam().streams, GetParam().sampled);
}

INSTANTIATE_TEST_SUITE_P(NanoPair, AutoBitsNanoLanes,
                         ::testing::Values(AutoCase{1, false}, AutoCase{1, true}, AutoCase{4, false},
                                           AutoCase{4, true}, AutoCase{16, false}, AutoCase{16, true}),
                         [](const ::testing::TestParamInfo<AutoCase>& info) {
                           return std::to_string(info.param.streams) + (info.param.sampled ? "Sampled" : "Greedy");
                         });

}  // namespace
}  // namespace ls
