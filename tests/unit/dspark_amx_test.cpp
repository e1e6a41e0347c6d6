// The drafter on the tile unit beside a target on the AVX-512 panels (the default where the CPU has AMX): which layout
// each model's matrices take, and the nano pair's drafted replies equal to plain replies with either arm (the drafter
// alone on AMX, or everything under LS_CPU_AMX=1). The loads skip where the CPU has no AMX or the pair is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "compute/cpu/matmul_amx.h"
#include "draft/dspark/dspark_drafter.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "model/lfm2/lfm2_target.h"
#include "nano_lanes.h"
#include "nano_pair.h"

namespace ls {
namespace {

using compute::PackedLayout;
using compute::WeightsOf;

// Sets the target's and the drafter's AMX switches for one test (models loaded under it keep their layouts) and
// restores both.
class ScopedLayouts {
 public:
  ScopedLayouts(bool target_amx, bool drafter_amx)
      : target_(compute::set_cpu_amx(target_amx)), drafter_(compute::set_drafter_amx(drafter_amx)) {}
  ~ScopedLayouts() {
    compute::set_cpu_amx(target_);
    compute::set_drafter_amx(drafter_);
  }

 private:
  bool target_, drafter_;
};

#define LS_SKIP_WITHOUT_AMX_OR_PAIR()                                                      \
  if (!compute::cpu_amx_runnable()) GTEST_SKIP() << "no AMX-BF16 tile state in this process"; \
  if (!nano_pair_present()) GTEST_SKIP() << "no nano pair"

// The layout of every packed matrix of the target, in pack order.
std::vector<PackedLayout> target_layouts(const Target& target) {
  const lfm2::Weights& weights = dynamic_cast<const lfm2::Lfm2Target&>(target).model().weights();
  std::vector<const compute::OwnedMatrix*> matrices = {&weights.head()};
  for (const lfm2::LayerWeights& layer : weights.layers)
    for (const compute::OwnedMatrix* m : {&layer.conv_in_proj, &layer.conv_out_proj, &layer.q_proj, &layer.k_proj,
                                          &layer.v_proj, &layer.attn_out_proj, &layer.w1, &layer.w3, &layer.w2})
      matrices.push_back(m);
  std::vector<PackedLayout> layouts;
  for (const compute::OwnedMatrix* m : matrices)
    if (m->packed) layouts.push_back(m->packed_layout);
  return layouts;
}

// The drafter's block matrices (fc and every layer's seven), each with its packed layout; unpacked ones fail.
std::vector<PackedLayout> drafter_block_layouts(const Drafter& drafter) {
  const dspark::DsparkWeights& weights = dynamic_cast<const dspark::DsparkDrafter&>(drafter).weights();
  std::vector<const compute::OwnedMatrix*> matrices = {&weights.fc.dense};
  for (const dspark::DraftLayerWeights& layer : weights.layers)
    for (const dspark::DraftMatrix* m : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj,
                                         &layer.gate_proj, &layer.up_proj, &layer.down_proj})
      matrices.push_back(&m->dense);
  std::vector<PackedLayout> layouts;
  for (const compute::OwnedMatrix* m : matrices) {
    EXPECT_NE(m->packed, nullptr);
    layouts.push_back(m->packed_layout);
  }
  return layouts;
}

TEST(DrafterAmx, IsOnByDefaultWhereTheTileUnitRunsAndTheTargetStaysOnThePanels) {
  if (std::getenv("LS_CPU_DRAFTER_AMX") || std::getenv("LS_CPU_AMX")) GTEST_SKIP() << "an AMX switch is set";
  EXPECT_EQ(compute::drafter_amx(), compute::cpu_amx_runnable());
  EXPECT_EQ(compute::cpu_packed_layout(WeightsOf::Drafter),
            compute::cpu_amx_runnable() ? PackedLayout::AmxTiles : PackedLayout::Panels);
  EXPECT_EQ(compute::cpu_packed_layout(WeightsOf::Target), PackedLayout::Panels);
}

TEST(DrafterAmx, TheDrafterMatricesTakeTheTilesAndTheTargetsKeepThePanels) {
  LS_SKIP_WITHOUT_AMX_OR_PAIR();
  ScopedLayouts layouts(false, true);
  NanoPair pair;
  ASSERT_NO_FATAL_FAILURE(load_nano_pair(pair));
  const std::vector<PackedLayout> target = target_layouts(*pair.target);
  ASSERT_GT(target.size(), 20u);
  for (PackedLayout layout : target) EXPECT_EQ(layout, PackedLayout::Panels);
  for (PackedLayout layout : drafter_block_layouts(*pair.drafter)) EXPECT_EQ(layout, PackedLayout::AmxTiles);
  const dspark::DsparkWeights& weights = dynamic_cast<const dspark::DsparkDrafter&>(*pair.drafter).weights();
  ASSERT_NE(weights.markov_w2.dense.packed, nullptr);
  EXPECT_EQ(weights.markov_w2.dense.packed_layout, PackedLayout::AmxTiles);
  // The block's head: the drafter's own copy of E in the tiles, not the target's (panel) head.
  const compute::OwnedMatrix& head = weights.head.dense;
  ASSERT_NE(head.packed, nullptr);
  EXPECT_EQ(head.packed_layout, PackedLayout::AmxTiles);
  EXPECT_NE(head.packed.get(), dynamic_cast<const lfm2::Lfm2Target&>(*pair.target).model().weights().head().packed.get());
}

TEST(DrafterAmx, SwitchedOffTheDrafterKeepsThePanelsAndTheTargetsHead) {
  LS_SKIP_WITHOUT_AMX_OR_PAIR();
  ScopedLayouts layouts(false, false);
  NanoPair pair;
  ASSERT_NO_FATAL_FAILURE(load_nano_pair(pair));
  for (PackedLayout layout : target_layouts(*pair.target)) EXPECT_EQ(layout, PackedLayout::Panels);
  for (PackedLayout layout : drafter_block_layouts(*pair.drafter)) EXPECT_EQ(layout, PackedLayout::Panels);
  EXPECT_EQ(dynamic_cast<const dspark::DsparkDrafter&>(*pair.drafter).weights().markov_w2.dense.packed_layout,
            PackedLayout::Panels);
  EXPECT_EQ(dynamic_cast<const dspark::DsparkDrafter&>(*pair.drafter).weights().head.rows, 0);
}

// The nano pair through the lanes (real DSpark drafter, always drafting): every drafted reply equals the plain reply
// run alone, with the drafter alone on AMX (the default) or everything on it (LS_CPU_AMX=1).
struct NanoCase {
  int streams;
  bool sampled;
  bool target_amx;
};

class AmxNanoLanes : public ::testing::TestWithParam<NanoCase> {};

TEST_P(AmxNanoLanes, DraftedRepliesEqualPlainRepliesRunAlone) {
  LS_SKIP_WITHOUT_AMX_OR_PAIR();
  ScopedLayouts layouts(GetParam().target_amx, true);
  NanoPair pair;
  ASSERT_NO_FATAL_FAILURE(load_nano_pair(pair));
  for (PackedLayout layout : target_layouts(*pair.target))
    EXPECT_EQ(layout, GetParam().target_amx ? PackedLayout::AmxTiles : PackedLayout::Panels);
  expect_drafted_replies_equal_alone(pair, GetParam().streams, GetParam().sampled);
}

INSTANTIATE_TEST_SUITE_P(NanoPair, AmxNanoLanes,
                         ::testing::Values(NanoCase{1, false, false}, NanoCase{1, true, false},
                                           NanoCase{4, false, false}, NanoCase{4, true, false},
                                           NanoCase{16, false, false}, NanoCase{16, true, false},
                                           NanoCase{1, false, true}, NanoCase{1, true, true},
                                           NanoCase{4, false, true}, NanoCase{4, true, true},
                                           NanoCase{16, false, true}, NanoCase{16, true, true}),
                         [](const ::testing::TestParamInfo<NanoCase>& info) {
                           return std::to_string(info.param.streams) + (info.param.sampled ? "Sampled" : "Greedy") +
                                  (info.param.target_amx ? "EverythingAmx" : "DrafterAmx");
                         });

}  // namespace
}  // namespace ls
