// The CPU forward's diagnostics leave its bits alone: LS_CPU_OP_SPLIT's timers (and the widths they count) and every
// verify prefetch setting (LS_CPU_VERIFY_PREFETCH / set_verify_prefetch) give each window row its one-row step's bits.
#include <gtest/gtest.h>

#include <string>

#include "compute/cpu/matmul_avx512.h"
#include "lfm2_test_util.h"
#include "model/lfm2/op_split.h"

namespace ls::lfm2 {
namespace {
using namespace testing;

constexpr int kTapCount = 3;

// `tokens` fed in windows of `width` rows; every row's outputs.
RowOutputs in_windows(Target& target, StreamId stream, const std::vector<int32_t>& tokens, size_t width) {
  RowOutputs out;
  for (size_t begin = 0; begin < tokens.size(); begin += width) {
    const size_t rows = std::min(width, tokens.size() - begin);
    Window window;
    window.stream = stream;
    window.tokens = std::span<const int32_t>(tokens.data() + begin, rows);
    window.want_logits = true;
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    EXPECT_TRUE(verified.ok());
    if (!verified.ok()) return out;
    append_rows(*verified, 0, target, kTapCount, out);
    EXPECT_TRUE(target.commit(stream, static_cast<int>(rows)).ok());
  }
  return out;
}

bool same_rows(const RowOutputs& a, const RowOutputs& b) {
  if (a.logits.size() != b.logits.size()) return false;
  for (size_t i = 0; i < a.logits.size(); ++i)
    if (!same_bits(a.logits[i], b.logits[i]) || !same_bits(a.taps[i], b.taps[i]) || a.draws[i] != b.draws[i])
      return false;
  return true;
}

TEST(CpuOpSplit, TimedForwardsKeepTheirBitsAndAreCountedByWidth) {
  auto target = small_target(false, NumericMode::Bf16);
  const std::vector<int32_t> tokens = random_tokens(24, 3);
  const RowOutputs oracle = one_row_steps(*target, 1, tokens, kTapCount);
  op_split_clear();
  set_op_split(true);
  const RowOutputs timed = in_windows(*target, 2, tokens, 3);
  set_op_split(false);
  const std::string report = op_split_report();
  op_split_clear();
  EXPECT_TRUE(same_rows(timed, oracle));
  EXPECT_NE(report.find("rows 3: 8 forwards"), std::string::npos) << report;
  EXPECT_EQ(report.find("rows 1:"), std::string::npos) << report;  // the oracle ran with the split off
  for (const char* kind : {"conv_in", "proj_add", "qkv", "attention", "gate_up", "head"})
    EXPECT_NE(report.find(kind), std::string::npos) << kind;
}

TEST(CpuOpSplit, EveryVerifyPrefetchSettingGivesWindowRowsTheirOneRowBits) {
  struct Setting {
    int64_t unprefetched_rows, groups;
  };
  for (NumericMode mode : kModes) {
    auto target = small_target(false, mode);
    const std::vector<int32_t> tokens = random_tokens(30, 9);
    const RowOutputs oracle = one_row_steps(*target, 1, tokens, kTapCount);
    StreamId stream = 10;
    for (Setting setting : {Setting{1, 2}, Setting{0, 1}, Setting{1, 4}, Setting{3, 8}, Setting{-1, 0}}) {
      compute::set_verify_prefetch(setting.unprefetched_rows, setting.groups);
      for (size_t width : {4, 5, 6, 7, 8, 12, 16})
        EXPECT_TRUE(same_rows(in_windows(*target, stream++, tokens, width), oracle))
            << "mode " << int(mode) << " prefetch " << setting.unprefetched_rows << "/" << setting.groups << " width "
            << width;
    }
    compute::set_verify_prefetch(-1, 0);
  }
}

}  // namespace
}  // namespace ls::lfm2
