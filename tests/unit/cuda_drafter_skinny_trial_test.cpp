// Session 15's skinny GEMM pins on the whole drafter (nano pair): graphed and eager give the same bits, and U stays
// within the bf16 tolerance of the default GEMMs. Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

// Device absorbs of <= 16 rows (the absorb's fc and K/V on skinny_gemm) and one-request passes (q/k/v, o, down on
// skinny_gemm, K split over CTAs, pipelined, or the residual norm in the last CTA), scratch poisoned before each
// pass: the graphed drafter's Hf, U, tokens and chance bits equal the eager one's (the fold's one order, the graph
// replaying the split launches), and U within the bf16 tolerance of a drafter on the default GEMMs.
TEST(CudaDrafter, TheSkinnyTrialPinsDraftTheSameBitsGraphedAndEagerNearTheDefault) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, reference, c, width] = nano;
  using Gpu = CudaDsparkDrafter;
  const struct {
    int parts, splits;
    bool pipelined;
  } trials[] = {{Gpu::kSkinnyThenNorm | Gpu::kSkinnyQkv | Gpu::kSkinnyAbsorb, 3, true},
                {Gpu::kSkinnyResidualNorm | Gpu::kSkinnyQkv | Gpu::kSkinnyAbsorb, 2, false}};
  const UploadedTaps uploaded = upload_taps(32, width, 1515, reference->facts().tap_device);
  // Stream 0: 6 rows twice; stream 1: 9 rows (row buckets 6 and 12).
  const std::vector<std::vector<TapRows>> calls = {{{0, 0, 0, 6}}, {{0, 6, 6, 6}}, {{1, 0, 12, 9}}};
  for (const std::vector<TapRows>& call : calls) {
    ASSERT_TRUE(reference->absorb_device(call, uploaded.taps).ok());
    ASSERT_TRUE(reference->settle().ok());
  }
  for (const auto& trial : trials) {
    SCOPED_TRACE("skinny parts " + std::to_string(trial.parts) + " splits " + std::to_string(trial.splits));
    std::unique_ptr<Gpu> graphed = nano.another(), eager = nano.another();
    ASSERT_TRUE(graphed && eager);
    for (Gpu* drafter : {graphed.get(), eager.get()}) {
      drafter->set_skinny_parts(trial.parts);
      drafter->set_skinny_split(trial.splits, trial.pipelined);
    }
    graphed->capture_bucket_graphs();
    eager->set_graphs(false);
    for (Gpu* drafter : {graphed.get(), eager.get()}) {
      for (const std::vector<TapRows>& call : calls) {
        ASSERT_TRUE(drafter->poison_scratch_for_test().ok());
        ASSERT_TRUE(drafter->absorb_device(call, uploaded.taps).ok());
        ASSERT_TRUE(drafter->settle().ok());
      }
    }
    const int64_t replays_before = graphed->graph_replays();
    for (const StreamId stream : {StreamId{0}, StreamId{1}}) {
      SCOPED_TRACE("stream " + std::to_string(stream));
      const DraftRequest request = request_at(stream, stream == 0 ? 12 : 9, 77, c.block_size);
      const std::span<const DraftRequest> one(&request, 1);
      const PassBits expected = poisoned_pass(*eager, one);
      ASSERT_NO_FATAL_FAILURE(expect_same_pass_bits(poisoned_pass(*graphed, one), expected));
      const PassBits default_gemms = poisoned_pass(*reference, one);
      EXPECT_LT(relative_error(expected.logits, default_gemms.logits), kBf16Tolerance);
    }
    EXPECT_GT(graphed->graph_replays(), replays_before) << "the graphed drafter replayed its passes";
    EXPECT_EQ(graphed->graph_failures(), 0);
  }
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
