// The AMX-BF16 GEMM (compute/cpu/matmul_amx.h). The B-tile packing is checked on every CPU through a scalar model of
// TDPBF16PS reading the packed bytes as the instruction does; the kernel itself (agreement with the reference, every
// row of 1..64-row calls bitwise its one-row call, thread counts, tails, argmax / group / fused entry points) runs only
// where the CPU has AMX (it skips elsewhere); the nano pair's drafted == plain with AMX is in dspark_amx_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_amx.h"
#include "compute/cpu/matmul_avx512.h"
#include "model/load.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

// Turns the AMX path on for one test (skipping it without AMX) and restores the previous setting.
class ScopedAmx {
 public:
  ScopedAmx() : saved_(cpu_amx_enabled()) { set_cpu_amx(true); }
  ~ScopedAmx() { set_cpu_amx(saved_); }

 private:
  bool saved_;
};

#define LS_SKIP_WITHOUT_AMX() \
  if (!cpu_amx_available()) GTEST_SKIP() << "this CPU has no AMX-BF16"

// y [rows, N] as TDPBF16PS computes it from the packed bytes: B tile (block b, K tile t) row r, pair (n, i) at
// packed[(b * k_tiles + t) * 512 + r * 32 + 2n + i]; A row m, pair (r, i) = x[m][32t + 2r + i] (zero past K); each
// C element accumulates the pair's two products in order, pair by pair, tile by tile.
std::vector<float> scalar_tile_model(const std::vector<float>& x, int64_t rows, int64_t N, int64_t K,
                                     const std::vector<bf16>& packed) {
  const int64_t k_tiles = amx_k_tiles(K);
  std::vector<float> y(rows * N);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t col = 0; col < N; ++col) {
      const int64_t block = col / kAmxColumns, n = col % kAmxColumns;
      float c = 0;
      for (int64_t t = 0; t < k_tiles; ++t) {
        const bf16* tile = packed.data() + (block * k_tiles + t) * kAmxTileValues;
        for (int64_t r = 0; r < kAmxDepth / 2; ++r)
          for (int64_t i = 0; i < 2; ++i) {
            const int64_t k = t * kAmxDepth + 2 * r + i;
            const float a = k < K ? round_to_bf16(x[m * K + k]) : 0.0f;
            c += a * bf16_to_float(tile[r * 32 + 2 * n + i]);
          }
      }
      y[m * N + col] = c;
    }
  return y;
}

TEST(MatmulAmx, ThePackedLayoutReadAsTheTileOpReadsItGivesTheReference) {
  for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{16, 32}, {37, 77}, {45, 300}, {8, 1}, {33, 64}}) {
    const int64_t rows = 5;
    const OwnedMatrix w = random_matrix(N, K, 51 + K, NumericMode::Bf16);
    const std::vector<float> x = stored(random_values(rows * K, 52 + K), NumericMode::Bf16);
    // Poisoned: a value the packing leaves unwritten reads as NaN.
    std::vector<bf16> packed(amx_tile_values(N, K), float_to_bf16(std::nanf("")));
    ASSERT_EQ(static_cast<int64_t>(packed.size()), (N + 15) / 16 * ((K + 31) / 32) * 512);
    pack_amx_tiles(w.view(), packed.data());
    const std::vector<float> y = scalar_tile_model(x, rows, N, K, packed);
    ASSERT_TRUE(all_finite(y)) << N << "x" << K;
    EXPECT_LE(max_relative_error(y, reference_matmul(x, rows, w), 0.05), 1e-5) << N << "x" << K;
  }
}

// Sets an environment variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) saved_ = old;
    had_ = old != nullptr;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, saved_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string saved_;
  bool had_ = false;
};

