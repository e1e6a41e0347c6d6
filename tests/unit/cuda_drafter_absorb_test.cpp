// The drafter's context on the CUDA device: rollback by absorbing at an earlier start, and device absorbs
// (graphed, per-layer, batched loads) leaving the contexts of eager ones.
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

TEST(CudaDrafter, RollbackByAbsorbingAtAnEarlierStartGivesTheDraftsOfAFreshAbsorb) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, drafter, c, width] = nano;
  const std::vector<float> kept = testing::random_taps(40, width, 1);
  const std::vector<float> rejected = testing::random_taps(90, width, 2);  // longer than what replaces it
  const std::vector<float> replacement = testing::random_taps(25, width, 3);
  // Stream 1: 40 rows, 90 rows later rolled back, 25 rows at 40. Stream 2: the same 40 and 25 rows, fresh.
  ASSERT_TRUE(drafter->absorb(1, 0, 40, kept).ok());
  ASSERT_TRUE(drafter->absorb(1, 40, 90, rejected).ok());
  ASSERT_TRUE(drafter->absorb(1, 40, 25, replacement).ok());
  ASSERT_TRUE(drafter->absorb(2, 0, 40, kept).ok());
  ASSERT_TRUE(drafter->absorb(2, 40, 25, replacement).ok());
  EXPECT_EQ(drafter->context_length(1), 65);
  std::vector<Draft> drafts;
  for (StreamId stream : {StreamId{1}, StreamId{2}}) {
    const DraftRequest request = request_at(stream, 65, 321, c.block_size);
    drafts.push_back(drafter->draft(std::span<const DraftRequest>(&request, 1))[0]);
    ASSERT_TRUE(drafts.back().status.ok()) << drafts.back().status.to_string();
  }
  EXPECT_EQ(drafts[0].tokens, drafts[1].tokens);
  ASSERT_EQ(drafts[0].chances.size(), drafts[1].chances.size());
  for (size_t i = 0; i < drafts[0].chances.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(drafts[0].chances[i]), std::bit_cast<uint32_t>(drafts[1].chances[i]));
  // A gap is refused by name and changes nothing.
  const Status gap = drafter->absorb(2, 70, 1, std::vector<float>(width, 0.0f));
  EXPECT_EQ(gap.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(gap.message().find("gap"), std::string::npos) << gap.message();
}

