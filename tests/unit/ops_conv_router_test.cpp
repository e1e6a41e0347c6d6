// Tests for the short conv (state, passes, reference) and the sigmoid top-k router (order, ties, weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

constexpr int kWidth = 24, kKernel = 3;

// y for every row of a sequence that starts from zero history, computed directly from the definition.
std::vector<double> reference_conv(const std::vector<float>& bcx, int64_t rows, const std::vector<float>& weight) {
  std::vector<double> y(rows * kWidth);
  for (int64_t t = 0; t < rows; ++t)
    for (int c = 0; c < kWidth; ++c) {
      double sum = 0;
      for (int k = 0; k < kKernel; ++k) {
        const int64_t s = t - (kKernel - 1) + k;
        if (s >= 0) sum += double(weight[c * kKernel + k]) * bcx[s * 3 * kWidth + c] * bcx[s * 3 * kWidth + 2 * kWidth + c];
      }
      y[t * kWidth + c] = bcx[t * 3 * kWidth + kWidth + c] * sum;
    }
  return y;
}

TEST(OpsShortConv, MatchesTheDefinitionFromAZeroHistoryInBothModes) {
  for (NumericMode mode : kModes) {
    const int64_t rows = 7;
    const std::vector<float> bcx = stored(random_values(rows * 3 * kWidth, 1, 2.0f), mode);
    const std::vector<float> weight = stored(random_values(kWidth * kKernel, 2), mode);
    const std::vector<float> history(2 * kWidth, 0.0f);
    std::vector<float> z = poisoned(rows * kWidth), y = poisoned(rows * kWidth);
    short_conv(OpContext{nullptr, mode}, {bcx.data(), rows, kWidth, kKernel, history.data(), nullptr, 0, weight.data(), nullptr},
               z.data(), y.data());
    EXPECT_LE(max_relative_error(y, reference_conv(bcx, rows, weight), 4.0), mode == NumericMode::Bf16 ? 0.03 : 1e-6);
  }
}

TEST(OpsShortConv, OneWindowEqualsEarlierPassesAndEqualsRowByRowWithHistoryBitwise) {
  for (NumericMode mode : kModes) {
    const int64_t rows = 20;
    const OpContext ctx{nullptr, mode};
    const std::vector<float> bcx = stored(random_values(rows * 3 * kWidth, 3, 2.0f), mode);
    const std::vector<float> weight = stored(random_values(kWidth * kKernel, 4), mode);
    const std::vector<float> bias = stored(random_values(kWidth, 5), mode);
    const std::vector<float> start = stored(random_values(2 * kWidth, 6), mode);  // a stream's history
    std::vector<float> z_all = poisoned(rows * kWidth), y_all = poisoned(rows * kWidth);
    short_conv(ctx, {bcx.data(), rows, kWidth, kKernel, start.data(), nullptr, 0, weight.data(), bias.data()},
               z_all.data(), y_all.data());
    ASSERT_TRUE(all_finite(y_all));
    // Row by row, carrying the last two z's as history.
    std::vector<float> history = start, z(kWidth), y(kWidth);
    for (int64_t t = 0; t < rows; ++t) {
      short_conv(ctx, {bcx.data() + t * 3 * kWidth, 1, kWidth, kKernel, history.data(), nullptr, 0, weight.data(), bias.data()},
                 z.data(), y.data());
      EXPECT_TRUE(bitwise_equal(y.data(), y_all.data() + t * kWidth, kWidth)) << "row " << t;
      std::copy(history.begin() + kWidth, history.end(), history.begin());
      std::copy(z.begin(), z.end(), history.begin() + kWidth);
    }
    // Second pass of the same window: rows 13.. see rows 0..12 through z_before.
    std::vector<float> z_late = poisoned(7 * kWidth), y_late = poisoned(7 * kWidth);
    short_conv(ctx, {bcx.data() + 13 * 3 * kWidth, 7, kWidth, kKernel, start.data(), z_all.data(), 13, weight.data(), bias.data()},
               z_late.data(), y_late.data());
    EXPECT_TRUE(bitwise_equal(y_late.data(), y_all.data() + 13 * kWidth, 7 * kWidth));
    // One row in a second pass right after one row: taps reach into both z_before and history.
    std::vector<float> y_one = poisoned(kWidth);
    short_conv(ctx, {bcx.data() + 3 * kWidth, 1, kWidth, kKernel, start.data(), z_all.data(), 1, weight.data(), bias.data()},
               z.data(), y_one.data());
    EXPECT_TRUE(bitwise_equal(y_one.data(), y_all.data() + kWidth, kWidth));
  }
}

TEST(OpsShortConv, SplittingChannelsOverTwoThreadsGivesTheOneThreadBits) {
  ThreadPool pool(2);
  for (NumericMode mode : kModes) {
    const int64_t rows = 20;
    const int width = 200;  // four 64-channel chunks, the last partial
    const std::vector<float> bcx = stored(random_values(rows * 3 * width, 13, 2.0f), mode);
    const std::vector<float> weight = stored(random_values(width * kKernel, 14), mode);
    const std::vector<float> start = stored(random_values(2 * width, 16), mode);
    const ShortConvInput input{bcx.data(), rows, width, kKernel, start.data(), nullptr, 0, weight.data(), nullptr};
    std::vector<float> z1 = poisoned(rows * width), y1 = poisoned(rows * width);
    std::vector<float> z2 = poisoned(rows * width), y2 = poisoned(rows * width);
    short_conv(OpContext{nullptr, mode}, input, z1.data(), y1.data());
    short_conv(OpContext{&pool, mode}, input, z2.data(), y2.data());
    ASSERT_TRUE(all_finite(y2));
    EXPECT_TRUE(bitwise_equal(z1.data(), z2.data(), z1.size()));
    EXPECT_TRUE(bitwise_equal(y1.data(), y2.data(), y1.size()));
  }
}