TEST(MatmulAmx, AskingForAmxWithoutItIsRefusedByNameBeforeAnyFileIsRead) {
  if (cpu_amx_available()) GTEST_SKIP() << "this CPU has AMX";
  {
    ScopedEnv asked("LS_CPU_AMX", "0");
    EXPECT_TRUE(cpu_amx_refusal().ok());
  }
  ScopedEnv asked("LS_CPU_AMX", "1");
  const Status refusal = cpu_amx_refusal();
  EXPECT_EQ(refusal.code(), ErrorCode::DeviceUnavailable) << refusal.to_string();
  EXPECT_NE(refusal.message().find("AMX-BF16"), std::string::npos) << refusal.message();
  // The CPU loader returns it first: a directory that does not exist is not even opened.
  LoadOptions load;
  auto target = load_target("/nonexistent-model-directory", load);
  ASSERT_FALSE(target.ok());
  EXPECT_EQ(target.status().code(), ErrorCode::DeviceUnavailable) << target.status().to_string();
  EXPECT_FALSE(cpu_amx_enabled());
  EXPECT_DEATH(set_cpu_amx(true), "without AMX-BF16");
}

TEST(MatmulAmx, WhereTheCpuHasAmxAskingForItIsGranted) {
  if (!cpu_amx_available()) GTEST_SKIP() << "this CPU has no AMX-BF16";
  ScopedEnv asked("LS_CPU_AMX", "1");
  EXPECT_TRUE(cpu_amx_refusal().ok()) << cpu_amx_refusal().to_string();
}

TEST(MatmulAmx, ASliceOfATileMatrixKeepsItsLayoutAndStartsOnItsBlock) {
  const int64_t K = 70, N = 200;  // 3 K tiles, 13 blocks
  std::vector<bf16> storage(amx_tile_values(N, K));
  Matrix w{nullptr, storage.data(), nullptr, N, K, storage.data(), PackedLayout::AmxTiles};
  const Matrix slice = column_slice(w, 128, 200);
  EXPECT_EQ(slice.packed_layout, PackedLayout::AmxTiles);
  EXPECT_EQ(slice.packed, storage.data() + 8 * 3 * kAmxTileValues);  // block 8 starts 8 x 3 tiles in
  EXPECT_EQ(slice.rows, 72);
  // Packed while the AMX path is off: the panels, and the matrix says so.
  OwnedMatrix plain = random_matrix(N, K, 5, NumericMode::Bf16);
  if (!cpu_amx_enabled() && pack_for_cpu(plain)) {
    EXPECT_EQ(plain.packed_layout, PackedLayout::Panels);
  }
}

// w packed while AMX is on (so in the B-tile layout).
OwnedMatrix amx_matrix(int64_t N, int64_t K, uint64_t seed, bool bias = false) {
  OwnedMatrix w = random_matrix(N, K, seed, NumericMode::Bf16);
  if (bias) w.bias = stored(random_values(N, seed + 1, 0.2f), NumericMode::Bf16);
  EXPECT_TRUE(pack_for_cpu(w));
  EXPECT_EQ(w.packed_layout, PackedLayout::AmxTiles);
  return w;
}

TEST(MatmulAmx, MatchesTheReferenceForOddShapesAndNamesItsKernel) {
  LS_SKIP_WITHOUT_AMX();
  ScopedAmx amx;
  EXPECT_STREQ(matmul_kernel_name(), "amx-bf16");
  ThreadPool pool(2);
  for (NumericMode mode : kModes)
    for (int64_t K : {1, 7, 32, 64, 77, 300, 1000})
      for (int64_t N : {1, 15, 16, 37, 70}) {
        const int64_t rows = 9;
        OpContext ctx{&pool, mode};
        const OwnedMatrix w = amx_matrix(N, K, 11 + K + N, true);
        const std::vector<float> x = stored(random_values(rows * K, 13 + K), mode);
        std::vector<float> y = poisoned(rows * N);
        matmul(ctx, x.data(), rows, w.view(), y.data());
        ASSERT_TRUE(all_finite(y)) << mode_name(mode) << " " << N << "x" << K;
        // bf16: one bf16 rounding of the output; fp32 (those rows take the fp32 kernel): accumulation error, which
        // grows with K (K = 1000 came out at 1.1-4.3e-5 on the Xeon)
        const double tolerance = mode == NumericMode::Bf16 ? 1.0 / 256 : 1e-5 * std::max(1.0, K / 128.0);
        EXPECT_LE(max_relative_error(y, reference_matmul(x, rows, w), 0.05), tolerance)
            << mode_name(mode) << " " << N << "x" << K;
      }
}

