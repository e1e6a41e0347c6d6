// Tests for the drafter's failure flags (planted NaN logit, Inf confidence, out-of-range pick on the greedy and the
// sampled path) and for clean init failure at every init step.
//
// How to see these go red: in src/draft/dspark/markov_scan.cpp, delete one of the three checks after
// "The failure flags" (`!finite`, `!confidence_finite`, `pick < 0 || pick >= V`). The argmax then skips the planted
// NaN, the Inf confidence becomes an Inf chance, the pick V leaves the drafter, and the matching test fails.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "draft/dspark/dspark_drafter.h"
#include "draft/load.h"
#include "dspark_test_support.h"

namespace ls::dspark {
namespace {

using testing::EmbeddingTarget;
using testing::TempDir;

constexpr int kVocab = 96, kHidden = 32, kTapWidth = 2 * kHidden, kBlock = 4;

enum class Fault { NanLogit, InfConfidence, OutOfRangePick };
enum class Path { Greedy, Sampled };

class FailureTest : public ::testing::TestWithParam<std::tuple<Fault, Path, int>> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::write_small_drafter(dir_.path(), testing::small_drafter_config(), 31).ok());
  }
  TempDir dir_;
  EmbeddingTarget target_{testing::random_embedding(kVocab, kHidden, 7), kVocab, kHidden, 4};
};

