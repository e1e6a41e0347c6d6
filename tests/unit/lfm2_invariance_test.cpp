// Whole-model batch invariance: a row's logits, draws and taps are the same bits alone, in windows of 1..16 rows,
// beside other streams' windows (64 rows in one forward) and when a long window spans several passes.
#include <gtest/gtest.h>

#include <algorithm>

#include "lfm2_test_util.h"

namespace ls::lfm2 {
namespace {
using namespace testing;

constexpr int kTapCount = 3;


TEST(Lfm2Invariance, WindowsOfEveryWidthFrom1To16ReproduceOneRowStepsBitwise) {
  for (bool moe : {false, true})
    for (NumericMode mode : kModes) {
      auto target = small_target(moe, mode);
      const std::vector<int32_t> tokens = random_tokens(40, 1);
      const RowOutputs oracle = one_row_steps(*target, 1, tokens, kTapCount);
      ASSERT_EQ(oracle.logits.size(), tokens.size());
      for (int width = 2; width <= 16; ++width) {
        const RowOutputs rows = windowed(*target, 100 + width, tokens, {width}, kTapCount);
        EXPECT_EQ(rows_differing(rows, oracle), 0) << "moe=" << moe << " mode=" << int(mode) << " width=" << width;
      }
    }
}

TEST(Lfm2Invariance, RowsBesideOtherStreamsIn64RowForwardsEqualTheirOneRowSteps) {
  for (bool moe : {false, true})
    for (NumericMode mode : kModes) {
      auto target = small_target(moe, mode);
      constexpr int kStreams = 4;
      std::vector<std::vector<int32_t>> tokens;
      std::vector<RowOutputs> oracle;
      for (int s = 0; s < kStreams; ++s) {
        tokens.push_back(random_tokens(48, 10 + s));
        oracle.push_back(one_row_steps(*target, 1000 + s, tokens[s], kTapCount));
      }
      // Rounds of 4 windows with different widths; the first round is 4 x 16 = 64 rows.
      const int widths[3][kStreams] = {{16, 16, 16, 16}, {1, 7, 3, 16}, {16, 2, 13, 5}};
      std::vector<RowOutputs> got(kStreams);
      std::vector<size_t> fed(kStreams, 0);
      for (int round = 0; round < 6; ++round) {
        std::vector<Window> windows;
        for (int s = 0; s < kStreams; ++s) {
          const size_t rows = std::min<size_t>(widths[round % 3][s], tokens[s].size() - fed[s]);
          if (rows == 0) continue;
          Window window;
          window.stream = 2000 + s;
          window.tokens = std::span<const int32_t>(tokens[s].data() + fed[s], rows);
          window.want_logits = true;
          windows.push_back(window);
        }
        if (windows.empty()) break;
        Result<Verified> verified = target->forward(windows);
        ASSERT_TRUE(verified.ok()) << verified.status().to_string();
        for (size_t w = 0; w < windows.size(); ++w) {
          const int s = static_cast<int>(windows[w].stream - 2000);
          append_rows(*verified, w, *target, kTapCount, got[s]);
          ASSERT_TRUE(target->commit(windows[w].stream, static_cast<int>(windows[w].tokens.size())).ok());
          fed[s] += windows[w].tokens.size();
        }
      }
      for (int s = 0; s < kStreams; ++s)
        EXPECT_EQ(rows_differing(got[s], oracle[s]), 0) << "moe=" << moe << " mode=" << int(mode) << " stream " << s;
    }
}

TEST(Lfm2Invariance, AWindowSplitAcrossPassesEqualsOnePassAndTheThreadCountDoesNotMatter) {
  for (bool moe : {false, true})
    for (NumericMode mode : kModes) {
      auto one_pass = small_target(moe, mode, 2, 512);
      auto small_passes = small_target(moe, mode, 1, 5);  // 5-row passes, one thread
      const std::vector<int32_t> tokens = random_tokens(37, 3);
      const RowOutputs a = windowed(*one_pass, 1, tokens, {37}, kTapCount);
      const RowOutputs b = windowed(*small_passes, 1, tokens, {37}, kTapCount);
      EXPECT_EQ(rows_differing(a, b), 0) << "moe=" << moe << " mode=" << int(mode);
    }
}

// Greedy windows that want no logits take the fused head + argmax: their draws are the draws of the same rows with
// logits (the argmax of those logits), at every width, beside a sampled window (its group keeps the full head) and at
// 1 and 2 threads.
TEST(Lfm2Invariance, GreedyDrawsWithoutLogitsEqualTheDrawsOfTheSameRowsWithLogits) {
  for (bool moe : {false, true})
    for (NumericMode mode : kModes)
      for (int threads : {1, 2}) {
        auto target = small_target(moe, mode, threads);
        const std::vector<int32_t> tokens = random_tokens(34, 9);
        const RowOutputs oracle = one_row_steps(*target, 1, tokens, kTapCount);
        for (size_t i = 0; i < oracle.logits.size(); ++i) {
          const auto& logits = oracle.logits[i];
          ASSERT_EQ(oracle.draws[i], std::max_element(logits.begin(), logits.end()) - logits.begin()) << "row " << i;
        }
        for (bool beside_sampled : {false, true})
          for (int width : {1, 3, 8, 16}) {
            const StreamId stream = 10 + width + (beside_sampled ? 100 : 0), other = 500 + stream;
            std::vector<int32_t> draws;
            for (size_t begin = 0; begin < tokens.size();) {
              const size_t rows = std::min<size_t>(width, tokens.size() - begin);
              std::vector<Window> windows(1);
              windows[0].stream = stream;
              windows[0].tokens = std::span<const int32_t>(tokens.data() + begin, rows);
              windows[0].want_logits = false;
              if (beside_sampled) {
                Window sampled;
                sampled.stream = other;
                sampled.tokens = std::span<const int32_t>(tokens.data() + begin, rows);
                sampled.sampling.temperature = 0.8f;
                sampled.sampling.seed = 5;
                windows.push_back(sampled);
              }
              Result<Verified> verified = target->forward(windows);
              ASSERT_TRUE(verified.ok()) << verified.status().to_string();
              EXPECT_TRUE(verified->logits.empty() || beside_sampled);
              for (int64_t row = verified->row_begin[0]; row < verified->row_begin[1]; ++row)
                draws.push_back(verified->draws[row]);
              for (const Window& window : windows)
                ASSERT_TRUE(target->commit(window.stream, static_cast<int>(rows)).ok());
              begin += rows;
            }
            EXPECT_EQ(draws, oracle.draws) << "moe=" << moe << " mode=" << int(mode) << " threads=" << threads
                                           << " width=" << width << " beside a sampled window=" << beside_sampled;
          }
      }
}

TEST(Lfm2Invariance, MeasuredExactWidthIsTheFull16OnTheCpuBackend) {
  for (NumericMode mode : kModes) {
    auto target = small_target(true, mode);
    Result<int> width = measure_exact_width(*target, 16);
    ASSERT_TRUE(width.ok());
    EXPECT_EQ(*width, 16);
    EXPECT_EQ(target->stream_count(), 0);  // the probe streams were released
  }
}

}  // namespace
}  // namespace ls::lfm2