TEST(MatmulAmx, EveryRowOf1To64RowCallsIsBitwiseItsOneRowCall) {
  LS_SKIP_WITHOUT_AMX();
  ScopedAmx amx;
  ThreadPool pool(2);
  OpContext ctx{&pool, NumericMode::Bf16};
  for (int64_t K : {64, 77, 384}) {
    const int64_t N = 45, total = 64;
    const OwnedMatrix w = amx_matrix(N, K, 21 + K, true);
    const std::vector<float> x = stored(random_values(total * K, 22), NumericMode::Bf16);
    auto op = [&](const float* in, int64_t rows, float* out) { matmul(ctx, in, rows, w.view(), out); };
    EXPECT_EQ(rows_differing_from_one_row_runs(x, K, N, op), 0) << "K=" << K;
    std::vector<float> alone = poisoned(total * N);
    for (int64_t row = 0; row < total; ++row) op(x.data() + row * K, 1, alone.data() + row * N);
    for (int64_t width = 17; width <= total; ++width) {
      std::vector<float> y = poisoned(width * N);
      op(x.data() + (total - width) * K, width, y.data());
      EXPECT_TRUE(bitwise_equal(y.data(), alone.data() + (total - width) * N, width * N)) << "K=" << K << " " << width;
    }
  }
}

TEST(MatmulAmx, EveryTileScheduleGivesTheSameBitsAndRowsKeepTheirOneRowBits) {
  LS_SKIP_WITHOUT_AMX();
  ScopedAmx amx;
  ThreadPool pool(2);
  OpContext ctx{&pool, NumericMode::Bf16};
  const int64_t K = 300, N = 150, total = 40;  // K: 10 tiles (3 rotations + 1); N: 9 whole blocks + 6 columns
  const OwnedMatrix w = amx_matrix(N, K, 81);
  const std::vector<float> x = stored(random_values(total * K, 82), NumericMode::Bf16);
  const int saved = set_amx_schedule(0);
  std::vector<float> first = poisoned(total * N);
  matmul(ctx, x.data(), total, w.view(), first.data());
  for (int schedule : {1, 4, 5}) {
    set_amx_schedule(schedule);
    std::vector<float> y = poisoned(total * N);
    matmul(ctx, x.data(), total, w.view(), y.data());
    EXPECT_TRUE(bitwise_equal(y.data(), first.data(), y.size())) << "schedule " << schedule;
    EXPECT_EQ(rows_differing_from_one_row_runs(
                  x, K, N, [&](const float* in, int64_t rows, float* out) { matmul(ctx, in, rows, w.view(), out); }),
              0)
        << "schedule " << schedule;
  }
  set_amx_schedule(saved);
}

TEST(MatmulAmx, TheThreadCountDoesNotChangeABit) {
  LS_SKIP_WITHOUT_AMX();
  ScopedAmx amx;
  ThreadPool one(1), two(2), four(4);
  for (int64_t rows : {1, 5, 16, 40}) {
    const int64_t K = 300, N = 200;
    const OwnedMatrix w = amx_matrix(N, K, 31);
    const std::vector<float> x = stored(random_values(rows * K, 32), NumericMode::Bf16);
    std::vector<float> y1 = poisoned(rows * N), y2 = poisoned(rows * N), y4 = poisoned(rows * N);
    matmul(OpContext{&one, NumericMode::Bf16}, x.data(), rows, w.view(), y1.data());
    matmul(OpContext{&two, NumericMode::Bf16}, x.data(), rows, w.view(), y2.data());
    matmul(OpContext{&four, NumericMode::Bf16}, x.data(), rows, w.view(), y4.data());
    EXPECT_TRUE(all_finite(y1));
    EXPECT_TRUE(bitwise_equal(y1.data(), y2.data(), y1.size())) << rows;
    EXPECT_TRUE(bitwise_equal(y1.data(), y4.data(), y1.size())) << rows;
  }
}

