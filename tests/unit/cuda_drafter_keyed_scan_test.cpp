// The keyed persistent scan (set_keyed_scan, session 11): sampled requests without top-k, top-p or min-p take the
// persistent scan with their Gumbel max inside, and draft the tokens and chance bits of the fused step (whose last
// CTA draws with the verified pick), alone and in groups with greedy requests, with both handoffs, eagerly and
// graphed; requests with a cut keep the step scans; a draw planted one position late turns it red. And the sampled
// split (set_sampled_split) in the drafter against the fused step. Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;
using cuda::PersistentHandoff;

// `request` alone drafts `reference`'s tokens and chance bits eagerly, then at its first graphed sighting, its
// capture and a replay (scratch poisoned before each pass).
void expect_eager_and_graphed(CudaDsparkDrafter& gpu, const DraftRequest& request,
                              const std::vector<Draft>& reference) {
  const std::span<const DraftRequest> one(&request, 1);
  for (const bool graphs : {false, true, true, true}) {
    SCOPED_TRACE(graphs ? "graphed" : "eager");
    gpu.set_graphs(graphs);
    ASSERT_TRUE(gpu.poison_scratch_for_test().ok());
    expect_same_drafts(gpu.draft(one), reference);
  }
}

TEST(CudaDrafterKeyedScan, PlainSampledRequestsDraftTheFusedStepsTokensAndChanceBitsInThePersistentScan) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load(cuda_options(12)));
  auto& [target, gpu, c, width] = nano;
  std::vector<DraftRequest> requests;
  std::mt19937 rng(static_cast<uint32_t>(std::random_device{}()));
  for (int i = 0; i < 10; ++i) {
    const int length = 4 + 31 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 900 + i)).ok());
    // Even requests sampled at temperatures 0.3 .. 1.9 (top-k at or above the vocabulary is no cut), odd greedy.
    const Sampling sampling = i % 2 == 0 ? Sampling{0.3f + 0.4f * static_cast<float>(i / 2),
                                                    i == 4 ? c.vocab_size : 0, 1.0f, 0.0f, rng()}
                                         : Sampling{};
    requests.push_back(request_at(i, length, static_cast<int32_t>(rng() % c.vocab_size),
                                  1 + (i * 5) % c.block_size, sampling));
  }
  gpu->set_sampled_split(false);  // the reference: the fused step itself (its last CTA draws)
  auto draft_with = [&](bool keyed, std::span<const DraftRequest> batch) {
    gpu->set_keyed_scan(keyed);
    gpu->set_persistent_scan(keyed && batch.size() > 1 ? std::optional<bool>(true) : std::nullopt);
    gpu->set_fused_scan(keyed ? std::nullopt : std::optional<bool>(true));
    EXPECT_TRUE(gpu->poison_scratch_for_test().ok());
    return gpu->draft(batch);
  };
  for (const ScanArm& arm : scan_arms()) {
    SCOPED_TRACE(arm.name());
    set_scan_arm(*gpu, arm);
    gpu->set_graphs(false);
    // Alone at full depth (the one-request kernel), each sampled request.
    for (int i = 0; i < 10; i += 2) {
      SCOPED_TRACE("single request " + std::to_string(i));
      DraftRequest single = requests[i];
      single.depth = c.block_size;
      const std::span<const DraftRequest> one(&single, 1);
      expect_same_drafts(draft_with(true, one), draft_with(false, one));
    }
    // Groups with greedy requests, mixed depths (the group kernel, pinned): 2, 5, 8, and 10 (8 + 2).
    for (const size_t size : {2, 5, 8, 10}) {
      SCOPED_TRACE("group of " + std::to_string(size));
      const std::span<const DraftRequest> group(requests.data(), size);
      expect_same_drafts(draft_with(true, group), draft_with(false, group));
    }
    // Graphed: the keyed graph (one for every depth) replays the fused step's bits at changing depths.
    for (const int depth : {c.block_size, 3, 1}) {
      SCOPED_TRACE("depth " + std::to_string(depth));
      DraftRequest single = requests[2];
      single.depth = depth;
      const std::vector<Draft> reference = draft_with(false, std::span<const DraftRequest>(&single, 1));
      gpu->set_keyed_scan(true);
      gpu->set_persistent_scan(std::nullopt);
      gpu->set_fused_scan(std::nullopt);
      expect_eager_and_graphed(*gpu, single, reference);
    }
    EXPECT_EQ(gpu->graph_failures(), 0);
  }
  // Which passes take it: a plain sampled request alone, not one with top-p, top-k or min-p, not with the switch off.
  gpu->set_graphs(false);
  gpu->set_keyed_scan(true);
  for (const auto& [sampling, expected] : {std::pair{Sampling{0.8f, 0, 1.0f, 0.0f, 3}, true},
                                           std::pair{Sampling{0.8f, 0, 0.9f, 0.0f, 3}, false},
                                           std::pair{Sampling{0.8f, 5, 1.0f, 0.0f, 3}, false},
                                           std::pair{Sampling{0.8f, 0, 1.0f, 0.05f, 3}, false}}) {
    DraftRequest single = requests[0];
    single.sampling = sampling;
    ASSERT_TRUE(gpu->draft(std::span<const DraftRequest>(&single, 1))[0].status.ok());
    EXPECT_EQ(gpu->keyed_scan(1), expected) << "top_p " << sampling.top_p << " top_k " << sampling.top_k
                                            << " min_p " << sampling.min_p;
  }
  // Planted: every keyed draw one position late; some of the five single requests must draft other tokens.
  int differing = 0;
  for (int i = 0; i < 10; i += 2) {
    DraftRequest single = requests[i];
    single.depth = c.block_size;
    const std::span<const DraftRequest> one(&single, 1);
    const std::vector<Draft> reference = draft_with(false, one);
    gpu->set_fused_scan(std::nullopt);
    gpu->set_persistent_scan(std::nullopt);
    gpu->set_keyed_scan(true, /*planted_shift=*/1);
    const std::vector<Draft> planted = gpu->draft(one);
    ASSERT_TRUE(planted[0].status.ok());
    EXPECT_TRUE(gpu->keyed_scan(1));
    differing += planted[0].tokens != reference[0].tokens;
  }
  EXPECT_GT(differing, 0) << "a draw one position late gave every token of the fused step";
}

