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

TEST(CpuOpSplit, TimedForwardsKeepTheirBitsAndAreCountedByWidth) {
  auto target = small_target(false, NumericMode::Bf16);
  const std::vector<int32_t> tokens = random_tokens(24, 3);
  const RowOutputs oracle = one_row_steps(*target, 1, tokens, kTapCount);
  op_split_clear();
  set_op_split(true);
  const RowOutputs timed = windowed(*target, 2, tokens, {3}, kTapCount);
  set_op_split(false);
  const std::string report = op_split_report();
  op_split_clear();
  EXPECT_EQ(rows_differing(timed, oracle), 0);
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
      for (int width : {4, 5, 6, 7, 8, 12, 16})
        EXPECT_EQ(rows_differing(windowed(*target, stream++, tokens, {width}, kTapCount), oracle), 0)
            << "mode " << int(mode) << " prefetch " << setting.unprefetched_rows << "/" << setting.groups << " width "
            << width;
    }
    compute::set_verify_prefetch(-1, 0);
  }
}

}  // namespace
}  // namespace ls::lfm2
