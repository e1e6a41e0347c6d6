// Tests for the AVX-512 GEMM kernels (bf16 dot products and fp32 FMA): agreement with a double reference, bitwise
// batch invariance at every width, per-row kernel choice inside mixed batches, and thread-count independence.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

// How the activations of a test are made: bf16-exact rows take the bf16 dot kernel, others the fp32 FMA kernel.
enum class Activations { Bf16Exact, Fp32 };

std::vector<float> make_activations(size_t count, uint64_t seed, Activations kind) {
  std::vector<float> values = random_values(count, seed);
  return kind == Activations::Bf16Exact ? stored(values, NumericMode::Bf16) : values;
}

struct Case {
  NumericMode weights;  // Bf16 = bf16 weights, Fp32 = fp32 weights
  Activations activations;
  std::string name() const {
    return std::string(weights == NumericMode::Bf16 ? "bf16 weights" : "fp32 weights") +
           (activations == Activations::Bf16Exact ? ", bf16-exact rows" : ", fp32 rows");
  }
};

constexpr Case kCases[] = {{NumericMode::Bf16, Activations::Bf16Exact},
                           {NumericMode::Bf16, Activations::Fp32},
                           {NumericMode::Fp32, Activations::Bf16Exact},
                           {NumericMode::Fp32, Activations::Fp32}};

TEST(OpsSpeedKernels, TheAvx512KernelsRunWhereverTheCpuHasThem) {
  const CpuFeatures& features = cpu_features();
  const std::string name = matmul_kernel_name();
  if (features.avx512_bf16)
    EXPECT_EQ(name, "avx512-bf16");
  else if (features.avx512)
    EXPECT_EQ(name, "avx512f");
  else
    EXPECT_TRUE(name == "avx2-fma" || name == "portable") << name;
}

TEST(OpsSpeedKernels, EveryPathMatchesADoubleReferenceForTailAndRemainderShapes) {
  ThreadPool pool(2);
  for (const Case& c : kCases)
    for (int64_t K : {1, 15, 16, 17, 31, 32, 33, 100, 1024})
      for (int64_t rows : {1, 3, 4, 9}) {
        const int64_t N = 53;  // 6- and 8-column register tiles plus remainders, 16-column thread chunks plus a tail
        OwnedMatrix w = random_matrix(N, K, 101 + K, c.weights);
        w.bias = random_values(N, 102, 0.2f);
        const std::vector<float> x = make_activations(rows * K, 103 + K, c.activations);
        std::vector<float> y = poisoned(rows * N);
        matmul(OpContext{&pool, NumericMode::Fp32}, x.data(), rows, w.view(), y.data());
        ASSERT_TRUE(all_finite(y)) << c.name() << " K=" << K << " rows=" << rows;
        EXPECT_LE(max_relative_error(y, reference_matmul(x, rows, w), 0.05), 1e-4)  // fp32 sums of up to 1024 terms
            << c.name() << " K=" << K << " rows=" << rows;
      }
}

TEST(OpsSpeedKernels, Bf16ModeRoundsEveryPathsOutputToBf16) {
  for (const Case& c : kCases) {
    const int64_t rows = 5, K = 96, N = 30;
    const OwnedMatrix w = random_matrix(N, K, 111, c.weights);
    const std::vector<float> x = make_activations(rows * K, 112, c.activations);
    std::vector<float> y = poisoned(rows * N);
    matmul(OpContext{nullptr, NumericMode::Bf16}, x.data(), rows, w.view(), y.data());
    ASSERT_TRUE(all_finite(y)) << c.name();
    for (float value : y) EXPECT_EQ(value, round_to_bf16(value)) << c.name();
    EXPECT_LE(max_relative_error(y, reference_matmul(x, rows, w), 0.05), 1.0 / 256) << c.name();
  }
}

