// Session 16's one graph (set_one_graph: the block pass and a depth-independent scan as one graph) against the
// default two graphs, bit for bit.
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

// 1 request (the persistent scan: one graph) and 5 (a sampled request, the step scans: still two graphs): Hf, U,
// tokens and chance bits equal the default pass's, eagerly, captured and replayed (scratch poisoned before every
// pass); captured at load too (capture_bucket_graphs), the first pass already replays its one graph. Planted: the
// one graph without its scan.
TEST(CudaDrafterLaunches, TheOneGraphGivesTheTwoGraphsPassBits) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, gpu, c, width] = nano;
  std::vector<DraftRequest> requests;
  for (int i = 0; i < 5; ++i) {
    const int length = 11 + 37 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 1600 + i)).ok());
    requests.push_back(request_at(i, length, 90 + 23 * i, i == 3 ? 4 : c.block_size,
                                  i == 1 ? Sampling{0.8f, 0, 1.0f, 0.0f, 11} : Sampling{}));
  }
  ASSERT_TRUE(gpu->persistent_scan(1, true));  // one greedy request: the one-graph pass's scan
  ASSERT_TRUE(gpu->one_graph()) << "the default since session 19";
  for (const size_t count : {size_t{1}, size_t{5}}) {
    SCOPED_TRACE(std::to_string(count) + " requests");
    const std::span<const DraftRequest> some(requests.data(), count);
    gpu->set_one_graph(false);
    const PassBits reference = poisoned_pass(*gpu, some);
    gpu->set_one_graph(true);
    const int64_t failures = gpu->graph_failures(), replays = gpu->graph_replays();
    for (int sighting = 0; sighting < 3; ++sighting) {  // eager, captured, replayed
      SCOPED_TRACE("sighting " + std::to_string(sighting));
      expect_same_pass_bits(poisoned_pass(*gpu, some), reference);
      EXPECT_EQ(gpu->last_scan_ms() == 0.0, count == 1) << "timed as one graph exactly where the scan is persistent";
    }
    EXPECT_EQ(gpu->graph_failures(), failures);
    // Captured at the second sighting, replayed at the second and third: one graph a pass where the scan is the
    // persistent one (one request, greedy), else two.
    EXPECT_EQ(gpu->graph_replays() - replays, count == 1 ? 2 : 4);
  }
  // At load (capture_bucket_graphs): the one-request pass replays its one graph from the first sighting.
  const std::span<const DraftRequest> one(requests.data(), 1);
  gpu->set_one_graph(false);
  const PassBits reference = poisoned_pass(*gpu, one);
  gpu->set_one_graph(true);
  EXPECT_GT(gpu->capture_bucket_graphs(), 0);
  const int64_t replays = gpu->graph_replays();
  expect_same_pass_bits(poisoned_pass(*gpu, one), reference);
  EXPECT_EQ(gpu->graph_replays() - replays, 1);
  // Planted: the one graph without its scan must draft other tokens (or fail) than the two graphs.
  gpu->set_one_graph(true, /*planted_no_scan=*/true);
  gpu->capture_bucket_graphs();
  const PassBits planted = poisoned_pass(*gpu, one);
  EXPECT_TRUE(!planted.drafts[0].status.ok() || planted.drafts[0].tokens != reference.drafts[0].tokens)
      << "a one graph without its scan drafted the reference's tokens: the bit test cannot see a lost scan";
  gpu->set_one_graph(false);
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
