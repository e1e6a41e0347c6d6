// Tests for the fused few-row CPU steps (fused_ops.h): each gives the bits of its unfused sequence at every window
// width and thread count, runs only where it applies, and is switched off by set_cpu_fusion(false).
#include "compute/cpu/fused_ops.h"

#include <gtest/gtest.h>

#include <string>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_avx512.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

constexpr int64_t kFusedRows = 16;  // the widest window the fused steps take (a verify window / draft block)

// Fusion switched on for the test's scope, the steps chosen before restored afterwards.
struct FusionOn {
  FusionOn() : before(cpu_fusion_steps()) { set_cpu_fusion(true); }
  ~FusionOn() { set_cpu_fusion_steps(before); }
  unsigned before;
};

// Activations of one mode: bf16-exact rows in Bf16 mode (the bf16 dot kernel), and one fp32 row mixed in.
std::vector<float> activations(int64_t rows, int64_t K, uint64_t seed, NumericMode mode) {
  std::vector<float> x = stored(random_values(rows * K, seed), mode);
  if (rows > 2) {
    const std::vector<float> odd = random_values(K, seed + 1);
    std::copy(odd.begin(), odd.end(), x.begin() + 2 * K);  // row 2 not bf16-exact: the fp32 kernel
  }
  return x;
}

// Whether a fused step must run: few rows, a pool of 2+, AVX-512 (elsewhere it declines and nothing is written).
bool applies(int64_t rows, const ThreadPool& pool) { return cpu_features().avx512 && rows <= kFusedRows && pool.size() > 1; }

TEST(OpsFused, GateUpWithSwigluGivesTheBitsOfTheGroupThenSwigluAtEveryWidthAndThreadCount) {
  FusionOn on;
  ThreadPool one(1), two(2), three(3);
  for (NumericMode mode : {NumericMode::Bf16, NumericMode::Fp32})
    for (bool pack : {false, true}) {
      if (pack && mode == NumericMode::Fp32) continue;
      const int64_t K = 96, F = 200;  // F not a multiple of the chunk: a narrow last chunk
      OwnedMatrix w1 = random_matrix(F, K, 11, mode), w3 = random_matrix(F, K, 12, mode);
      if (pack) {
        std::vector<OwnedMatrix*> order = {&w1, &w3};
        pack_for_cpu(order);
      }
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 16, 17})
        for (ThreadPool* pool : {&one, &two, &three}) {
          const OpContext ctx{pool, mode};
          const std::vector<float> x = activations(rows, K, 13 + rows, mode);
          std::vector<float> gate = poisoned(rows * F), up = poisoned(rows * F), expected = poisoned(rows * F);
          const Matrix views[] = {w1.view(), w3.view()};
          float* const outs[] = {gate.data(), up.data()};
          matmul_group(ctx, x.data(), rows, views, outs);
          swiglu(ctx, gate.data(), up.data(), rows * F, expected.data());
          std::vector<float> got_gate = poisoned(rows * F), got_up = poisoned(rows * F), got = poisoned(rows * F);
          const bool fused = matmul_swiglu(ctx, x.data(), rows, w1.view(), w3.view(), got_gate.data(), got_up.data(),
                                           got.data());
          const std::string where = std::string(mode == NumericMode::Bf16 ? "bf16" : "fp32") + (pack ? " packed" : "") +
                                    " rows=" + std::to_string(rows) + " threads=" + std::to_string(pool->size());
          ASSERT_EQ(fused, applies(rows, *pool)) << where;
          if (!fused) {
            EXPECT_TRUE(std::isnan(got[0])) << "a declined step writes nothing: " << where;
            continue;
          }
          ASSERT_TRUE(all_finite(got)) << where;
          EXPECT_TRUE(bitwise_equal(expected.data(), got.data(), expected.size())) << where;
          EXPECT_TRUE(bitwise_equal(gate.data(), got_gate.data(), gate.size())) << where;
          // In place (act = gate), as the drafter calls it.
          std::vector<float> in_place = poisoned(rows * F), scratch = poisoned(rows * F);
          ASSERT_TRUE(matmul_swiglu(ctx, x.data(), rows, w1.view(), w3.view(), in_place.data(), scratch.data(),
                                    in_place.data()));
          EXPECT_TRUE(bitwise_equal(expected.data(), in_place.data(), expected.size())) << "in place " << where;
        }
    }
}

