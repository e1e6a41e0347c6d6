// The drafter's CUDA graphs and buckets: graphed passes give the eager bits, and padding requests and rows leave
// every real draft's bits.
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

// Graphs on vs off: the same tokens and chance bits for several shapes (greedy and sampled, mixed depths), over the
// eager first sighting, the capture, replays, and replays after the contexts grew (new cache pointers and lengths).
TEST(CudaDrafter, CudaGraphsGiveTheSameTokensAndChanceBitsAsEagerLaunches) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, drafter, c, width] = nano;
  EXPECT_TRUE(drafter->graphs_on()) << "graphs are on by default";
  // The replays counted below are the two graphs' (the one graph has its own test), captured again as at load.
  drafter->set_one_graph(false);
  drafter->capture_bucket_graphs();
  const int lengths[] = {17, 64, 130, 5, 90};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(drafter->absorb(i, 0, lengths[i], testing::random_taps(lengths[i], width, 20 + i)).ok());
  }
  auto request = [&](int stream, int depth, Sampling sampling) {
    return request_at(stream, drafter->context_length(stream), 100 + 37 * stream, depth, sampling);
  };
  const Sampling greedy{};
  auto shapes = [&] {
    return std::vector<std::vector<DraftRequest>>{
        {request(0, c.block_size, greedy)},
        {request(1, c.block_size, greedy), request(2, 4, Sampling{0.8f, 0, 0.95f, 0.0f, 7}),
         request(3, 2, Sampling{1.2f, 40, 1.0f, 0.05f, 11})},
        {request(0, 3, Sampling{0.7f, 5, 1.0f, 0.0f, 3}), request(1, 3, greedy), request(2, 3, greedy),
         request(3, 3, Sampling{1.0f, 0, 0.9f, 0.0f, 13}), request(4, 3, greedy)}};
  };
  for (int phase = 0; phase < 2; ++phase) {
    SCOPED_TRACE("phase " + std::to_string(phase));
    const std::vector<std::vector<DraftRequest>> cases = shapes();
    drafter->set_graphs(false);
    std::vector<std::vector<Draft>> eager;
    for (const auto& requests : cases) eager.push_back(drafter->draft(requests));
    drafter->set_graphs(true);
    const int64_t replays = drafter->graph_replays();
    for (int repeat = 0; repeat < 3; ++repeat) {
      for (size_t k = 0; k < cases.size(); ++k) {
        SCOPED_TRACE("shape " + std::to_string(k) + " repeat " + std::to_string(repeat));
        ASSERT_TRUE(drafter->poison_scratch_for_test().ok());
        expect_same_drafts(drafter->draft(cases[k]), eager[k]);
      }
    }
    // Block and scan graph per shape (request buckets 1, 3, 6), every one captured at load: each graphed pass
    // replays both, in both phases (no capture inside a pass).
    EXPECT_EQ(drafter->graph_replays() - replays, 2 * 3 * 3);
    EXPECT_EQ(drafter->graph_failures(), 0);
    // Grow every context (doubling moves some caches), so replays must read the new pointers and lengths.
    for (int i = 0; i < 5; ++i) {
      const int64_t held = drafter->context_length(i);
      ASSERT_TRUE(drafter->absorb(i, held, 70, testing::random_taps(70, width, 40 + i)).ok());
    }
  }
}

