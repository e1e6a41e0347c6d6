// The CUDA target's state: a prompt split into any chunks, a commit of some of a window's rows and graph replays
// (with rollbacks) give the bits of the plain run; refusals of fp32, uncommitted windows and a full KV pool by name.
// Shared setup: cuda_target_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_target_test_util.h"

namespace ls::lfm2 {
namespace {

using namespace cuda_test;

// The lanes split a long prompt by the rows other streams leave (lanes_steps.cpp): any split must give the same bits.
TEST(CudaTarget, APromptSplitIntoAnyChunksGivesTheBitsOfOneWholeWindow) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    const std::vector<int32_t> prompt = testing::random_tokens(300, 21);
    std::vector<std::vector<RowBits>> runs;
    for (const std::vector<int>& split : {std::vector<int>{300}, std::vector<int>{37, 200, 63}, std::vector<int>{129, 171}}) {
      std::vector<RowBits> rows;
      size_t begin = 0;
      for (int chunk : split) {
        Window w;
        w.stream = 3;
        w.tokens = std::span<const int32_t>(prompt.data() + begin, chunk);
        w.want_logits = true;
        Result<Verified> v = target->forward(std::span<const Window>(&w, 1));
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        const int64_t tap_width = static_cast<int64_t>(v->taps.size()) / chunk;
        for (int r = 0; r < chunk; ++r) rows.push_back(row_bits(*v, r, 97, tap_width));
        ASSERT_TRUE(target->commit(3, chunk).ok());
        begin += chunk;
      }
      target->release(3);
      runs.push_back(rows);
    }
    EXPECT_TRUE(runs[0] == runs[1]) << (moe ? "moe" : "dense");
    EXPECT_TRUE(runs[0] == runs[2]) << (moe ? "moe" : "dense");
  }
}

TEST(CudaTarget, CommitOfThreeOfEightRowsEqualsHavingRunOnlyThoseThree) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    const std::vector<int32_t> prefix = testing::random_tokens(5, 11), window = testing::random_tokens(8, 12),
                               after = testing::random_tokens(6, 13);
    for (int kept = 1; kept <= 8; ++kept) {
      // Stream 1 runs 8 rows and keeps `kept`; stream 2 runs only the kept rows; both continue with `after`.
      std::vector<int32_t> path = prefix;
      path.insert(path.end(), window.begin(), window.begin() + kept);
      path.insert(path.end(), after.begin(), after.end());
      const std::vector<RowBits> expected = one_row_oracle(*target, 2, path, stream_sampling(1));
      target->release(1);
      Window w;
      w.stream = 1;
      w.tokens = prefix;
      ASSERT_TRUE(target->forward(std::span<const Window>(&w, 1)).ok());
      ASSERT_TRUE(target->commit(1, static_cast<int>(prefix.size())).ok());
      w.tokens = window;
      ASSERT_TRUE(target->forward(std::span<const Window>(&w, 1)).ok());
      ASSERT_TRUE(target->commit(1, kept).ok());
      EXPECT_EQ(target->committed_length(1), static_cast<int64_t>(prefix.size()) + kept);
      for (size_t i = 0; i < after.size(); ++i) {
        w.tokens = std::span<const int32_t>(&after[i], 1);
        w.want_logits = true;
        w.sampling = stream_sampling(1);
        Result<Verified> v = target->forward(std::span<const Window>(&w, 1));
        ASSERT_TRUE(v.ok());
        EXPECT_EQ(row_bits(*v, 0, 97, static_cast<int64_t>(v->taps.size())), expected[prefix.size() + kept + i])
            << (moe ? "moe" : "dense") << " kept " << kept << " step " << i;
        ASSERT_TRUE(target->commit(1, 1).ok());
      }
      target->release(1);
    }
  }
}

// Steady-state forwards replay captured CUDA graphs: draws and taps must equal the eager launches bit for bit.
TEST(CudaTarget, GraphReplaysGiveTheEagerBitsForDrawsAndTaps) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    std::vector<std::vector<RowBits>> runs;
    for (bool graphs : {false, true}) {
      target->set_graphs(graphs);
      std::vector<RowBits> rows;
      std::vector<std::vector<int32_t>> tokens;
      for (int s = 0; s < 4; ++s) tokens.push_back(testing::random_tokens(60, 40 + s));
      std::vector<int> done(4, 0);
      for (int round = 0; round < 14; ++round) {
        std::vector<Window> windows;
        for (int s = 0; s < 4; ++s) {
          Window w;
          w.stream = 10 + s;
          w.tokens = std::span<const int32_t>(tokens[s].data() + done[s], round == 0 ? 8 : 1 + (round + s) % 3);
          w.sampling = stream_sampling(s);
          windows.push_back(w);
        }
        Result<Verified> v = target->forward(windows);
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        const int64_t tap_width = static_cast<int64_t>(v->taps.size()) / v->row_begin.back();
        for (int64_t r = 0; r < v->row_begin.back(); ++r)
          rows.push_back(RowBits{0, bits_hash(v->taps.data() + r * tap_width, tap_width), v->draws[r]});
        for (int s = 0; s < 4; ++s) {
          const int kept = 1 + (round * 7 + s) % static_cast<int>(windows[s].tokens.size());  // rollbacks too
          ASSERT_TRUE(target->commit(10 + s, kept).ok());
          done[s] += kept;
        }
      }
      if (graphs) {
        EXPECT_GT(target->graph_count(), 0);
      }
      for (int s = 0; s < 4; ++s) target->release(10 + s);
      runs.push_back(rows);
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_EQ(runs[0][i], runs[1][i]) << (moe ? "moe" : "dense") << " row " << i;
  }
}

TEST(CudaTarget, RefusesFp32UncommittedWindowsAndAFullKvPoolByName) {
  LS_SKIP_WITHOUT_DEVICE();
  const io::ModelConfig config = testing::small_config(false);
  LoadOptions fp32 = cuda_options();
  fp32.mode = NumericMode::Fp32;
  auto refused = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 7), fp32);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::InvalidArgument);

  LoadOptions tight = cuda_options();
  tight.kv_pages = 2;  // 32 positions
  tight.kv_page_size = 16;
  auto target = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 7), tight);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const std::vector<int32_t> tokens = testing::random_tokens(40, 5);
  Window a;
  a.stream = 1;
  a.tokens = std::span<const int32_t>(tokens.data(), 20);
  ASSERT_TRUE((*target)->forward(std::span<const Window>(&a, 1)).ok());
  Window b;
  b.stream = 2;
  b.tokens = std::span<const int32_t>(tokens.data(), 4);
  Result<Verified> uncommitted = (*target)->forward(std::span<const Window>(&b, 1));
  ASSERT_FALSE(uncommitted.ok());
  EXPECT_EQ(uncommitted.status().code(), ErrorCode::InvalidArgument);
  ASSERT_TRUE((*target)->commit(1, 20).ok());
  b.tokens = std::span<const int32_t>(tokens.data(), 20);  // needs 2 pages, 0 free
  Result<Verified> full = (*target)->forward(std::span<const Window>(&b, 1));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), ErrorCode::OutOfMemory);
  EXPECT_NE(full.status().message().find("KV pages"), std::string::npos) << full.status().to_string();
  (*target)->release(1);
  EXPECT_EQ((*target)->free_pages(), 2);
  EXPECT_TRUE((*target)->forward(std::span<const Window>(&b, 1)).ok());
}

}  // namespace
}  // namespace ls::lfm2
#endif  // LS_HAVE_CUDA
