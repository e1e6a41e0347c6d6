// The pipeline decode GEMM spread over fewer CTAs above one row (session 13, set_decode_pipe_spread /
// LS_DECODE_PIPE_SPREAD): each CTA takes spread times the columns, so fewer CTAs copy the m x rows. Which CTA
// computes a column never changes its chain: every row of 2..16-row launches of the 1.2B's one-slice decode shapes
// and of the q / k / v launch keeps the bits of its one-row launch at spreads 2, 4 and 8, on fresh random data with
// the outputs poisoned, and the planted K-order fault is caught under the spread.
#ifdef LS_HAVE_CUDA

#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

struct SpreadScope {
  explicit SpreadScope(int spread) : before(decode_pipe_spread()) { set_decode_pipe_spread(spread); }
  ~SpreadScope() { set_decode_pipe_spread(before); }
  int before;
};

// y [m, n] of x's first m rows, one row a launch (the default picks, one CTA an SM).
std::vector<bf16> one_row_launches(const GemmEngine& engine, const bf16* x, int64_t m, int64_t k,
                                   std::span<const DeviceMatrix> ws) {
  std::vector<bf16> rows;
  for (const DeviceMatrix& w : ws)
    for (int64_t r = 0; r < m; ++r) {
      auto y = poisoned<bf16>(w.rows);
      EXPECT_TRUE(engine.gemm(x + r * k, 1, w, y.data(), nullptr, nullptr).ok());
      const std::vector<bf16> row = download(y, w.rows);
      rows.insert(rows.end(), row.begin(), row.end());
    }
  return rows;  // matrix by matrix, row by row
}

TEST(CudaDecodeSpread, TwoToSixteenRowLaunchesOnFewerCtasKeepTheOneRowBitsAndTheQkvLaunchToo) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  constexpr int64_t K = 2048;
  auto x = upload(to_bf16(random_values(16 * K, 131, 2.0f)));
  for (const int64_t n : {2048, 512, 6144, 3072}) {
    auto w = upload(to_bf16(random_values(n * K, 132 + n, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, n, K};
    const std::vector<bf16> want = one_row_launches(engine, x.data(), 16, K, {&matrix, 1});
    for (const int spread : {2, 4, 8}) {
      const SpreadScope scope(spread);
      for (const int64_t m : {2, 3, 8, 9, 10, 16}) {
        EXPECT_TRUE(decode_pipe_routes(m, matrix, false)) << "N " << n << " m " << m << " spread " << spread;
        auto y = poisoned<bf16>(m * n);
        ASSERT_TRUE(engine.gemm(x.data(), m, matrix, y.data(), nullptr, nullptr).ok());
        const std::vector<bf16> got = download(y, m * n);
        for (int64_t r = 0; r < m; ++r)
          EXPECT_EQ(std::memcmp(got.data() + r * n, want.data() + r * n, sizeof(bf16) * n), 0)
              << "N " << n << " m " << m << " spread " << spread << " row " << r;
      }
    }
  }
  // q / k / v in one launch (2048 + 512 + 512 outputs), as the attention layers run it.
  std::vector<DeviceBuffer<bf16>> weights;
  std::vector<DeviceMatrix> qkv;
  for (const int64_t n : {2048, 512, 512}) {
    weights.push_back(upload(to_bf16(random_values(n * K, 140 + weights.size(), 0.5f))));
    qkv.push_back(DeviceMatrix{weights.back().data(), nullptr, n, K});
  }
  const std::vector<bf16> want = one_row_launches(engine, x.data(), 16, K, qkv);
  for (const int spread : {1, 2, 4}) {
    const SpreadScope scope(spread);
    for (const int64_t m : {2, 9, 16}) {
      std::vector<DeviceBuffer<bf16>> outs;
      std::vector<bf16*> out_ptrs;
      for (const DeviceMatrix& w : qkv) {
        outs.push_back(poisoned<bf16>(m * w.rows));
        out_ptrs.push_back(outs.back().data());
      }
      ASSERT_TRUE(gemm_decode_group(engine, x.data(), m, qkv, out_ptrs, nullptr).ok());
      size_t at = 0;
      for (size_t i = 0; i < qkv.size(); ++i) {
        const int64_t n = qkv[i].rows;
        const std::vector<bf16> got = download(outs[i], m * n);
        for (int64_t r = 0; r < m; ++r)
          EXPECT_EQ(std::memcmp(got.data() + r * n, want.data() + at + r * n, sizeof(bf16) * n), 0)
              << "q/k/v matrix " << i << " m " << m << " spread " << spread << " row " << r;
        at += static_cast<size_t>(16 * n);
      }
    }
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

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
