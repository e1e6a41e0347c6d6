// Commit / rollback: window + commit(kept) then more steps equals feeding the kept prefix token by token, bitwise.
#include <gtest/gtest.h>

#include "lfm2_test_util.h"

namespace ls::lfm2 {
namespace {
using namespace testing;

// Logits and taps of one more row (token `next`) on `stream`, committed.
RowOutputs step(Target& target, StreamId stream, int32_t next) {
  return one_row_steps(target, stream, {next}, 3);
}

TEST(Lfm2Commit, RandomAcceptedLengthsLeaveTheStateOfTheKeptPrefixBitForBit) {
  for (bool moe : {false, true})
    for (NumericMode mode : kModes) {
      auto target = small_target(moe, mode);
      std::vector<int32_t> kept_history;  // every token stream 1 has committed
      const std::vector<int32_t> prompt = random_tokens(5, 40);
      Window first;
      first.stream = 1;
      first.tokens = prompt;
      first.first_drawn_row = 4;
      ASSERT_TRUE(target->forward(std::span<const Window>(&first, 1)).ok());
      ASSERT_TRUE(target->commit(1, 5).ok());
      kept_history = prompt;
      for (int round = 0; round < 8; ++round) {
        const uint64_t r = splitmix64(1000 + round);
        const int rows = 1 + static_cast<int>(r % 8), kept = 1 + static_cast<int>((r >> 8) % rows);
        const std::vector<int32_t> drafts = random_tokens(rows, 50 + round);
        Window window;
        window.stream = 1;
        window.tokens = drafts;
        ASSERT_TRUE(target->forward(std::span<const Window>(&window, 1)).ok());
        ASSERT_TRUE(target->commit(1, kept).ok());
        kept_history.insert(kept_history.end(), drafts.begin(), drafts.begin() + kept);
        EXPECT_EQ(target->committed_length(1), static_cast<int64_t>(kept_history.size()));
        // The next row after the commit vs the same row after feeding the kept history one token at a time.
        const int32_t next = random_tokens(1, 70 + round)[0];
        const RowOutputs after_commit = step(*target, 1, next);
        kept_history.push_back(next);
        const StreamId oracle_stream = 100 + round;
        const RowOutputs oracle = one_row_steps(*target, oracle_stream, kept_history, 3);
        target->release(oracle_stream);
        ASSERT_FALSE(oracle.logits.empty());
        EXPECT_TRUE(same_bits(after_commit.logits[0], oracle.logits.back()))
            << "moe=" << moe << " mode=" << int(mode) << " round " << round << " rows " << rows << " kept " << kept;
        EXPECT_TRUE(same_bits(after_commit.taps[0], oracle.taps.back()));
      }
    }
}

TEST(Lfm2Commit, KeepingAllRowsOfAWindowEqualsKeepingThemOneByOne) {
  for (NumericMode mode : kModes) {
    auto target = small_target(true, mode);
    const std::vector<int32_t> tokens = random_tokens(6, 80);
    Window window;
    window.stream = 1;
    window.tokens = tokens;
    ASSERT_TRUE(target->forward(std::span<const Window>(&window, 1)).ok());
    ASSERT_TRUE(target->commit(1, 6).ok());
    const RowOutputs a = step(*target, 1, 5);
    const RowOutputs b = one_row_steps(*target, 2, {tokens[0], tokens[1], tokens[2], tokens[3], tokens[4], tokens[5], 5}, 3);
    EXPECT_TRUE(same_bits(a.logits[0], b.logits.back()));
  }
}

TEST(Lfm2Commit, ARejectedWindowLeavesNoTraceWhenOnlyItsFirstRowIsKept) {
  // Keep 1 of 8 rows whose tokens differ wildly from the later ones: the next step must not see them.
  auto target = small_target(false, NumericMode::Bf16);
  const std::vector<int32_t> prompt = random_tokens(4, 90);
  ASSERT_TRUE(one_row_steps(*target, 1, prompt, 3).logits.size() == 4);
  const std::vector<int32_t> window_tokens = {11, 96, 96, 96, 96, 96, 96, 96};
  Window window;
  window.stream = 1;
  window.tokens = window_tokens;
  ASSERT_TRUE(target->forward(std::span<const Window>(&window, 1)).ok());
  ASSERT_TRUE(target->commit(1, 1).ok());
  const RowOutputs after = step(*target, 1, 3);
  std::vector<int32_t> history = prompt;
  history.push_back(11);
  history.push_back(3);
  const RowOutputs oracle = one_row_steps(*target, 2, history, 3);
  EXPECT_TRUE(same_bits(after.logits[0], oracle.logits.back()));
}

}  // namespace
}  // namespace ls::lfm2