TEST_P(FailureTest, APlantedBadValueFailsOnlyThatStreamWithDraftNonfinite) {
  const auto [fault, path, slot] = GetParam();
  DrafterOptions options;
  options.faults.enabled = true;
  options.faults.stream = 1;
  if (fault == Fault::NanLogit) options.faults.nan_logit_slot = slot;
  if (fault == Fault::InfConfidence) options.faults.inf_confidence_slot = slot;
  if (fault == Fault::OutOfRangePick) options.faults.out_of_range_pick_slot = slot;
  Result<std::unique_ptr<DsparkDrafter>> loaded = DsparkDrafter::load(dir_.path(), target_, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  DsparkDrafter& drafter = **loaded;
  std::vector<DraftRequest> requests(2);
  for (StreamId stream : {1, 2}) {
    ASSERT_TRUE(drafter.absorb(stream, 0, 5, testing::random_taps(5, kTapWidth, 40 + stream)).ok());
    DraftRequest& r = requests[stream - 1];
    r.stream = stream;
    r.anchor_token = 3;
    r.anchor_position = 5;
    r.depth = kBlock;
    if (path == Path::Sampled) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 5;
    }
  }
  const std::vector<Draft> drafts = drafter.draft(requests);
  EXPECT_EQ(drafts[0].status.code(), ErrorCode::DraftNonfinite) << drafts[0].status.to_string();
  EXPECT_NE(drafts[0].status.message().find("slot " + std::to_string(slot) + " of stream 1"), std::string::npos)
      << drafts[0].status.to_string();
  EXPECT_TRUE(drafts[0].tokens.empty());  // nothing reaches the verifier
  EXPECT_TRUE(drafts[0].chances.empty());
  EXPECT_TRUE(drafts[1].status.ok()) << drafts[1].status.to_string();
  EXPECT_EQ(drafts[1].tokens.size(), static_cast<size_t>(kBlock));
  for (float chance : drafts[1].chances) EXPECT_TRUE(std::isfinite(chance));
  EXPECT_EQ(drafter.nonfinite_drafts(), 1);
  // The depth bounds the scan: a planted fault past the requested depth never runs.
  if (slot > 0) {
    requests[0].depth = slot;
    const std::vector<Draft> shallow = drafter.draft(requests);
    EXPECT_TRUE(shallow[0].status.ok()) << shallow[0].status.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(EveryFaultOnEveryPath, FailureTest,
                         ::testing::Combine(::testing::Values(Fault::NanLogit, Fault::InfConfidence,
                                                              Fault::OutOfRangePick),
                                            ::testing::Values(Path::Greedy, Path::Sampled), ::testing::Values(0, 2)));

TEST(DrafterFailure, NanTapsPropagateToDraftNonfiniteNotToTokens) {
  TempDir dir;
  ASSERT_TRUE(testing::write_small_drafter(dir.path(), testing::small_drafter_config(), 32).ok());
  EmbeddingTarget target(testing::random_embedding(kVocab, kHidden, 7), kVocab, kHidden, 4);
  Result<std::unique_ptr<DsparkDrafter>> drafter = DsparkDrafter::load(dir.path(), target, DrafterOptions{});
  ASSERT_TRUE(drafter.ok());
  std::vector<float> taps = testing::random_taps(3, kTapWidth, 1);
  taps[kTapWidth + 5] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE((*drafter)->absorb(1, 0, 3, taps).ok());
  for (float temperature : {0.0f, 1.0f}) {
    DraftRequest r;
    r.stream = 1;
    r.anchor_token = 2;
    r.anchor_position = 3;
    r.depth = kBlock;
    r.sampling.temperature = temperature;
    const Draft draft = std::move((*drafter)->draft(std::span<const DraftRequest>(&r, 1))[0]);
    EXPECT_EQ(draft.status.code(), ErrorCode::DraftNonfinite) << draft.status.to_string();
    EXPECT_TRUE(draft.tokens.empty());
  }
}

TEST(DrafterFailure, AFailureAtEveryInitStepIsNamedFreesEverythingAndLeavesTheTargetAlone) {
  TempDir dir;
  ASSERT_TRUE(testing::write_small_drafter(dir.path(), testing::small_drafter_config(), 33).ok());
  EmbeddingTarget target(testing::random_embedding(kVocab, kHidden, 7), kVocab, kHidden, 4);
  for (int bits : {0, 8}) {
    int step = 0;
    for (;; ++step) {
      DrafterOptions options;
      options.bits = bits;
      options.fail_init_step = step;
      Result<std::unique_ptr<Drafter>> drafter = load_drafter(dir.path(), target, options);
      if (drafter.ok()) break;
      EXPECT_EQ(drafter.status().code(), ErrorCode::OutOfMemory) << drafter.status().to_string();
      EXPECT_NE(drafter.status().message().find("init step " + std::to_string(step) + " ("), std::string::npos)
          << drafter.status().to_string();
      ASSERT_LT(step, 500) << "init never succeeded";
    }
    // Weights (fc, 2 norms, 11 per layer, W1, W2, 2 confidence; int8 adds scales + staging per matrix), the
    // drafter state, 11 scratch buffers and the warm-up: every one of them was failed once.
    EXPECT_GE(step, bits == 0 ? 2 + 11 * 2 + 1 + 1 + 1 + 2 + 1 + 11 + 1 : 60) << "bits " << bits;
  }
  EXPECT_EQ(target.state_calls, 0);
}

TEST(DrafterFailure, TheWarmUpStepFailsByNameAndThenLoadingAgainWorks) {
  TempDir dir;
  ASSERT_TRUE(testing::write_small_drafter(dir.path(), testing::small_drafter_config(), 34).ok());
  EmbeddingTarget target(testing::random_embedding(kVocab, kHidden, 7), kVocab, kHidden, 4);
  int warm_up_step = -1;
  for (int step = 0; step < 500 && warm_up_step < 0; ++step) {
    DrafterOptions options;
    options.fail_init_step = step;
    Result<std::unique_ptr<Drafter>> drafter = load_drafter(dir.path(), target, options);
    ASSERT_FALSE(drafter.ok());
    if (drafter.status().message().find("(warm-up)") != std::string::npos) warm_up_step = step;
  }
  ASSERT_GE(warm_up_step, 0);
  Result<std::unique_ptr<Drafter>> drafter = load_drafter(dir.path(), target, DrafterOptions{});
  ASSERT_TRUE(drafter.ok()) << drafter.status().to_string();
  EXPECT_EQ((*drafter)->facts().max_depth, kBlock);
}

}  // namespace
}  // namespace ls::dspark