TEST(MatmulAmx, ArgmaxGroupAndFusedColumnsGiveTheBitsOfMatmul) {
  LS_SKIP_WITHOUT_AMX();
  ScopedAmx amx;
  ThreadPool pool(2);
  OpContext ctx{&pool, NumericMode::Bf16};
  const int64_t K = 384, N = 8192 / 4 + 48;
  OwnedMatrix a = random_matrix(N, K, 61, NumericMode::Bf16), b = random_matrix(N, K, 62, NumericMode::Bf16);
  OwnedMatrix* both[] = {&a, &b};
  ASSERT_EQ(pack_for_cpu(both), 2);
  for (int64_t rows : {1, 3, 7, 16}) {
    const std::vector<float> x = stored(random_values(rows * K, 63 + rows), NumericMode::Bf16);
    std::vector<float> ya = poisoned(rows * N), yb = poisoned(rows * N);
    matmul(ctx, x.data(), rows, a.view(), ya.data());
    matmul(ctx, x.data(), rows, b.view(), yb.data());
    ASSERT_TRUE(all_finite(ya));
    // argmax: the column greedy_token reads from matmul's outputs
    std::vector<int32_t> best(rows, -1);
    matmul_argmax(ctx, x.data(), rows, a.view(), best.data());
    for (int64_t row = 0; row < rows; ++row) {
      int32_t expected = 0;
      for (int64_t col = 1; col < N; ++col)
        if (ya[row * N + col] > ya[row * N + expected]) expected = static_cast<int32_t>(col);
      EXPECT_EQ(best[row], expected) << rows << " row " << row;
    }
    // group
    std::vector<float> ga = poisoned(rows * N), gb = poisoned(rows * N);
    const Matrix group[] = {a.view(), b.view()};
    float* const outs[] = {ga.data(), gb.data()};
    matmul_group(ctx, x.data(), rows, group, outs);
    EXPECT_TRUE(bitwise_equal(ga.data(), ya.data(), ya.size())) << rows;
    EXPECT_TRUE(bitwise_equal(gb.data(), yb.data(), yb.size())) << rows;
    // columns-then: side by side in one [rows, 2N] output
    std::vector<float> fused = poisoned(rows * 2 * N);
    float* const fused_outs[] = {fused.data(), fused.data() + N};
    std::atomic<int64_t> columns_seen{0};  // chunks finish on every thread
    ASSERT_TRUE(matmul_columns_then_avx512(ctx, x.data(), rows, group, fused_outs, 2 * N,
                                           [&](int64_t begin, int64_t end) { columns_seen += end - begin; }));
    EXPECT_EQ(columns_seen.load(), N);
    for (int64_t row = 0; row < rows; ++row) {
      EXPECT_TRUE(bitwise_equal(fused.data() + row * 2 * N, ya.data() + row * N, N)) << rows << " row " << row;
      EXPECT_TRUE(bitwise_equal(fused.data() + row * 2 * N + N, yb.data() + row * N, N)) << rows << " row " << row;
    }
  }
}

TEST(MatmulAmx, RowsThatAreNotBf16ExactTakeTheFp32KernelAndKeepTheirBits) {
  LS_SKIP_WITHOUT_AMX();
  ScopedAmx amx;
  ThreadPool pool(2);
  OpContext ctx{&pool, NumericMode::Fp32};
  const int64_t K = 77, N = 37, rows = 12;
  const OwnedMatrix w = amx_matrix(N, K, 71);
  std::vector<float> x = random_values(rows * K, 72);
  for (int64_t row = 0; row < rows; row += 2)  // every other row bf16-exact: runs of both kernels in one call
    for (int64_t k = 0; k < K; ++k) x[row * K + k] = round_to_bf16(x[row * K + k]);
  std::vector<float> y = poisoned(rows * N);
  matmul(ctx, x.data(), rows, w.view(), y.data());
  EXPECT_LE(max_relative_error(y, reference_matmul(x, rows, w), 0.05), 1e-5);
  EXPECT_EQ(rows_differing_from_one_row_runs(
                x, K, N, [&](const float* in, int64_t r, float* out) { matmul(ctx, in, r, w.view(), out); }),
            0);
}

}  // namespace
}  // namespace ls::compute