TEST(OpsSpeedKernels, Bf16ModeOutputIsTheFp32ModeOutputRoundedToNearestEven) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    const int64_t rows = 6, K = 64, N = 83;  // 83 = 5 x 16 + a 3-column tail in the vector epilogue
    OwnedMatrix w = random_matrix(N, K, 151, c.weights);
    w.bias = random_values(N, 152, 0.3f);
    const std::vector<float> x = make_activations(rows * K, 153, c.activations);
    std::vector<float> unrounded = poisoned(rows * N), rounded = poisoned(rows * N);
    matmul(OpContext{&pool, NumericMode::Fp32}, x.data(), rows, w.view(), unrounded.data());
    matmul(OpContext{&pool, NumericMode::Bf16}, x.data(), rows, w.view(), rounded.data());
    ASSERT_TRUE(all_finite(unrounded)) << c.name();
    int differing = 0, rounding_changed = 0;
    for (size_t i = 0; i < unrounded.size(); ++i) {
      const float expected = round_to_bf16(unrounded[i]);
      if (!bitwise_equal(&expected, &rounded[i], 1)) ++differing;
      if (expected != unrounded[i]) ++rounding_changed;
    }
    EXPECT_EQ(differing, 0) << c.name();
    EXPECT_GT(rounding_changed, static_cast<int>(unrounded.size()) / 2) << c.name() << ": the check must see rounding";
  }
}

TEST(OpsSpeedKernels, RowsAreBitIdenticalAloneInWindowsOf1To16AndInBatchesOf64And100) {
  ThreadPool pool(2);
  for (const Case& c : kCases)
    for (NumericMode mode : kModes)
      for (int64_t K : {77, 1024})
        for (int64_t total : {64, 100}) {
          const int64_t N = 45;
          OpContext ctx{&pool, mode};
          const OwnedMatrix w = random_matrix(N, K, 121, c.weights);
          const std::vector<float> x = make_activations(total * K, 122, c.activations);
          const int differing = rows_differing_from_one_row_runs(
              x, K, N, [&](const float* in, int64_t rows, float* out) { matmul(ctx, in, rows, w.view(), out); });
          EXPECT_EQ(differing, 0) << c.name() << " " << mode_name(mode) << " K=" << K << " batch=" << total;
        }
}

TEST(OpsSpeedKernels, ARowGetsTheSameBitsInABatchMixingBf16ExactAndFp32Rows) {
  ThreadPool pool(2);
  const int64_t rows = 40, K = 160, N = 70;
  const OwnedMatrix w = random_matrix(N, K, 131, NumericMode::Bf16);
  // Rows 0-9, 20-24 and 33 are bf16-exact; the others are not, so the batch switches kernels several times.
  std::vector<float> x = random_values(rows * K, 132);
  for (int64_t row = 0; row < rows; ++row)
    if (row < 10 || (row >= 20 && row < 25) || row == 33)
      for (int64_t k = 0; k < K; ++k) x[row * K + k] = round_to_bf16(x[row * K + k]);
  const OpContext ctx{&pool, NumericMode::Fp32};
  std::vector<float> batch = poisoned(rows * N);
  matmul(ctx, x.data(), rows, w.view(), batch.data());
  ASSERT_TRUE(all_finite(batch));
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<float> alone = poisoned(N);
    matmul(ctx, x.data() + row * K, 1, w.view(), alone.data());
    EXPECT_TRUE(bitwise_equal(alone.data(), batch.data() + row * N, N)) << "row " << row;
  }
  EXPECT_LE(max_relative_error(batch, reference_matmul(x, rows, w), 0.05), 2e-5);
}

TEST(OpsSpeedKernels, ResultDoesNotDependOnTheThreadCount) {
  ThreadPool one(1), two(2), three(3);
  for (const Case& c : kCases) {
    const int64_t rows = 13, K = 200, N = 301;
    const OwnedMatrix w = random_matrix(N, K, 141, c.weights);
    const std::vector<float> x = make_activations(rows * K, 142, c.activations);
    std::vector<float> y1 = poisoned(rows * N), y2 = poisoned(rows * N), y3 = poisoned(rows * N);
    matmul(OpContext{&one, NumericMode::Bf16}, x.data(), rows, w.view(), y1.data());
    matmul(OpContext{&two, NumericMode::Bf16}, x.data(), rows, w.view(), y2.data());
    matmul(OpContext{&three, NumericMode::Bf16}, x.data(), rows, w.view(), y3.data());
    ASSERT_TRUE(all_finite(y1)) << c.name();
    EXPECT_TRUE(bitwise_equal(y1.data(), y2.data(), y1.size())) << c.name();
    EXPECT_TRUE(bitwise_equal(y1.data(), y3.data(), y1.size())) << c.name();
  }
}

