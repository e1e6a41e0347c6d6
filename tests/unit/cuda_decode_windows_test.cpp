// Verify windows on the pipeline decode GEMM (session 13; gemm_decode_pipe.cu). Which CTA computes a column, how
// many m16 tiles of rows meet a weight fragment and how a window is cut into launches never change a row's chain, so
// every row keeps the bits of its one-row launch; all on fresh random data with the outputs poisoned:
// - the spread (set_decode_pipe_spread / LS_DECODE_PIPE_SPREAD): 2..16-row launches of the 1.2B's one-slice shapes and
//   the q / k / v launch on about SMs / spread CTAs, at spreads 2 / 4 / 8; the reversed-K fault caught under it;
// - 17..32-row windows (set_decode_pipe_rows32 / LS_DECODE_PIPE_ROWS32): two m16 tiles of x rows, x once; row copies,
//   3D boxes up to 16384 outputs, two items a warp and q / k / v, spread or not, routed only under the switch; the
//   fault caught at 17 and 32 rows;
// - 33..64-row windows as two launches (set_decode_pipe_rows64 / LS_DECODE_PIPE_ROWS64): the same bits with the
//   switch on and off, the fault seen in both launches only under it.
#ifdef LS_HAVE_CUDA

#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

template <typename T, T (*GET)(), void (*SET)(T)>
struct Scope {
  explicit Scope(T value) : before(GET()) { SET(value); }
  ~Scope() { SET(before); }
  T before;
};
using SpreadScope = Scope<int, decode_pipe_spread, set_decode_pipe_spread>;
using Rows32Scope = Scope<bool, decode_pipe_rows32, set_decode_pipe_rows32>;
using Rows64Scope = Scope<bool, decode_pipe_rows64, set_decode_pipe_rows64>;

// Rows r of y [m, n] whose bits differ from row r of `want` [>= m, n].
int differing_rows(const std::vector<bf16>& got, const std::vector<bf16>& want, int64_t m, int64_t n) {
  int differ = 0;
  for (int64_t r = 0; r < m; ++r) differ += std::memcmp(got.data() + r * n, want.data() + r * n, sizeof(bf16) * n) != 0;
  return differ;
}

