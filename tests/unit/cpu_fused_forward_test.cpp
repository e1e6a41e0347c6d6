// The CPU forward and drafter pass with the few-row fused steps (compute/cpu/fused_ops.h) give the bits of the
// unfused sequences: target windows of 1..16 rows (alone and beside other streams) and drafter blocks, 2-3 threads.
#include <gtest/gtest.h>

#include <cstring>

#include "compute/cpu/fused_ops.h"
#include "compute/cpu/matmul_avx512.h"
#include "draft/dspark/dspark_drafter.h"
#include "dspark_test_support.h"
#include "lfm2_test_util.h"

namespace ls {
namespace {

constexpr int kTapCount = 3;

// Restores the fused steps and the chunk size chosen before the test when it ends.
struct FusionRestore {
  ~FusionRestore() {
    compute::set_cpu_fusion_steps(before);
    compute::set_stream_chunk_bytes(chunk_bytes);
  }
  unsigned before = compute::cpu_fusion_steps();
  int64_t chunk_bytes = compute::set_stream_chunk_bytes(0);
};

// The chunk sizes the tests run at: the default, and one small enough that every call splits into many chunks.
constexpr int64_t kChunkBytes[] = {0, 512};

// Feeds `tokens` to two streams side by side (one forward per turn: both streams' windows, widths cycling), with
// fusion switched as asked; every row's logits, taps and draws of both streams.
lfm2::testing::RowOutputs run_windows(Target& target, const std::vector<int32_t>& tokens, bool fused, StreamId first) {
  compute::set_cpu_fusion(fused);
  const int widths[] = {1, 3, 4, 2, 8, 16, 5, 7};
  lfm2::testing::RowOutputs out;
  size_t begin = 0;
  for (size_t turn = 0; begin < tokens.size(); ++turn) {
    const size_t rows = std::min<size_t>(widths[turn % std::size(widths)], tokens.size() - begin);
    Window windows[2];
    for (int w = 0; w < 2; ++w) {
      windows[w].stream = first + w;
      windows[w].tokens = std::span<const int32_t>(tokens.data() + begin, rows);
      windows[w].want_logits = true;
      windows[w].want_taps = true;
    }
    // A lone window on even turns (one segment), both streams on odd ones (two segments in one pass).
    const size_t count = turn % 2 == 0 ? 1 : 2;
    Result<Verified> verified = target.forward(std::span<const Window>(windows, count));
    EXPECT_TRUE(verified.ok()) << verified.status().to_string();
    if (!verified.ok()) return out;
    for (size_t w = 0; w < count; ++w) {
      lfm2::testing::append_rows(*verified, w, target, kTapCount, out);
      // Keep all but the last row of wide windows, as a round whose last draft missed.
      const int kept = rows > 2 ? static_cast<int>(rows) - 1 : static_cast<int>(rows);
      EXPECT_TRUE(target.commit(first + w, kept).ok());
    }
    begin += rows > 2 ? rows - 1 : rows;
    if (count == 1) {  // the second stream catches up alone on the same tokens
      Result<Verified> again = target.forward(std::span<const Window>(&windows[1], 1));
      EXPECT_TRUE(again.ok());
      if (!again.ok()) return out;
      lfm2::testing::append_rows(*again, 0, target, kTapCount, out);
      EXPECT_TRUE(target.commit(first + 1, rows > 2 ? static_cast<int>(rows) - 1 : static_cast<int>(rows)).ok());
    }
  }
  return out;
}

TEST(CpuFusedForward, TargetWindowsOfEveryWidthGiveTheBitsOfTheUnfusedForwardAtTwoAndThreeThreads) {
  FusionRestore restore;
  for (compute::NumericMode mode : lfm2::testing::kModes)
    for (bool moe : {false, true})
      for (int threads : {2, 3})
        for (int64_t chunk_bytes : kChunkBytes) {
        compute::set_stream_chunk_bytes(chunk_bytes);
        std::unique_ptr<lfm2::Lfm2Target> target = lfm2::testing::small_target(moe, mode, threads);
        const std::vector<int32_t> tokens = lfm2::testing::random_tokens(60, 5 + threads);
        const lfm2::testing::RowOutputs fused = run_windows(*target, tokens, true, 10);
        const lfm2::testing::RowOutputs unfused = run_windows(*target, tokens, false, 20);
        ASSERT_EQ(fused.logits.size(), unfused.logits.size());
        ASSERT_GT(fused.logits.size(), tokens.size());
        int differing = 0;
        for (size_t row = 0; row < fused.logits.size(); ++row)
          differing += !lfm2::testing::same_bits(fused.logits[row], unfused.logits[row]) ||
                       !lfm2::testing::same_bits(fused.taps[row], unfused.taps[row]) ||
                       fused.draws[row] != unfused.draws[row];
        EXPECT_EQ(differing, 0) << (moe ? "moe" : "dense") << " threads=" << threads << " chunk=" << chunk_bytes
                                << (mode == compute::NumericMode::Bf16 ? " bf16" : " fp32");
      }
}

TEST(CpuFusedForward, DrafterBlocksAndScansGiveTheBitsOfTheUnfusedPassAtEveryDepthGreedyAndSampled) {
  FusionRestore restore;
  dspark::testing::TempDir dir;
  ASSERT_TRUE(dspark::testing::write_small_drafter(dir.path(), dspark::testing::small_drafter_config(), 31).ok());
  constexpr int kVocab = 96, kHidden = 32, kBlock = 4;
  dspark::testing::EmbeddingTarget target(dspark::testing::random_embedding(kVocab, kHidden, 9), kVocab, kHidden, 4);
  for (int threads : {2, 3})
    for (int64_t chunk_bytes : kChunkBytes) {
    compute::set_stream_chunk_bytes(chunk_bytes);  // 512 bytes: the scan's W2 call in 6 chunks of 16 ids
    DrafterOptions options;
    options.threads = threads;
    options.max_streams = 2;
    Result<std::unique_ptr<dspark::DsparkDrafter>> loaded = dspark::DsparkDrafter::load(dir.path(), target, options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    dspark::DsparkDrafter& drafter = **loaded;
    for (StreamId stream = 1; stream <= 2; ++stream)
      ASSERT_TRUE(drafter.absorb(stream, 0, 11, dspark::testing::random_taps(11, 2 * kHidden, 50 + stream)).ok());
    for (int depth = 1; depth <= kBlock; ++depth)
      for (size_t count : {size_t{1}, size_t{2}}) {
        std::vector<DraftRequest> requests(count);
        for (size_t i = 0; i < count; ++i) {
          requests[i].stream = static_cast<StreamId>(i + 1);
          requests[i].anchor_token = static_cast<int32_t>(7 + depth + i);
          requests[i].anchor_position = 11;
          requests[i].depth = depth;
          if (i == 1) requests[i].sampling = Sampling{0.8f, 0, 0.95f, 0.0f, 17};  // a sampled request beside
        }
        std::vector<std::vector<float>> hidden, logits;
        std::vector<std::vector<Draft>> drafts;
        for (bool fused : {true, false}) {
          compute::set_cpu_fusion(fused);
          drafts.push_back(drafter.draft(requests));
          hidden.emplace_back(drafter.last_final_hidden().begin(), drafter.last_final_hidden().end());
          logits.emplace_back(drafter.last_base_logits().begin(), drafter.last_base_logits().end());
        }
        const std::string where = "threads=" + std::to_string(threads) + " chunk=" + std::to_string(chunk_bytes) +
                                  " depth=" + std::to_string(depth) +
                                  " requests=" + std::to_string(count);
        EXPECT_TRUE(lfm2::testing::same_bits(hidden[0], hidden[1])) << where;
        EXPECT_TRUE(lfm2::testing::same_bits(logits[0], logits[1])) << where;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_TRUE(drafts[0][i].status.ok() && drafts[1][i].status.ok()) << where;
          EXPECT_EQ(drafts[0][i].tokens, drafts[1][i].tokens) << where;
          EXPECT_TRUE(lfm2::testing::same_bits(drafts[0][i].chances, drafts[1][i].chances)) << where;
        }
      }
  }
}

}  // namespace
}  // namespace ls