// The kernels a CPU without AVX-512 BF16 (AVX-512F FMA for every row) or without AVX-512 (the AVX2/FMA fallback)
// would run, forced on this CPU: each level keeps batch invariance and the reference, and names itself.
TEST(OpsSpeedKernels, EveryFallbackLevelIsBatchInvariantAndMatchesTheReference) {
  struct Level {
    CpuFeatures features;
    const char* kernel;
  };
  const Level levels[] = {{{true, true, false}, "avx512f"}, {{true, false, false}, "avx2-fma"}};
  ThreadPool pool(2);
  for (const Level& level : levels) {
    if ((level.features.avx512 && !cpu_features().avx512) || !cpu_features().avx2_fma) continue;
    const CpuFeaturesOverride forced(level.features);
    EXPECT_EQ(std::string(matmul_kernel_name()), level.kernel);
    for (const Case& c : kCases) {
      const int64_t K = 77, N = 45, total = 64;
      OpContext ctx{&pool, NumericMode::Bf16};
      OwnedMatrix w = random_matrix(N, K, 161, c.weights);
      const std::vector<float> x = make_activations(total * K, 162, c.activations);
      const int differing = rows_differing_from_one_row_runs(
          x, K, N, [&](const float* in, int64_t rows, float* out) { matmul(ctx, in, rows, w.view(), out); });
      EXPECT_EQ(differing, 0) << level.kernel << " " << c.name();
      std::vector<float> y = poisoned(9 * N);
      matmul(OpContext{&pool, NumericMode::Fp32}, x.data(), 9, w.view(), y.data());
      ASSERT_TRUE(all_finite(y)) << level.kernel << " " << c.name();
      EXPECT_LE(max_relative_error(y, reference_matmul(std::vector<float>(x.begin(), x.begin() + 9 * K), 9, w), 0.05),
                1e-4)
          << level.kernel << " " << c.name();
    }
  }
  EXPECT_STRNE(matmul_kernel_name(), "");  // the override is gone: the CPU's own kernel again
  if (cpu_features().avx512_bf16) {
    EXPECT_STREQ(matmul_kernel_name(), "avx512-bf16");
  }
}

// Panels (pack_for_cpu) change where the weights sit, not the arithmetic: every width, thread count and tail shape
// gives the row-major matrix's bits, for bf16-exact rows (vdpbf16ps) and fp32 rows (FMA on widened weights).
TEST(OpsSpeedKernels, PackedPanelsGiveTheBitsOfTheRowMajorMatrixAtEveryWidthAndThreadCount) {
  OwnedMatrix fp32_matrix = random_matrix(9, 40, 170, NumericMode::Fp32);
  EXPECT_FALSE(pack_for_cpu(fp32_matrix));
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512: matrices are not packed";
  ThreadPool one(1), two(2);
  for (Activations kind : {Activations::Bf16Exact, Activations::Fp32})
    for (int64_t K : {1, 31, 33, 100, 1024}) {
      const int64_t N = 53;
      const OwnedMatrix plain = random_matrix(N, K, 171 + K, NumericMode::Bf16);
      OwnedMatrix packed = plain;
      ASSERT_TRUE(pack_for_cpu(packed));
      ASSERT_NE(packed.view().packed, nullptr);
      const std::vector<float> x = make_activations(64 * K, 172 + K, kind);
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 64})
        for (ThreadPool* pool : {&one, &two}) {
          std::vector<float> expected = poisoned(rows * N), got = poisoned(rows * N);
          const OpContext ctx{pool, NumericMode::Bf16};
          matmul(ctx, x.data(), rows, plain.view(), expected.data());
          matmul(ctx, x.data(), rows, packed.view(), got.data());
          ASSERT_TRUE(all_finite(got)) << "K=" << K << " rows=" << rows;
          EXPECT_TRUE(bitwise_equal(expected.data(), got.data(), expected.size()))
              << "K=" << K << " rows=" << rows << " threads=" << pool->size();
        }
      const OpContext ctx{&two, NumericMode::Bf16};
      EXPECT_EQ(rows_differing_from_one_row_runs(
                    x, K, N, [&](const float* in, int64_t rows, float* out) { matmul(ctx, in, rows, packed.view(), out); }),
                0)
          << "K=" << K;
    }
}