TEST(OpsFused, ProjectionWithResidualGivesTheBitsOfMatmulThenAddResidual) {
  FusionOn on;
  ThreadPool two(2), three(3);
  for (NumericMode mode : {NumericMode::Bf16, NumericMode::Fp32}) {
    const int64_t K = 200, N = 144;
    OwnedMatrix w = random_matrix(N, K, 21, mode);
    if (mode == NumericMode::Bf16) pack_for_cpu(w);
    for (int64_t rows : {1, 3, 4, 6, 9, 16})
      for (ThreadPool* pool : {&two, &three}) {
        const OpContext ctx{pool, mode};
        const std::vector<float> x = activations(rows, K, 22 + rows, mode);
        const std::vector<float> h = stored(random_values(rows * N, 23 + rows), mode);
        std::vector<float> y = poisoned(rows * N), expected = h;
        matmul(ctx, x.data(), rows, w.view(), y.data());
        add_residual(ctx, expected.data(), y.data(), rows * N);
        std::vector<float> got_y = poisoned(rows * N), got = h;
        ASSERT_EQ(matmul_add_residual(ctx, x.data(), rows, w.view(), got_y.data(), got.data()), applies(rows, *pool));
        if (!applies(rows, *pool)) continue;
        const std::string where = "rows=" + std::to_string(rows) + " threads=" + std::to_string(pool->size());
        EXPECT_TRUE(bitwise_equal(expected.data(), got.data(), expected.size())) << where;
        EXPECT_TRUE(bitwise_equal(y.data(), got_y.data(), y.size())) << where;
      }
  }
}

// A ShortConv input over bcx of `rows` rows with a history and `before` rows of the window from an earlier pass.
ShortConvInput conv_input(const float* bcx, int64_t rows, int width, const std::vector<float>& history,
                          const std::vector<float>& z_before, int64_t before, const std::vector<float>& weight) {
  ShortConvInput input;
  input.bcx = bcx;
  input.rows = rows;
  input.width = width;
  input.kernel = 3;
  input.history = history.data();
  input.z_before = z_before.data();
  input.rows_before = before;
  input.conv_weight = weight.data();
  return input;
}

TEST(OpsFused, ConvInputProjectionWithTheConvPerChannelRangeGivesTheBitsOfMatmulThenShortConv) {
  FusionOn on;
  ThreadPool two(2), three(3);
  for (NumericMode mode : {NumericMode::Bf16, NumericMode::Fp32}) {
    const int width = 96, K = 64;
    OwnedMatrix in_proj = random_matrix(3 * width, K, 31, mode);
    if (mode == NumericMode::Bf16) pack_for_cpu(in_proj);
    const std::vector<float> weight = stored(random_values(width * 3, 32), mode);
    const std::vector<float> history = stored(random_values(2 * width, 33), mode);
    const std::vector<float> z_before = stored(random_values(2 * width, 34), mode);
    for (int64_t rows : {1, 2, 4, 7, 16})
      for (int64_t before : {0, 1, 2})
        for (ThreadPool* pool : {&two, &three}) {
          const OpContext ctx{pool, mode};
          const std::vector<float> x = activations(rows, K, 35 + rows, mode);
          std::vector<float> bcx = poisoned(rows * 3 * width), z = poisoned(rows * width), y = poisoned(rows * width);
          matmul(ctx, x.data(), rows, in_proj.view(), bcx.data());
          short_conv(ctx, conv_input(bcx.data(), rows, width, history, z_before, before, weight), z.data(), y.data());
          std::vector<float> got_bcx = poisoned(rows * 3 * width), got_z = poisoned(rows * width);
          std::vector<float> got_y = poisoned(rows * width);
          const ShortConvInput input = conv_input(got_bcx.data(), rows, width, history, z_before, before, weight);
          const OpContext here{nullptr, mode};
          ASSERT_TRUE(matmul_conv_in(ctx, x.data(), rows, in_proj.view(), got_bcx.data(),
                                     [&](int64_t begin, int64_t end) {
                                       short_conv_range(here, input, begin, end, got_z.data(), got_y.data());
                                     }) == applies(rows, *pool));
          if (!applies(rows, *pool)) continue;
          const std::string where = "rows=" + std::to_string(rows) + " before=" + std::to_string(before) +
                                    " threads=" + std::to_string(pool->size());
          ASSERT_TRUE(all_finite(got_y)) << where;
          EXPECT_TRUE(bitwise_equal(bcx.data(), got_bcx.data(), bcx.size())) << where;
          EXPECT_TRUE(bitwise_equal(z.data(), got_z.data(), z.size())) << where;
          EXPECT_TRUE(bitwise_equal(y.data(), got_y.data(), y.size())) << where;
        }
  }
}

