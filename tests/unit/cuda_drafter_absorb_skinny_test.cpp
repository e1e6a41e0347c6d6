// The fused absorb's GEMMs through skinny_gemm (session 14, set_absorb_skinny) against cuBLAS's: device absorbs of
// a few rows a call (the lanes' shape) on three streams, then one pass. skinny_gemm adds K in its own order, so the
// contract is the bf16 tolerance: U within kBf16Tolerance of the cuBLAS absorb's and >= 90% of draft slots equal
// before a near-tie flip; graphed absorbs give the eager skinny bits; a planted skinny GEMM that computes only the
// first row of each call must move U past the tolerance.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

TEST(CudaDrafter, TheSkinnyAbsorbGivesTheCublasAbsorbsDraftsWithinTheBf16Tolerance) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, reference, c, width] = nano;
  std::unique_ptr<CudaDsparkDrafter> skinny = nano.another();
  std::unique_ptr<CudaDsparkDrafter> graphed = nano.another();
  std::unique_ptr<CudaDsparkDrafter> planted = nano.another();
  ASSERT_TRUE(skinny && graphed && planted);
  skinny->set_absorb_skinny(true);
  graphed->set_absorb_skinny(true);
  graphed->capture_bucket_graphs();  // the pin dropped the graphs: captured again as at load
  planted->set_absorb_skinny(true, /*planted=*/true);
  for (CudaDsparkDrafter* drafter : {reference.get(), skinny.get(), planted.get()}) drafter->set_graphs(false);
  constexpr int kRows = 64;
  const UploadedTaps uploaded = upload_taps(kRows, width, 91, reference->facts().tap_device);
  // 1..7 rows a call over three streams (buckets 1..8, every one under skinny_gemm's row limit).
  std::vector<std::vector<TapRows>> calls;
  int64_t lengths[3] = {0, 0, 0};
  int next_row = 0;
  for (int call = 0; call < 9; ++call) {
    std::vector<TapRows> pieces;
    for (int s = 0; s < 3; ++s) {
      const int rows = 1 + (call + 2 * s) % 3;
      if (next_row + rows > kRows) break;
      pieces.push_back(TapRows{static_cast<StreamId>(s), lengths[s], next_row, rows});
      lengths[s] += rows;
      next_row += rows;
    }
    calls.push_back(pieces);
  }
  const int64_t replays_before = graphed->graph_replays();
  for (CudaDsparkDrafter* drafter : {reference.get(), skinny.get(), graphed.get(), planted.get()}) {
    for (const std::vector<TapRows>& call : calls) {
      ASSERT_TRUE(drafter->poison_scratch_for_test().ok());
      ASSERT_TRUE(drafter->absorb_device(call, uploaded.taps).ok());
      ASSERT_TRUE(drafter->settle().ok());
    }
  }
  EXPECT_GT(graphed->graph_replays() - replays_before, 0);
  EXPECT_EQ(graphed->graph_failures(), 0);
  std::vector<DraftRequest> requests;
  for (int s = 0; s < 3; ++s) requests.push_back(request_at(s, lengths[s], 60 + 11 * s, c.block_size));
  const std::vector<Draft> expected = reference->draft(requests);
  const std::vector<float> expected_logits = reference->last_base_logits().value();
  const std::vector<Draft> drafts = skinny->draft(requests);
  const std::vector<float> logits = skinny->last_base_logits().value();
  // Graphed absorbs: the eager skinny absorbs' bits (the pass itself eager on both).
  graphed->set_graphs(false);
  ASSERT_NO_FATAL_FAILURE(expect_same_drafts(graphed->draft(requests), drafts));
  EXPECT_EQ(graphed->last_base_logits().value(), logits);
  int equal = 0, total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(drafts[i].status.ok()) << drafts[i].status.to_string();
    ASSERT_TRUE(expected[i].status.ok()) << expected[i].status.to_string();
    for (int slot = 0; slot < requests[i].depth; ++slot, ++total) {
      if (drafts[i].tokens[slot] != expected[i].tokens[slot]) break;
      ++equal;
    }
  }
  const double error = relative_error(logits, expected_logits);
  // The planted absorb leaves the other rows' C as the poison put it (NaN): its U moves past the tolerance, turns
  // non-finite, or its drafts fail.
  const std::vector<Draft> planted_drafts = planted->draft(requests);
  const std::vector<float> planted_logits = planted->last_base_logits().value();
  const double planted_error = relative_error(planted_logits, expected_logits);
  bool planted_moved = planted_error > kBf16Tolerance;
  for (const float value : planted_logits) planted_moved = planted_moved || !std::isfinite(value);
  for (const Draft& draft : planted_drafts) planted_moved = planted_moved || !draft.status.ok();
  std::printf("[ skinny absorb ] U rel. error %.3g (planted %.3g), %d of %d draft slots equal before any flip\n",
              error, planted_error, equal, total);
  EXPECT_LE(error, kBf16Tolerance);
  EXPECT_GE(equal * 10, total * 9);
  EXPECT_TRUE(planted_moved) << "a skinny absorb of one row a call gave the cuBLAS absorb's U";
}

}  // namespace
}  // namespace ls::dspark

#endif  // LS_HAVE_CUDA