// A matmul group (q/k/v, w1/w3) gives every matrix the bits of its own matmul() call, whatever the width, the thread
// count, the weights (bf16 packed side by side in one arena, bf16 row-major, fp32) and the kind of rows.
TEST(OpsSpeedKernels, AGroupGivesEveryMatrixTheBitsOfItsOwnCallAtEveryWidthAndThreadCount) {
  ThreadPool one(1), two(2), three(3);
  for (const Case& c : kCases)
    for (bool pack : {false, true})
      for (int64_t K : {33, 256}) {
        if (pack && c.weights == NumericMode::Fp32) continue;
        std::vector<OwnedMatrix> matrices = {random_matrix(64, K, 300 + K, c.weights),
                                             random_matrix(17, K, 301 + K, c.weights),
                                             random_matrix(130, K, 302 + K, c.weights)};
        matrices[1].bias = random_values(17, 303);  // one matrix with a bias
        if (pack) {
          std::vector<OwnedMatrix*> order = {&matrices[0], &matrices[1], &matrices[2]};
          ASSERT_EQ(pack_for_cpu(order), cpu_features().avx512 ? 3 : 0);
        }
        const std::vector<Matrix> views = {matrices[0].view(), matrices[1].view(), matrices[2].view()};
        const std::vector<float> x = make_activations(64 * K, 304 + K, c.activations);
        for (int64_t rows : {1, 2, 3, 4, 8, 16, 17, 64})
          for (ThreadPool* pool : {&one, &two, &three}) {
            const OpContext ctx{pool, NumericMode::Bf16};
            std::vector<std::vector<float>> expected, got;
            for (const Matrix& w : views) {
              expected.push_back(poisoned(rows * w.rows));
              got.push_back(poisoned(rows * w.rows));
              matmul(ctx, x.data(), rows, w, expected.back().data());
            }
            float* const outs[] = {got[0].data(), got[1].data(), got[2].data()};
            matmul_group(ctx, x.data(), rows, views, outs);
            for (size_t i = 0; i < views.size(); ++i) {
              ASSERT_TRUE(all_finite(got[i])) << c.name() << " matrix " << i << " rows=" << rows;
              EXPECT_TRUE(bitwise_equal(expected[i].data(), got[i].data(), expected[i].size()))
                  << c.name() << (pack ? ", packed" : "") << " K=" << K << " matrix " << i << " rows=" << rows
                  << " threads=" << pool->size();
            }
          }
      }
}

// One arena for several matrices (pack_for_cpu of a list) holds each one's panels: the bits of the row-major matrix;
// fp32 matrices in the list are left unpacked and not counted.
TEST(OpsSpeedKernels, MatricesPackedIntoOneArenaKeepTheirOwnBits) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512: matrices are not packed";
  ThreadPool two(2);
  std::vector<OwnedMatrix> plain = {random_matrix(9, 100, 310, NumericMode::Bf16),
                                    random_matrix(40, 70, 311, NumericMode::Fp32),
                                    random_matrix(53, 1024, 312, NumericMode::Bf16),
                                    random_matrix(1, 31, 313, NumericMode::Bf16)};
  std::vector<OwnedMatrix> packed = plain;
  std::vector<OwnedMatrix*> order;
  for (OwnedMatrix& m : packed) order.push_back(&m);
  ASSERT_EQ(pack_for_cpu(order), 3);
  EXPECT_EQ(packed[1].view().packed, nullptr);
  EXPECT_LT(packed[0].view().packed, packed[2].view().packed);  // side by side, in the order given
  EXPECT_LT(packed[2].view().packed, packed[3].view().packed);
  for (size_t i = 0; i < plain.size(); ++i) {
    const int64_t N = plain[i].rows, K = plain[i].cols;
    const std::vector<float> x = make_activations(5 * K, 314 + i, Activations::Bf16Exact);
    for (int64_t rows : {1, 5}) {
      std::vector<float> expected = poisoned(rows * N), got = poisoned(rows * N);
      const OpContext ctx{&two, NumericMode::Bf16};
      matmul(ctx, x.data(), rows, plain[i].view(), expected.data());
      matmul(ctx, x.data(), rows, packed[i].view(), got.data());
      ASSERT_TRUE(all_finite(got)) << "matrix " << i;
      EXPECT_TRUE(bitwise_equal(expected.data(), got.data(), expected.size())) << "matrix " << i << " rows=" << rows;
    }
  }
}