// y [rows, N] of x's first rows, one row a launch.
std::vector<bf16> one_row_launches(const GemmEngine& engine, const bf16* x, int64_t rows, const DeviceMatrix& w) {
  std::vector<bf16> out;
  for (int64_t r = 0; r < rows; ++r) {
    auto y = poisoned<bf16>(w.rows);
    EXPECT_TRUE(engine.gemm(x + r * w.cols, 1, w, y.data(), nullptr, nullptr).ok());
    const std::vector<bf16> row = download(y, w.rows);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Random q / k / v matrices (2048 + 512 + 512 outputs of K) and the rows of their one launch (gemm_decode_group) that
// differ from the one-row launches.
struct Qkv {
  Qkv(int64_t k, uint64_t seed) {
    for (const int64_t n : {2048, 512, 512}) {
      weights.push_back(upload(to_bf16(random_values(n * k, seed + weights.size(), 0.5f))));
      matrices.push_back(DeviceMatrix{weights.back().data(), nullptr, n, k});
    }
  }
  int differing_rows(const GemmEngine& engine, const bf16* x, int64_t m) const {
    std::vector<DeviceBuffer<bf16>> outs;
    std::vector<bf16*> out_ptrs;
    for (const DeviceMatrix& w : matrices) {
      outs.push_back(poisoned<bf16>(m * w.rows));
      out_ptrs.push_back(outs.back().data());
    }
    EXPECT_TRUE(gemm_decode_group(engine, x, m, matrices, out_ptrs, nullptr).ok());
    int differ = 0;
    for (size_t i = 0; i < matrices.size(); ++i)
      differ += ::ls::cuda::differing_rows(download(outs[i], m * matrices[i].rows),
                                            one_row_launches(engine, x, m, matrices[i]), m, matrices[i].rows);
    return differ;
  }
  std::vector<DeviceBuffer<bf16>> weights;
  std::vector<DeviceMatrix> matrices;
};

TEST(CudaDecodeSpread, TwoToSixteenRowLaunchesOnFewerCtasKeepTheOneRowBitsAndTheQkvLaunchToo) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  constexpr int64_t K = 2048;
  auto x = upload(to_bf16(random_values(16 * K, 131, 2.0f)));
  for (const int64_t n : {2048, 512, 6144, 3072}) {
    auto w = upload(to_bf16(random_values(n * K, 132 + n, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, n, K};
    const std::vector<bf16> want = one_row_launches(engine, x.data(), 16, matrix);
    for (const int spread : {2, 4, 8}) {
      const SpreadScope scope(spread);
      for (const int64_t m : {2, 3, 8, 9, 10, 16}) {
        EXPECT_TRUE(decode_pipe_routes(m, matrix, false)) << "N " << n << " m " << m << " spread " << spread;
        auto y = poisoned<bf16>(m * n);
        ASSERT_TRUE(engine.gemm(x.data(), m, matrix, y.data(), nullptr, nullptr).ok());
        EXPECT_EQ(differing_rows(download(y, m * n), want, m, n), 0) << "N " << n << " m " << m << " spread " << spread;
      }
    }
  }
  // q / k / v in one launch (2048 + 512 + 512 outputs), as the attention layers run it.
  const Qkv qkv(K, 140);
  for (const int spread : {1, 2, 4}) {
    const SpreadScope scope(spread);
    for (const int64_t m : {2, 9, 16})
      EXPECT_EQ(qkv.differing_rows(engine, x.data(), m), 0) << "q / k / v, m " << m << " spread " << spread;
  }
}

TEST(CudaDecodeSpread, APlantedKOrderFaultIsCaughtUnderTheSpread) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  constexpr int64_t K = 2048, N = 2048, M = 4;
  auto x = upload(to_bf16(random_values(M * K, 151, 2.0f)));
  auto w = upload(to_bf16(random_values(N * K, 152, 0.5f)));
  const DeviceMatrix matrix{w.data(), nullptr, N, K};
  auto y = poisoned<float>(M * N);
  ASSERT_TRUE(engine.gemm(x.data(), M, matrix, nullptr, y.data(), nullptr).ok());
  const std::vector<float> want = download(y, M * N);
  for (const int spread : {2, 4}) {
    const SpreadScope scope(spread);
    auto got = poisoned<float>(M * N);
    ASSERT_TRUE(gemm_decode_pipe(engine, -1, x.data(), M, matrix, nullptr, got.data(), nullptr).ok());
    EXPECT_EQ(first_differing_row(download(got, M * N), want, M, N), -1) << "spread " << spread;
    set_decode_pipe_fault_for_test(true);
    auto faulty = poisoned<float>(M * N);
    const Status status = gemm_decode_pipe(engine, -1, x.data(), M, matrix, nullptr, faulty.data(), nullptr);
    set_decode_pipe_fault_for_test(false);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_GE(first_differing_row(download(faulty, M * N), want, M, N), 0)
        << "spread " << spread << ": the K tiles walked backwards went unseen";
  }
}

TEST(CudaDecodeRows32, SeventeenToThirtyTwoRowWindowsOnThePipelineKeepTheOneRowBits) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  constexpr int64_t K = 2048;
  auto x = upload(to_bf16(random_values(32 * K, 161, 2.0f)));
  for (const int64_t n : {2048, 512, 3072, 6144, 16384}) {
    auto w = upload(to_bf16(random_values(n * K, 162 + n, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, n, K};
    const std::vector<bf16> want = one_row_launches(engine, x.data(), 32, matrix);
    {
      const Rows32Scope off(false);
      EXPECT_FALSE(decode_pipe_routes(24, matrix, false)) << "N " << n << ": 24 rows routed without the switch";
    }
    const Rows32Scope on(true);
    for (const int spread : {1, 2})
      for (const int64_t m : {17, 20, 24, 31, 32}) {
        const SpreadScope spreading(spread);
        EXPECT_TRUE(decode_pipe_routes(m, matrix, false)) << "N " << n << " m " << m << " spread " << spread;
        auto y = poisoned<bf16>(m * n);
        ASSERT_TRUE(engine.gemm(x.data(), m, matrix, y.data(), nullptr, nullptr).ok());
        EXPECT_EQ(differing_rows(download(y, m * n), want, m, n), 0)
            << "N " << n << " m " << m << " spread " << spread;
      }
  }
  // q / k / v in one launch at 17..32 rows.
  const Qkv qkv(K, 170);
  const Rows32Scope on(true);
  for (const int64_t m : {17, 25, 32}) EXPECT_EQ(qkv.differing_rows(engine, x.data(), m), 0) << "q / k / v, m " << m;
}

TEST(CudaDecodeRows32, APlantedKOrderFaultIsCaughtAtSeventeenToThirtyTwoRows) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  constexpr int64_t K = 2048, N = 2048;
  auto x = upload(to_bf16(random_values(32 * K, 181, 2.0f)));
  auto w = upload(to_bf16(random_values(N * K, 182, 0.5f)));
  const DeviceMatrix matrix{w.data(), nullptr, N, K};
  const Rows32Scope on(true);
  for (const int64_t m : {17, 32}) {
    auto y = poisoned<float>(m * N);
    ASSERT_TRUE(engine.gemm(x.data(), m, matrix, nullptr, y.data(), nullptr).ok());
    const std::vector<float> want = download(y, m * N);
    auto got = poisoned<float>(m * N);
    ASSERT_TRUE(gemm_decode_pipe(engine, -1, x.data(), m, matrix, nullptr, got.data(), nullptr).ok());
    EXPECT_EQ(first_differing_row(download(got, m * N), want, m, N), -1) << "m " << m;
    set_decode_pipe_fault_for_test(true);
    auto faulty = poisoned<float>(m * N);
    const Status status = gemm_decode_pipe(engine, -1, x.data(), m, matrix, nullptr, faulty.data(), nullptr);
    set_decode_pipe_fault_for_test(false);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_GE(first_differing_row(download(faulty, m * N), want, m, N), 0) << "m " << m << ": the fault went unseen";
  }
}

TEST(CudaDecodeRows32, ThirtyThreeToSixtyFourRowWindowsAsTwoLaunchesKeepTheOneRowBitsAndSeeThePlantedFault) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  constexpr int64_t K = 2048;
  auto x = upload(to_bf16(random_values(64 * K, 191, 2.0f)));
  const Rows32Scope rows32(true);
  for (const int64_t n : {2048, 3072, 6144}) {
    auto w = upload(to_bf16(random_values(n * K, 192 + n, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, n, K};
    const std::vector<bf16> want = one_row_launches(engine, x.data(), 64, matrix);
    for (const bool on : {false, true}) {
      const Rows64Scope rows64(on);
      for (const int64_t m : {33, 40, 48, 64}) {
        auto y = poisoned<bf16>(m * n);
        ASSERT_TRUE(engine.gemm(x.data(), m, matrix, y.data(), nullptr, nullptr).ok());
        EXPECT_EQ(differing_rows(download(y, m * n), want, m, n), 0) << "N " << n << " m " << m << " rows64 " << on;
      }
      // The pipeline's reversed K walk shows only where the two launches ran (fp32 out: a bf16 rounding hides most
      // order changes; s13B saw 29..43 of 48 bf16 rows differ), in rows of both launches.
      auto clean = poisoned<float>(48 * n), faulty = poisoned<float>(48 * n);
      ASSERT_TRUE(engine.gemm(x.data(), 48, matrix, nullptr, clean.data(), nullptr).ok());
      set_decode_pipe_fault_for_test(true);
      const Status status = engine.gemm(x.data(), 48, matrix, nullptr, faulty.data(), nullptr);
      set_decode_pipe_fault_for_test(false);
      ASSERT_TRUE(status.ok()) << status.message();
      const std::vector<float> a = download(clean, 48 * n), b = download(faulty, 48 * n);
      int first_half = 0, second_half = 0;
      for (int64_t r = 0; r < 48; ++r)
        (r < 32 ? first_half : second_half) += std::memcmp(a.data() + r * n, b.data() + r * n, sizeof(float) * n) != 0;
      if (on) {
        EXPECT_GT(first_half, 16) << "N " << n << ": the fault went unseen in the first launch (32 rows)";
        EXPECT_GT(second_half, 8) << "N " << n << ": the fault went unseen in the second launch (16 rows)";
      } else {
        EXPECT_EQ(first_half + second_half, 0) << "N " << n << ": 48 rows took the pipeline without the switch";
      }
    }
  }
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
