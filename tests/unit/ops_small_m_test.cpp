// Tests for the small-M verify kernels (set_small_m_kernel arms): every arm gives every row of a 1..16-row window the
// bits of its one-row call, packed and row-major, K with and without a 32-value tail, any column count.
#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_avx512.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

// Restores the default arm when a test ends (also on a failed assertion).
struct ArmGuard {
  ~ArmGuard() { set_small_m_kernel(-1); }
};

constexpr int kArms[] = {0, 1, 2, 3};

TEST(OpsSmallM, EveryArmGivesEveryWindowRowTheBitsOfItsOneRowCallPackedAndRowMajor) {
  if (!cpu_features().avx512_bf16) GTEST_SKIP() << "no AVX-512 BF16: the small-M arms do not run";
  ArmGuard guard;
  ThreadPool one(1), two(2);
  for (int64_t K : {64, 77, 384})
    for (int64_t N : {45, 64, 200}) {
      const OwnedMatrix plain = random_matrix(N, K, 500 + K + N, NumericMode::Bf16);
      OwnedMatrix packed = plain;
      ASSERT_TRUE(pack_for_cpu(packed));
      const std::vector<float> x = stored(random_values(20 * K, 501 + K), NumericMode::Bf16);
      for (const OwnedMatrix* w : {static_cast<const OwnedMatrix*>(&plain), static_cast<const OwnedMatrix*>(&packed)})
        for (ThreadPool* pool : {&one, &two})
          for (int arm : kArms) {
            set_small_m_kernel(arm);
            const OpContext ctx{pool, NumericMode::Bf16};
            const int differing = rows_differing_from_one_row_runs(
                x, K, N, [&](const float* in, int64_t rows, float* out) { matmul(ctx, in, rows, w->view(), out); });
            EXPECT_EQ(differing, 0) << "arm " << arm << " K=" << K << " N=" << N << " packed=" << (w == &packed)
                                    << " threads=" << pool->size();
          }
    }
}

TEST(OpsSmallM, EveryArmGivesAWindowTheBitsOfArmZeroInBothModesAndForGroups) {
  if (!cpu_features().avx512_bf16) GTEST_SKIP() << "no AVX-512 BF16: the small-M arms do not run";
  ArmGuard guard;
  ThreadPool two(2);
  const int64_t K = 96, N = 136;
  OwnedMatrix a = random_matrix(N, K, 510, NumericMode::Bf16), b = random_matrix(40, K, 511, NumericMode::Bf16);
  a.bias = random_values(N, 512, 0.3f);
  OwnedMatrix* order[] = {&a, &b};
  ASSERT_EQ(pack_for_cpu(order), 2);
  const std::vector<float> x = stored(random_values(16 * K, 513), NumericMode::Bf16);
  for (NumericMode mode : kModes)
    for (int64_t rows = 1; rows <= 16; ++rows) {
      const OpContext ctx{&two, mode};
      std::vector<float> ya0 = poisoned(rows * N), yb0 = poisoned(rows * 40);
      set_small_m_kernel(0);
      const Matrix views[] = {a.view(), b.view()};
      float* const outs0[] = {ya0.data(), yb0.data()};
      matmul_group(ctx, x.data(), rows, views, outs0);
      ASSERT_TRUE(all_finite(ya0) && all_finite(yb0)) << "rows=" << rows;
      for (int arm : kArms) {
        set_small_m_kernel(arm);
        std::vector<float> ya = poisoned(rows * N), yb = poisoned(rows * 40);
        float* const outs[] = {ya.data(), yb.data()};
        matmul_group(ctx, x.data(), rows, views, outs);
        EXPECT_TRUE(bitwise_equal(ya.data(), ya0.data(), ya.size()) && bitwise_equal(yb.data(), yb0.data(), yb.size()))
            << "arm " << arm << " rows=" << rows << " " << mode_name(mode);
      }
    }
}

TEST(OpsSmallM, TheArmSwitchReturnsThePreviousArmAndMinusOneRestoresTheDefault) {
  ArmGuard guard;
  set_small_m_kernel(2);
  EXPECT_EQ(set_small_m_kernel(3), 2);
  EXPECT_EQ(set_small_m_kernel(-1), 3);
  const int by_default = set_small_m_kernel(-1);
  EXPECT_GE(by_default, 0);
  EXPECT_EQ(set_small_m_kernel(0), by_default);
}

}  // namespace
}  // namespace ls::compute