// Request counts run as their bucket (5 -> 6, 7 -> 8) with padding requests, and absorb rows as theirs (5 -> 6):
// the real requests' tokens, chance bits and U rows equal, bit for bit, those of a pass whose bucket is filled by
// real requests instead (same bucket, so the same GEMM shapes); exact counts (buckets off) draft the same tokens
// up to a near-tie flip. A padding request writing into a real stream's rows turns this red.
TEST(CudaDrafter, PaddingRequestsAndRowsLeaveEveryRealDraftsBits) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, drafter, c, width] = nano;
  EXPECT_GT(drafter->bucket_graphs_captured(), 0) << "every bucket's graphs are captured at load";
  const int lengths[] = {9, 40, 131, 3, 70, 22, 57, 100};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(drafter->absorb(i, 0, lengths[i], testing::random_taps(lengths[i], width, 300 + i)).ok());
  }
  const Sampling samplings[] = {Sampling{}, Sampling{0.8f, 0, 0.95f, 0.0f, 5}, Sampling{},
                                Sampling{1.1f, 30, 1.0f, 0.05f, 9}};
  auto requests = [&](int count) {
    std::vector<DraftRequest> out(count);
    for (int i = 0; i < count; ++i) {
      out[i] = request_at(i, lengths[i], 60 + 11 * i, 1 + (i * 3) % c.block_size, samplings[i % 4]);
    }
    return out;
  };
  auto logits = [](const CudaDsparkDrafter& d) {
    Result<std::vector<float>> u = d.last_base_logits();
    EXPECT_TRUE(u.ok());
    return u.ok() ? *u : std::vector<float>{};
  };
  for (const auto& [count, bucket] : {std::pair{5, 6}, std::pair{7, 8}}) {
    SCOPED_TRACE(std::to_string(count) + " requests in bucket " + std::to_string(bucket));
    ASSERT_TRUE(drafter->poison_scratch_for_test().ok());
    const std::vector<Draft> padded = drafter->draft(requests(count));
    EXPECT_EQ(drafter->last_pass_requests(), bucket);
    const std::vector<float> padded_u = logits(*drafter);
    ASSERT_TRUE(drafter->poison_scratch_for_test().ok());
    const std::vector<Draft> full = drafter->draft(requests(bucket));
    EXPECT_EQ(drafter->last_pass_requests(), bucket);
    const std::vector<float> full_u = logits(*drafter);
    ASSERT_EQ(padded_u.size(), static_cast<size_t>(count) * c.block_size * c.vocab_size);
    ASSERT_GE(full_u.size(), padded_u.size());
    EXPECT_TRUE(std::equal(padded_u.begin(), padded_u.end(), full_u.begin())) << "U rows of the real requests";
    ASSERT_EQ(padded.size(), static_cast<size_t>(count));
    ASSERT_NO_FATAL_FAILURE(expect_same_drafts(padded, std::vector<Draft>(full.begin(), full.begin() + count)));
    // Exact counts (the old path): U within the bf16 tolerance, drafts equal up to a near-tie flip.
    drafter->set_request_buckets(false);
    const std::vector<Draft> exact = drafter->draft(requests(count));
    EXPECT_EQ(drafter->last_pass_requests(), count);
    EXPECT_LT(relative_error(logits(*drafter), padded_u), kBf16Tolerance);
    int equal = 0, total = 0;
    for (int i = 0; i < count; ++i) {
      ASSERT_TRUE(exact[i].status.ok()) << exact[i].status.to_string();
      for (size_t k = 0; k < exact[i].tokens.size(); ++k, ++total) {
        if (exact[i].tokens[k] != padded[i].tokens[k]) break;
        ++equal;
      }
    }
    EXPECT_GE(equal * 10, total * 9) << equal << " of " << total;
    drafter->set_request_buckets(true);
    drafter->capture_bucket_graphs();
  }
  // absorb_device(): 5 rows (padded to 6) against the same 5 rows plus a sixth of another stream.
  constexpr int kRows = 6;
  const UploadedTaps uploaded = upload_taps(kRows, width, 91, drafter->facts().tap_device);
  const DeviceTaps& on_device = uploaded.taps;
  std::unique_ptr<CudaDsparkDrafter> padded_absorb = nano.another();
  std::unique_ptr<CudaDsparkDrafter> full_absorb = nano.another();
  ASSERT_TRUE(padded_absorb && full_absorb);
  const std::vector<TapRows> five = {{0, 0, 0, 3}, {1, 0, 3, 2}};
  const std::vector<TapRows> six = {{0, 0, 0, 3}, {1, 0, 3, 2}, {2, 0, 5, 1}};
  for (auto [d, call] : {std::pair{padded_absorb.get(), &five}, std::pair{full_absorb.get(), &six}}) {
    ASSERT_TRUE(d->poison_scratch_for_test().ok());
    const int64_t replays = d->graph_replays();
    ASSERT_TRUE(d->absorb_device(*call, on_device).ok());
    ASSERT_TRUE(d->settle().ok());
    EXPECT_EQ(d->graph_replays() - replays, 1) << "row bucket 6's graph, captured at load";
  }
  std::vector<DraftRequest> two(2);
  for (int i = 0; i < 2; ++i) two[i] = request_at(i, 3 - i, 17 + i, c.block_size);
  const std::vector<Draft> a = padded_absorb->draft(two);
  const std::vector<Draft> b = full_absorb->draft(two);
  EXPECT_EQ(logits(*padded_absorb), logits(*full_absorb)) << "contexts absorbed with and without padding rows";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(a[i].status.ok() && b[i].status.ok());
    EXPECT_EQ(a[i].tokens, b[i].tokens);
  }
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
