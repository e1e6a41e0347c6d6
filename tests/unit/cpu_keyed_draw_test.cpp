// compute/cpu/keyed_draw.h: the pruned keyed draw gives draw_token's id for every input, and prunes most ids.
#include "compute/cpu/keyed_draw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "compute/sampling.h"

namespace ls::compute {
namespace {

// Logits of one kind: flat (a weak drafter), peaked, wide, with NaN and infinities, or with ties at the top.
std::vector<float> logits_of(int kind, int vocab, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, kind == 0 ? 0.3f : kind == 2 ? 8.0f : 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& value : logits) value = normal(rng);
  if (kind == 1) logits[rng() % vocab] += 12.0f;
  if (kind == 3) {
    logits[rng() % vocab] = std::numeric_limits<float>::quiet_NaN();
    logits[rng() % vocab] = -std::numeric_limits<float>::infinity();
  }
  if (kind == 4) {
    const int top = static_cast<int>(rng() % vocab);
    logits[top] = logits[(top + 7) % vocab] = 9.0f;
  }
  if (kind == 5) logits[rng() % vocab] = std::numeric_limits<float>::infinity();
  return logits;
}

TEST(KeyedDraw, PrunedDrawGivesDrawTokensIdForEveryInput) {
  std::mt19937 rng(1234);
  int draws = 0;
  for (int vocab : {1, 2, 17, 8192}) {
    for (int kind = 0; kind < 6; ++kind) {
      for (float temperature : {0.3f, 0.8f, 1.0f, 1.7f}) {
        for (int repeat = 0; repeat < (vocab == 8192 ? 12 : 40); ++repeat) {
          const std::vector<float> logits = logits_of(kind, vocab, rng);
          const Sampling sampling{temperature, 0, 1.0f, 0.0f, 0x5eed0000ull + static_cast<uint64_t>(repeat)};
          const int64_t position = 17 + repeat * 31;
          ASSERT_EQ(draw_token_pruned(logits, sampling, position), draw_token(logits, sampling, position))
              << "vocab " << vocab << " kind " << kind << " T " << temperature << " repeat " << repeat;
          ++draws;
        }
      }
    }
  }
  EXPECT_GT(draws, 1000);
}

TEST(KeyedDraw, AllNanGreedyAndFilteredDrawsAreDrawTokens) {
  const std::vector<float> nan(64, std::numeric_limits<float>::quiet_NaN());
  const Sampling t1{1.0f, 0, 1.0f, 0.0f, 9};
  EXPECT_EQ(draw_token_pruned(nan, t1, 3), draw_token(nan, t1, 3));
  std::mt19937 rng(77);
  for (int repeat = 0; repeat < 50; ++repeat) {
    const std::vector<float> logits = logits_of(repeat % 3, 500, rng);
    for (const Sampling& sampling : {Sampling{}, Sampling{0.9f, 20, 1.0f, 0.0f, 5}, Sampling{0.9f, 0, 0.9f, 0.0f, 6},
                                     Sampling{0.9f, 0, 1.0f, 0.05f, 7}})
      EXPECT_EQ(draw_token_pruned(logits, sampling, repeat), draw_token(logits, sampling, repeat)) << repeat;
  }
}

}  // namespace
}  // namespace ls::compute
