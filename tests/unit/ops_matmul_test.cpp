// Tests for the CPU GEMM: agreement with a double reference and bitwise batch invariance, fp32 and bf16 weights.
#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

TEST(OpsMatmul, MatchesADoubleReferenceForOddShapesInBothModes) {
  ThreadPool pool(2);
  for (NumericMode mode : kModes)
    for (int64_t K : {1, 7, 64, 77, 300}) {
      const int64_t rows = 9, N = 37;
      OpContext ctx{&pool, mode};
      OwnedMatrix w = random_matrix(N, K, 11 + K, mode);
      w.bias = stored(random_values(N, 12, 0.2f), mode);
      const std::vector<float> x = stored(random_values(rows * K, 13 + K), mode);
      std::vector<float> y = poisoned(rows * N);
      matmul(ctx, x.data(), rows, w.view(), y.data());
      ASSERT_TRUE(all_finite(y)) << mode_name(mode) << " K=" << K;
      // fp32: accumulation error only; bf16: plus one bf16 rounding of the output (2^-8 relative).
      const double tolerance = mode == NumericMode::Bf16 ? 1.0 / 256 : 1e-5;
      EXPECT_LE(max_relative_error(y, reference_matmul(x, rows, w), 0.05), tolerance) << mode_name(mode) << " K=" << K;
    }
}

TEST(OpsMatmul, RowsAreBitIdenticalAloneInWindowsOf1To16AndInA64RowBatch) {
  ThreadPool pool(2);
  for (NumericMode mode : kModes)
    for (int64_t K : {64, 77}) {
      const int64_t N = 45;
      OpContext ctx{&pool, mode};
      const OwnedMatrix w = random_matrix(N, K, 21, mode);
      const std::vector<float> x = stored(random_values(64 * K, 22), mode);
      const int differing = rows_differing_from_one_row_runs(
          x, K, N, [&](const float* in, int64_t rows, float* out) { matmul(ctx, in, rows, w.view(), out); });
      EXPECT_EQ(differing, 0) << mode_name(mode) << " K=" << K;
    }
}

TEST(OpsMatmul, ResultDoesNotDependOnTheThreadCount) {
  ThreadPool one(1), three(3);
  for (NumericMode mode : kModes) {
    const int64_t rows = 13, K = 96, N = 101;
    const OwnedMatrix w = random_matrix(N, K, 31, mode);
    const std::vector<float> x = stored(random_values(rows * K, 32), mode);
    std::vector<float> y1 = poisoned(rows * N), y3 = poisoned(rows * N);
    matmul(OpContext{&one, mode}, x.data(), rows, w.view(), y1.data());
    matmul(OpContext{&three, mode}, x.data(), rows, w.view(), y3.data());
    EXPECT_TRUE(all_finite(y1));
    EXPECT_TRUE(bitwise_equal(y1.data(), y3.data(), y1.size())) << mode_name(mode);
  }
}

TEST(OpsMatmul, Bf16ModeOutputsAreBf16Exact) {
  const int64_t rows = 4, K = 40, N = 24;
  const OwnedMatrix w = random_matrix(N, K, 41, NumericMode::Bf16);
  const std::vector<float> x = stored(random_values(rows * K, 42), NumericMode::Bf16);
  std::vector<float> y = poisoned(rows * N);
  matmul(OpContext{nullptr, NumericMode::Bf16}, x.data(), rows, w.view(), y.data());
  for (float value : y) EXPECT_EQ(value, round_to_bf16(value));
}

}  // namespace
}  // namespace ls::compute