// The AVX-512 kernel (16 channels at a time, products never fused into the sums) gives the scalar loop's bits, for
// 1..9 rows (a decode step, verify windows) over history, earlier passes of the window and this pass, with and
// without a bias, at a width with a partial last vector.
TEST(OpsShortConv, TheAvx512KernelGivesTheScalarLoopsBitsInBothModes) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512: only the scalar loop runs";
  for (NumericMode mode : kModes)
    for (int64_t rows : {1, 2, 4, 9})
      for (bool with_bias : {false, true}) {
        const int width = 37;
        const OpContext ctx{nullptr, mode};
        const std::vector<float> bcx = stored(random_values(rows * 3 * width, 31 + rows, 2.0f), mode);
        const std::vector<float> weight = stored(random_values(width * kKernel, 32), mode);
        const std::vector<float> bias = stored(random_values(width, 33), mode);
        const std::vector<float> start = stored(random_values(2 * width, 34), mode);
        const std::vector<float> before = stored(random_values(1 * width, 35), mode);  // one row of an earlier pass
        const ShortConvInput input{bcx.data(),    rows, width, kKernel, start.data(), before.data(), 1, weight.data(),
                                   with_bias ? bias.data() : nullptr};
        std::vector<float> z_vector = poisoned(rows * width), y_vector = poisoned(rows * width);
        std::vector<float> z_scalar = poisoned(rows * width), y_scalar = poisoned(rows * width);
        short_conv(ctx, input, z_vector.data(), y_vector.data());
        {
          CpuFeatures scalar = cpu_features();
          scalar.avx512 = scalar.avx512_bf16 = scalar.avx512_vnni = false;
          const CpuFeaturesOverride forced(scalar);
          short_conv(ctx, input, z_scalar.data(), y_scalar.data());
        }
        ASSERT_TRUE(all_finite(y_vector)) << mode_name(mode) << " rows " << rows;
        EXPECT_TRUE(bitwise_equal(z_vector.data(), z_scalar.data(), z_vector.size())) << mode_name(mode) << " " << rows;
        EXPECT_TRUE(bitwise_equal(y_vector.data(), y_scalar.data(), y_vector.size()))
            << mode_name(mode) << " rows " << rows << (with_bias ? " with bias" : "");
      }
}

TEST(OpsRouter, PicksTopKByBiasedScoreInDescendingOrderAndWeighsByUnbiasedScores) {
  const int experts = 6;
  const float logits[experts] = {0.0f, 2.0f, -1.0f, 1.0f, 0.5f, -2.0f};
  const float bias[experts] = {0.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f};  // lifts expert 2 to the top
  int32_t chosen[3] = {-1, -1, -1};
  float weights[3] = {NAN, NAN, NAN};
  route_experts(OpContext{}, logits, 1, {experts, 3, true, 1.0f, bias}, chosen, weights);
  EXPECT_EQ(chosen[0], 2);
  EXPECT_EQ(chosen[1], 1);
  EXPECT_EQ(chosen[2], 3);
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double sum = sigmoid(-1) + sigmoid(2) + sigmoid(1) + 1e-6;
  EXPECT_NEAR(weights[0], sigmoid(-1) / sum, 1e-6);
  EXPECT_NEAR(weights[1], sigmoid(2) / sum, 1e-6);
  EXPECT_NEAR(weights[2], sigmoid(1) / sum, 1e-6);
}

TEST(OpsRouter, TiesGoToTheLowerExpertIdAndScalingApplies) {
  const float logits[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  int32_t chosen[2] = {-1, -1};
  float weights[2] = {NAN, NAN};
  route_experts(OpContext{}, logits, 1, {4, 2, false, 2.5f, nullptr}, chosen, weights);
  EXPECT_EQ(chosen[0], 0);
  EXPECT_EQ(chosen[1], 1);
  EXPECT_FLOAT_EQ(weights[0], 2.5f / (1.0f + std::exp(-1.0f)));
}

TEST(OpsRouter, RowsAreBitIdenticalAloneInWindowsAndInA64RowBatch) {
  for (NumericMode mode : kModes) {
    const int experts = 16, k = 4;
    const std::vector<float> logits = stored(random_values(64 * experts, 7, 3.0f), mode);
    const std::vector<float> bias = random_values(experts, 8, 0.3f);
    EXPECT_EQ(rows_differing_from_one_row_runs(logits, experts, 2 * k,
                                               [&](const float* in, int64_t rows, float* out) {
                                                 std::vector<int32_t> chosen(rows * k);
                                                 std::vector<float> weights(rows * k);
                                                 route_experts(OpContext{nullptr, mode}, in, rows,
                                                               {experts, k, true, 1.0f, bias.data()}, chosen.data(),
                                                               weights.data());
                                                 for (int64_t i = 0; i < rows * k; ++i) {
                                                   out[(i / k) * 2 * k + i % k] = float(chosen[i]);
                                                   out[(i / k) * 2 * k + k + i % k] = weights[i];
                                                 }
                                               }),
              0);
  }
}

}  // namespace
}  // namespace ls::compute