// The index greedy_token picks: the first non-NaN value, then strictly greater ones (ties to the lower index).
int32_t scan_argmax(const float* values, int64_t count) {
  int32_t best = 0;
  bool found = false;
  for (int64_t i = 0; i < count; ++i)
    if (!found ? !std::isnan(values[i]) : values[i] > values[best]) {
      best = static_cast<int32_t>(i);
      found = true;
    }
  return best;
}

// The fused head + argmax returns exactly the argmax of matmul()'s output, including ties (weights and inputs on a
// coarse grid, so many outputs are equal), NaN columns and all-NaN rows, -inf, biases, packed and row-major weights,
// bf16-exact and fp32 rows, at every width and thread count, and with the AVX-512 kernels forced off.
TEST(OpsSpeedKernels, TheFusedHeadArgmaxIsTheArgmaxOfTheMatmulOutputIncludingTiesAndNaN) {
  ThreadPool one(1), two(2), three(3);
  for (const Case& c : kCases)
    for (bool pack : {false, true}) {
      if (pack && c.weights == NumericMode::Fp32) continue;
      const int64_t N = 1000, K = 40;
      OwnedMatrix w = random_matrix(N, K, 320, c.weights);
      for (int64_t i = 0; i < N * K; ++i) {  // values in {-1, -0.5, 0, 0.5, 1}: exact sums, many ties
        const float grid = static_cast<float>(static_cast<int>(splitmix64(321 + i) % 5) - 2) * 0.5f;
        if (c.weights == NumericMode::Bf16)
          w.b16[i] = float_to_bf16(grid);
        else
          w.f32[i] = grid;
      }
      const int64_t nan_column = 617, inf_column = 3;
      for (int64_t k = 0; k < K; ++k) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        if (c.weights == NumericMode::Bf16) w.b16[nan_column * K + k] = float_to_bf16(nan); else w.f32[nan_column * K + k] = nan;
      }
      w.bias.assign(N, 0.0f);
      w.bias[inf_column] = -std::numeric_limits<float>::infinity();
      w.bias[999] = 0.5f;
      if (pack) ASSERT_EQ(pack_for_cpu(w), cpu_features().avx512);
      std::vector<float> x(17 * K);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(splitmix64(322 + i) % 3) - 1);
      if (c.activations == Activations::Fp32)
        for (size_t i = 0; i < x.size(); i += 7) x[i] += 1.0f / 3.0f;  // not bf16-exact: the fp32 kernel
      for (int64_t k = 0; k < K; ++k) x[5 * K + k] = std::numeric_limits<float>::quiet_NaN();  // row 5: all NaN
      for (int64_t k = 0; k < K; ++k) x[6 * K + k] = 0.0f;  // row 6: all zero, so every column ties (bias aside)
      for (int64_t rows : {1, 2, 5, 7, 8, 16, 17})
        for (ThreadPool* pool : {&one, &two, &three}) {
          const OpContext ctx{pool, NumericMode::Fp32};
          std::vector<float> y = poisoned(rows * N);
          matmul(ctx, x.data(), rows, w.view(), y.data());
          std::vector<int32_t> best(rows, -1);
          matmul_argmax(ctx, x.data(), rows, w.view(), best.data());
          for (int64_t row = 0; row < rows; ++row)
            EXPECT_EQ(best[row], scan_argmax(y.data() + row * N, N))
                << c.name() << (pack ? ", packed" : "") << " rows=" << rows << " row " << row
                << " threads=" << pool->size();
          if (rows > 6) {
            EXPECT_EQ(best[5], 0) << "an all-NaN row draws 0";
            EXPECT_EQ(best[6], 999) << "the bias breaks the all-zero row's tie";
          }
        }
      // The fallback (no AVX-512 kernels): the same answers.
      const OpContext ctx{&two, NumericMode::Fp32};
      std::vector<int32_t> fused(17), fallback(17);
      matmul_argmax(ctx, x.data(), 17, w.view(), fused.data());
      if (!cpu_features().avx2_fma) continue;
      {
        const CpuFeaturesOverride forced(CpuFeatures{true, false, false});  // the AVX2 GEMM, then a scan
        matmul_argmax(ctx, x.data(), 17, w.view(), fallback.data());
      }
      EXPECT_EQ(fused, fallback) << c.name();
    }
}

}  // namespace
}  // namespace ls::compute