// absorb_device() replays a CUDA graph of a chunk's projections per row bucket (captured at its first call): the same
// sequence of device absorbs (several streams per call, a rollback, row counts repeating) through graphs and eagerly
// leaves contexts that draft the same tokens and chance bits; the graphed drafter really replayed (7 absorb replays).
// The fused absorb (one K/V GEMM for every layer, one heads launch) against the per-layer sequence: U within the
// bf16 tolerance and the drafts equal up to a near-tie flip (the stacked GEMM may sum in another order). A drafter
// with every load batched (session 8) leaves the eager drafter's bits.
TEST(CudaDrafter, DeviceAbsorbsThroughGraphsLeaveTheContextsOfEagerAbsorbs) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, eager, c, width] = nano;
  std::unique_ptr<CudaDsparkDrafter> graphed = nano.another();
  std::unique_ptr<CudaDsparkDrafter> per_layer = nano.another();
  std::unique_ptr<CudaDsparkDrafter> batched = nano.another();
  ASSERT_TRUE(eager && graphed && per_layer && batched);
  per_layer->set_fused_absorb(false);
  // The reference drafters load one at a time (the old path); a pin drops the graphs, so the graphed one captures its
  // buckets again as at load.
  for (CudaDsparkDrafter* drafter : {eager.get(), graphed.get(), per_layer.get()}) {
    drafter->set_batched_loads(false);
    drafter->capture_bucket_graphs();
  }
  batched->set_batched_loads(true);
  batched->capture_bucket_graphs();
  eager->set_graphs(false);
  constexpr int kRows = 48;
  const UploadedTaps uploaded = upload_taps(kRows, width, 77, eager->facts().tap_device);
  const DeviceTaps& on_device = uploaded.taps;
  // Calls of 5 rows (streams 0 and 1) four times, 7 rows (stream 2) twice, then stream 0 rolled back by 2 rows.
  std::vector<std::vector<TapRows>> calls;
  for (int call = 0; call < 4; ++call) {
    calls.push_back({{0, 3 * call, 3 * call, 3}, {1, 2 * call, 20 + 2 * call, 2}});
  }
  calls.push_back({{2, 0, 30, 7}});
  calls.push_back({{2, 7, 37, 7}});
  calls.push_back({{0, 10, 5, 4}, {1, 8, 1, 1}});
  const int64_t replays_before = graphed->graph_replays();
  for (CudaDsparkDrafter* drafter : {eager.get(), graphed.get(), per_layer.get(), batched.get()}) {
    for (const std::vector<TapRows>& call : calls) {
      ASSERT_TRUE(drafter->poison_scratch_for_test().ok());
      ASSERT_TRUE(drafter->absorb_device(call, on_device).ok());
      ASSERT_TRUE(drafter->settle().ok());
    }
  }
  // Row buckets 6 (calls 1-4 and 7, 5 rows each) and 8 (calls 5 and 6, 7 rows): captured at load, so every call
  // replays.
  EXPECT_EQ(graphed->graph_replays() - replays_before, 7);
  EXPECT_GT(graphed->absorb_graphs_captured(), 0);
  EXPECT_EQ(graphed->graph_failures(), 0);
  EXPECT_EQ(graphed->context_length(0), 14);
  std::vector<DraftRequest> requests(3);
  const int64_t lengths[] = {14, 9, 14};
  for (int i = 0; i < 3; ++i) requests[i] = request_at(i, lengths[i], 40 + 7 * i, c.block_size);
  eager->set_graphs(false);
  graphed->set_graphs(false);  // the drafts themselves eagerly on both: only the absorbs differ
  const std::vector<Draft> expected = eager->draft(requests);
  const std::vector<Draft> actual = graphed->draft(requests);
  ASSERT_NO_FATAL_FAILURE(expect_same_drafts(actual, expected));  // request i is stream i
  // The eager drafter's last pass is its own reference: U of the two agrees bit for bit.
  const Result<std::vector<float>> expected_logits = eager->last_base_logits();
  const Result<std::vector<float>> actual_logits = graphed->last_base_logits();
  ASSERT_TRUE(expected_logits.ok() && actual_logits.ok());
  EXPECT_EQ(*actual_logits, *expected_logits);
  // Session 8's batched loads (the absorbs' hidden norm and key heads graphed, then the pass's norms, heads and
  // attention): the eager drafter's tokens, chance and U bits.
  const std::vector<Draft> batched_drafts = batched->draft(requests);
  {
    SCOPED_TRACE("batched loads");
    ASSERT_NO_FATAL_FAILURE(expect_same_drafts(batched_drafts, expected));
  }
  const Result<std::vector<float>> batched_logits = batched->last_base_logits();
  ASSERT_TRUE(batched_logits.ok());
  EXPECT_EQ(*batched_logits, *expected_logits);
  // The per-layer absorb.
  per_layer->set_graphs(false);
  const std::vector<Draft> unfused = per_layer->draft(requests);
  const Result<std::vector<float>> unfused_logits = per_layer->last_base_logits();
  ASSERT_TRUE(unfused_logits.ok());
  EXPECT_LT(relative_error(*expected_logits, *unfused_logits), kBf16Tolerance);
  int equal = 0, total = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(unfused[i].status.ok()) << unfused[i].status.to_string();
    for (int slot = 0; slot < c.block_size; ++slot, ++total) {
      if (unfused[i].tokens[slot] != expected[i].tokens[slot]) break;
      ++equal;
    }
  }
  std::printf("[ fused absorb ] %d of %d slots equal to the per-layer absorb before any flip\n", equal, total);
  EXPECT_GE(equal * 10, total * 9) << equal << " of " << total;
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