TEST(OpsFused, SwitchedOffOrTooManyRowsTheStepsDeclineAndWriteNothing) {
  FusionOn on;
  ThreadPool two(2);
  const OpContext ctx{&two, NumericMode::Bf16};
  const int64_t K = 64, N = 48;
  const OwnedMatrix w = random_matrix(N, K, 41, NumericMode::Bf16);
  for (int64_t rows : {int64_t{4}, kFusedRows + 1}) {
    const std::vector<float> x = activations(rows, K, 42, NumericMode::Bf16);
    for (bool switched_on : {true, false}) {
      set_cpu_fusion(switched_on);
      std::vector<float> y = poisoned(rows * N), h = poisoned(rows * N);
      const bool expected = switched_on && applies(rows, two);
      EXPECT_EQ(matmul_add_residual(ctx, x.data(), rows, w.view(), y.data(), h.data()), expected) << rows;
      EXPECT_EQ(matmul_swiglu(ctx, x.data(), rows, w.view(), w.view(), y.data(), h.data(), y.data()), expected);
      if (!expected) {
        EXPECT_TRUE(std::isnan(y[0]) && std::isnan(h[0])) << "rows=" << rows;
      }
    }
  }
}

// Many-row calls give the same bits whether their column chunks are split statically or claimed one at a time.
TEST(OpsFused, ManyRowCallsGiveTheSameBitsSplitStaticallyOrClaimedChunkByChunk) {
  ThreadPool two(2), three(3);
  for (NumericMode mode : {NumericMode::Bf16, NumericMode::Fp32}) {
    OwnedMatrix w1 = random_matrix(200, 96, 51, mode), w3 = random_matrix(120, 96, 52, mode);
    if (mode == NumericMode::Bf16) pack_for_cpu(w1);
    for (int64_t rows : {17, 64, 130})
      for (ThreadPool* pool : {&two, &three}) {
        const OpContext ctx{pool, mode};
        const std::vector<float> x = activations(rows, 96, 53 + rows, mode);
        std::vector<std::vector<float>> outs;
        for (bool chunked : {false, true}) {
          set_many_rows_chunked(chunked);
          std::vector<float> y1 = poisoned(rows * 200), y3 = poisoned(rows * 120);
          const Matrix views[] = {w1.view(), w3.view()};
          float* const ys[] = {y1.data(), y3.data()};
          matmul_group(ctx, x.data(), rows, views, ys);
          ASSERT_TRUE(all_finite(y1) && all_finite(y3)) << rows;
          y1.insert(y1.end(), y3.begin(), y3.end());
          outs.push_back(y1);
        }
        set_many_rows_chunked(false);
        EXPECT_TRUE(bitwise_equal(outs[0].data(), outs[1].data(), outs[0].size()))
            << "rows=" << rows << " threads=" << pool->size();
      }
  }
}

}  // namespace
}  // namespace ls::compute
