// Tests for RoPE: transformers' inv_freq table, the NeoX rotation against a double reference, position-only results.
#include <gtest/gtest.h>

#include <cmath>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

TEST(OpsRope, Table64Theta1e6HoldsTorchCpuValuesWhichDifferFromCorrectRounding) {
  const RopeTable table = make_rope_table(64, 1e6);
  ASSERT_EQ(table.inv_freq.size(), 32u);
  EXPECT_EQ(table.inv_freq[0], 1.0f);
  EXPECT_EQ(table.inv_freq[1], 0x1.4c7bc0p-1f);
  EXPECT_EQ(table.inv_freq[31], 0x1.9d5ef2p-20f);
  int differing = 0;
  for (int i = 0; i < 32; ++i) {
    const float correctly_rounded = static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / 64.0));
    EXPECT_NEAR(table.inv_freq[i], correctly_rounded, 2e-7 * correctly_rounded);
    differing += table.inv_freq[i] != correctly_rounded;
  }
  EXPECT_GT(differing, 0);  // the hard-coded values are not what a correctly rounded pow gives
}

TEST(OpsRope, OtherShapesUseInverseThetaPowers) {
  const RopeTable table = make_rope_table(16, 10000.0);
  ASSERT_EQ(table.inv_freq.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(table.inv_freq[i], 1.0 / std::pow(10000.0, 2.0 * i / 16), 1e-6);
}

TEST(OpsRope, RotatesHalvesByPositionTimesFrequencyInBothModes) {
  for (NumericMode mode : kModes) {
    const int heads = 3, hd = 64, rows = 5;
    const RopeTable table = make_rope_table(hd, 1e6);
    const std::vector<float> input = stored(random_values(rows * heads * hd, 1), mode);
    std::vector<float> x = input;
    const int64_t positions[rows] = {0, 1, 7, 300, 4095};
    rope_neox(OpContext{nullptr, mode}, x.data(), rows, heads, positions, table);
    std::vector<double> expected(x.size());
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < hd; ++d) {
          const float* v = input.data() + (r * heads + h) * hd;
          const double angle = double(float(positions[r]) * table.inv_freq[d % 32]);
          const double rotated = d < 32 ? -v[d + 32] : v[d - 32];
          expected[(r * heads + h) * hd + d] = v[d] * std::cos(angle) + rotated * std::sin(angle);
        }
    EXPECT_LE(max_relative_error(x, expected, 1.0), mode == NumericMode::Bf16 ? 4.0 / 256 : 1e-5) << mode_name(mode);
  }
}

TEST(OpsRope, ARowsResultDependsOnlyOnItsPositionNotOnItsNeighbours) {
  for (NumericMode mode : kModes) {
    const int heads = 2, hd = 64, width = heads * hd;
    const RopeTable table = make_rope_table(hd, 1e6);
    const std::vector<float> input = stored(random_values(64 * width, 2), mode);
    // Row r of the input sits at position 100 + 3r; the op gets each block's positions.
    std::vector<int64_t> positions(64);
    for (int r = 0; r < 64; ++r) positions[r] = 100 + 3 * r;
    EXPECT_EQ(rows_differing_from_one_row_runs(input, width, width,
                                               [&](const float* in, int64_t rows, float* out) {
                                                 const int64_t first = (in - input.data()) / width;
                                                 std::copy(in, in + rows * width, out);
                                                 rope_neox(OpContext{nullptr, mode}, out, rows, heads,
                                                           positions.data() + first, table);
                                               }),
              0);
  }
}

TEST(OpsRope, SplittingRowsOverTwoThreadsGivesTheOneThreadBits) {
  ThreadPool pool(2);
  for (NumericMode mode : kModes) {
    const int heads = 3, hd = 64, width = heads * hd, rows = 37;
    const RopeTable table = make_rope_table(hd, 1e6);
    std::vector<float> alone = stored(random_values(rows * width, 5), mode), split = alone;
    std::vector<int64_t> positions(rows);
    for (int r = 0; r < rows; ++r) positions[r] = 7 + 5 * r;
    rope_neox(OpContext{nullptr, mode}, alone.data(), rows, heads, positions.data(), table);
    rope_neox(OpContext{&pool, mode}, split.data(), rows, heads, positions.data(), table);
    EXPECT_TRUE(bitwise_equal(alone.data(), split.data(), alone.size())) << mode_name(mode);
  }
}

// The AVX-512 rotation (16 lanes, the scalar loop's products, roundings and sums; never fused) gives the scalar
// loop's bits in both modes, for head sizes 64 and 128 and values that include zeros, signed zeros and large ones.
TEST(OpsRope, TheAvx512RotationGivesTheScalarLoopsBits) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512: only the scalar loop runs";
  for (NumericMode mode : kModes)
    for (int hd : {64, 128}) {
      const int heads = 3, rows = 5;
      const RopeTable table = make_rope_table(hd, 1e6);
      std::vector<float> vector = stored(random_values(rows * heads * hd, 41 + hd, 30.0f), mode);
      vector[3] = 0.0f;
      vector[hd / 2 + 3] = -0.0f;
      std::vector<float> scalar = vector;
      const int64_t positions[rows] = {0, 1, 200, 4095, 123456};
      rope_neox(OpContext{nullptr, mode}, vector.data(), rows, heads, positions, table);
      {
        CpuFeatures plain = cpu_features();
        plain.avx512 = plain.avx512_bf16 = plain.avx512_vnni = false;
        const CpuFeaturesOverride forced(plain);
        rope_neox(OpContext{nullptr, mode}, scalar.data(), rows, heads, positions, table);
      }
      ASSERT_TRUE(all_finite(vector));
      EXPECT_TRUE(bitwise_equal(vector.data(), scalar.data(), vector.size())) << mode_name(mode) << " hd " << hd;
    }
}

// The fp32 NeoX rotation of x [rows, heads, 64] computed here from std::cos / std::sin of float angles.
std::vector<float> neox_fp32(const std::vector<float>& input, int rows, int heads, const int64_t* positions,
                             const RopeTable& table) {
  std::vector<float> out(input.size());
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < 64; ++d) {
        const float* v = input.data() + (r * heads + h) * 64;
        const float angle = static_cast<float>(positions[r]) * table.inv_freq[d % 32];
        const float rotated = d < 32 ? -v[d + 32] : v[d - 32];
        const float a = v[d] * std::cos(angle), b = rotated * std::sin(angle);
        out[(r * heads + h) * 64 + d] = a + b;
      }
  return out;
}

TEST(OpsRope, CachedAnglesFollowTheTableAndThePositionEvenWhenPositionsShareACacheSlot) {
  const int heads = 2, rows = 4;
  const RopeTable first = make_rope_table(64, 1e6), second = make_rope_table(64, 1e4);
  const int64_t positions[rows] = {5, 517, 5, 1029};  // one slot of a 512-slot cache
  const std::vector<float> input = random_values(rows * heads * 64, 3);
  for (const RopeTable* table : {&first, &second, &first}) {
    std::vector<float> x = input;
    rope_neox(OpContext{nullptr, NumericMode::Fp32}, x.data(), rows, heads, positions, *table);
    const std::vector<float> expected = neox_fp32(input, rows, heads, positions, *table);
    EXPECT_TRUE(bitwise_equal(x.data(), expected.data(), x.size())) << (table == &first ? "theta 1e6" : "theta 1e4");
  }
}

}  // namespace
}  // namespace ls::compute
