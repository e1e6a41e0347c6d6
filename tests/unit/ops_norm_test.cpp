// Tests for the row-wise ops: RMSNorm, residual add, SwiGLU, embedding gather and the MoE slot sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

TEST(OpsRmsNorm, MatchesADoubleReferenceInBothModes) {
  for (NumericMode mode : kModes) {
    const int64_t rows = 6, width = 130;
    const std::vector<float> x = stored(random_values(rows * width, 1, 3.0f), mode);
    const std::vector<float> weight = stored(random_values(width, 2, 0.5f), mode);
    std::vector<float> y = poisoned(rows * width);
    rms_norm(OpContext{nullptr, mode}, x.data(), rows, width, weight.data(), 1e-5f, y.data());
    std::vector<double> expected(rows * width);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < width; ++i) sum += double(x[r * width + i]) * x[r * width + i];
      const double inverse_rms = 1.0 / std::sqrt(sum / width + 1e-5);
      for (int64_t i = 0; i < width; ++i) expected[r * width + i] = weight[i] * x[r * width + i] * inverse_rms;
    }
    EXPECT_LE(max_relative_error(y, expected, 0.05), mode == NumericMode::Bf16 ? 2.0 / 256 : 1e-6) << mode_name(mode);
  }
}

TEST(OpsRmsNorm, RowsAreBitIdenticalAloneInWindowsAndInA64RowBatch) {
  for (NumericMode mode : kModes) {
    const int64_t width = 64;
    const std::vector<float> x = stored(random_values(64 * width, 3, 2.0f), mode);
    const std::vector<float> weight = stored(random_values(width, 4), mode);
    const OpContext ctx{nullptr, mode};
    EXPECT_EQ(rows_differing_from_one_row_runs(x, width, width,
                                               [&](const float* in, int64_t rows, float* out) {
                                                 rms_norm(ctx, in, rows, width, weight.data(), 1e-5f, out);
                                               }),
              0)
        << mode_name(mode);
  }
}

TEST(OpsRmsNorm, Bf16ModeRoundsTheNormalisedValueBeforeTheWeight) {
  // x = [2, 5]: mean square 14.5; 2 / sqrt(14.5) rounds to bf16 before the weight 3 multiplies it (1.5703125),
  // where a single rounding would give 1.578125.
  const float x[2] = {2.0f, 5.0f}, weight[2] = {3.0f, 1.0f};
  float y[2] = {NAN, NAN};
  rms_norm(OpContext{nullptr, NumericMode::Bf16}, x, 1, 2, weight, 0.0f, y);
  EXPECT_EQ(y[0], 1.5703125f);
  EXPECT_EQ(y[1], round_to_bf16(5.0f * (1.0f / std::sqrt(14.5f))));
}

TEST(OpsSwiglu, MatchesSiluTimesUpAndRoundsTwiceInBf16) {
  for (NumericMode mode : kModes) {
    const int64_t count = 300;
    const std::vector<float> gate = stored(random_values(count, 5, 6.0f), mode);
    const std::vector<float> up = stored(random_values(count, 6, 2.0f), mode);
    std::vector<float> out = poisoned(count);
    swiglu(OpContext{nullptr, mode}, gate.data(), up.data(), count, out.data());
    std::vector<double> expected(count);
    for (int64_t i = 0; i < count; ++i) expected[i] = gate[i] / (1.0 + std::exp(-double(gate[i]))) * up[i];
    EXPECT_LE(max_relative_error(out, expected, 0.01), mode == NumericMode::Bf16 ? 2.0 / 256 : 1e-6) << mode_name(mode);
    if (mode == NumericMode::Bf16) {
      for (float value : out) EXPECT_EQ(value, round_to_bf16(value));
    }
  }
}

TEST(OpsResidual, AddRoundsTheSumInBf16AndIsExactInFp32) {
  float h[2] = {1.0f, 256.0f};
  const float delta[2] = {0.001f, 1.0f};
  add_residual(OpContext{nullptr, NumericMode::Bf16}, h, delta, 2);
  EXPECT_EQ(h[0], round_to_bf16(1.001f));
  EXPECT_EQ(h[1], 256.0f);  // 257 is not a bf16 value; ties round to even 256
  float g[1] = {1.0f};
  add_residual(OpContext{nullptr, NumericMode::Fp32}, g, delta, 1);
  EXPECT_EQ(g[0], 1.0f + 0.001f);
}

TEST(OpsEmbed, GathersTheTokensRowsExactlyFromFp32AndBf16Tables) {
  for (NumericMode mode : kModes) {
    const OwnedMatrix table = random_matrix(50, 12, 7, mode);
    const std::vector<int32_t> tokens = {3, 49, 0, 3};
    std::vector<float> out = poisoned(tokens.size() * 12);
    embed_rows(OpContext{nullptr, mode}, table.view(), tokens, out.data());
    for (size_t row = 0; row < tokens.size(); ++row)
      for (int i = 0; i < 12; ++i) EXPECT_EQ(out[row * 12 + i], matrix_at(table, tokens[row] * 12 + i));
  }
}

TEST(OpsSumSlots, SumsEachRowsSlotsInSlotOrderWithOneRounding) {
  // Slots 1, 2^-8, 2^-8: summed in fp32 then rounded gives 1 + 2^-7 in bf16; rounding after every add gives 1.
  const float slots[3] = {1.0f, 0x1p-8f, 0x1p-8f};
  float out[1] = {NAN};
  sum_slots(OpContext{nullptr, NumericMode::Bf16}, slots, 1, 3, 1, out);
  EXPECT_EQ(out[0], 1.0f + 0x1p-7f);
  for (NumericMode mode : kModes) {
    const int k = 4, width = 33;
    const std::vector<float> values = stored(random_values(64 * k * width, 8), mode);
    EXPECT_EQ(rows_differing_from_one_row_runs(values, k * width, width,
                                               [&](const float* in, int64_t rows, float* y) {
                                                 sum_slots(OpContext{nullptr, mode}, in, rows, k, width, y);
                                               }),
              0);
  }
}

// store_activations (16 lanes at a time where AVX-512 runs) rounds every value as round_to_bf16 does, bit for bit:
// ties to even, NaN kept quiet, infinities, denormals, and a tail shorter than a vector; Fp32 mode leaves them as is.
TEST(OpsStore, Bf16ModeRoundsEveryValueAsRoundToBf16IncludingTiesNanAndTails) {
  std::vector<float> values = random_values(1000, 61, 100.0f);
  const uint32_t specials[] = {0x3f808000u,  // a tie: rounds down to even
                               0x3f818000u,  // a tie: rounds up to even
                               0x7fc00001u, 0xffa00000u,  // quiet and signalling NaN
                               0x7f800000u, 0xff800000u,  // infinities
                               0x00000001u, 0x807fffffu,  // denormals
                               0x7f7fffffu};              // rounds up to infinity
  for (size_t i = 0; i < std::size(specials); ++i) std::memcpy(&values[3 + 40 * i], &specials[i], sizeof(float));
  for (size_t count : {size_t{1000}, size_t{997}, size_t{5}}) {
    std::vector<float> got(values.begin(), values.begin() + count), expected = got, untouched = got;
    for (float& value : expected) value = round_to_bf16(value);
    store_activations(OpContext{nullptr, NumericMode::Bf16}, got);
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), count * sizeof(float)), 0) << count << " values";
    store_activations(OpContext{nullptr, NumericMode::Fp32}, untouched);
    EXPECT_EQ(std::memcmp(untouched.data(), values.data(), count * sizeof(float)), 0) << count << " values";
  }
}

}  // namespace
}  // namespace ls::compute