// The sampled split (set_sampled_split, session 11) in the drafter: a single sampled request of every filter mix
// drafts the fused step's tokens and chance bits with it on, eagerly and graphed (captured, replayed).
TEST(CudaDrafterKeyedScan, TheSampledSplitDraftsTheFusedStepsTokensAndChanceBitsForASingleRequest) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load(cuda_options(4)));
  auto& [target, gpu, c, width] = nano;
  const int length = 77;
  ASSERT_TRUE(gpu->absorb(0, 0, length, testing::random_taps(length, width, 41)).ok());
  gpu->set_keyed_scan(false);  // plain requests would take the keyed persistent scan first
  std::mt19937 rng(static_cast<uint32_t>(std::random_device{}()));
  for (const Sampling& sampling : {Sampling{0.7f, 0, 1.0f, 0.0f, rng()}, Sampling{1.0f, 0, 0.9f, 0.0f, rng()},
                                   Sampling{0.9f, 8, 1.0f, 0.0f, rng()}, Sampling{1.2f, 0, 1.0f, 0.05f, rng()},
                                   Sampling{0.8f, 40, 0.8f, 0.02f, rng()}}) {
    SCOPED_TRACE("T " + std::to_string(sampling.temperature) + " top_k " + std::to_string(sampling.top_k) +
                 " top_p " + std::to_string(sampling.top_p) + " min_p " + std::to_string(sampling.min_p));
    const DraftRequest request = request_at(0, length, static_cast<int32_t>(rng() % c.vocab_size), c.block_size,
                                            sampling);
    gpu->set_graphs(false);
    gpu->set_sampled_split(false);
    ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
    const std::vector<Draft> reference = gpu->draft(std::span<const DraftRequest>(&request, 1));
    gpu->set_sampled_split(true);
    expect_eager_and_graphed(*gpu, request, reference);
  }
  EXPECT_EQ(gpu->graph_failures(), 0);
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
