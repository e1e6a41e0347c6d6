// Verify windows on the pipeline decode GEMM (session 13; gemm_decode_pipe.cu). Which CTA computes a column, how
// many m16 tiles of rows meet a weight fragment and how a window is cut into launches never change a row's chain, so
// every row keeps the bits of its one-row launch; all on fresh random data with the outputs poisoned:
// - the spread (set_decode_pipe_spread): 2..16-row launches of the 1.2B's one-slice shapes and
//   the q / k / v launch on about SMs / spread CTAs, at spreads 2 / 4 / 8; the reversed-K fault caught under it;
// - 17..32-row windows (set_decode_pipe_rows32): two m16 tiles of x rows, x once; row copies, 3D boxes up to 16384
//   outputs, two items a warp and q / k / v, spread or not, routed only under the switch; the fault caught at 17 and
//   32 rows. (33..64-row windows as two launches were removed in session 14 with their test.)
// - the streaming gate_up + SwiGLU at 9..16 rows on 4 warps (session 14, the default since s14A): every row keeps
//   its one-row bits; the reversed-K fault (set_decode_pipe_fault_for_test) caught on it.
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

// The engine's m-row launch of W: whether it took the pipeline, and the rows whose bits differ from `want`.
int routed_launch_differs(const GemmEngine& engine, const bf16* x, int64_t m, const DeviceMatrix& w,
                          const std::vector<bf16>& want) {
  EXPECT_TRUE(decode_pipe_routes(m, w, false)) << "N " << w.rows << " m " << m << ": not on the pipeline";
  auto y = poisoned<bf16>(m * w.rows);
  EXPECT_TRUE(engine.gemm(x, m, w, y.data(), nullptr, nullptr).ok());
  return differing_rows(download(y, m * w.rows), want, m, w.rows);
}

// The pipeline's m-row launch of W (fp32 out: a bf16 rounding hides most order changes) equals the engine's, and with
// the planted fault (each unit's K tiles walked backwards) it does not.
void expect_pipe_fault_seen(const GemmEngine& engine, const bf16* x, int64_t m, const DeviceMatrix& w,
                            const std::string& what) {
  const int64_t n = w.rows;
  auto y = poisoned<float>(m * n);
  ASSERT_TRUE(engine.gemm(x, m, w, nullptr, y.data(), nullptr).ok());
  const std::vector<float> want = download(y, m * n);
  auto got = poisoned<float>(m * n);
  ASSERT_TRUE(gemm_decode_pipe(engine, -1, x, m, w, nullptr, got.data(), nullptr).ok());
  EXPECT_EQ(first_differing_row(download(got, m * n), want, m, n), -1) << what;
  set_decode_pipe_fault_for_test(true);
  auto faulty = poisoned<float>(m * n);
  const Status status = gemm_decode_pipe(engine, -1, x, m, w, nullptr, faulty.data(), nullptr);
  set_decode_pipe_fault_for_test(false);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_GE(first_differing_row(download(faulty, m * n), want, m, n), 0)
      << what << ": the K tiles walked backwards went unseen";
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
      for (const int64_t m : {2, 3, 8, 9, 10, 16})
        EXPECT_EQ(routed_launch_differs(engine, x.data(), m, matrix, want), 0)
            << "N " << n << " m " << m << " spread " << spread;
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
  for (const int spread : {2, 4}) {
    const SpreadScope scope(spread);
    expect_pipe_fault_seen(engine, x.data(), M, matrix, "spread " + std::to_string(spread));
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
        EXPECT_EQ(routed_launch_differs(engine, x.data(), m, matrix, want), 0)
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
  for (const int64_t m : {17, 32}) expect_pipe_fault_seen(engine, x.data(), m, matrix, "m " + std::to_string(m));
}

// One GEMM of the 1.2B (swiglu: gate_up [2F, K] with its activation) on random weights, and its rows one at a time.
struct Shape {
  Shape(int64_t n, int64_t k, bool swiglu, uint64_t seed)
      : n(n), k(k), swiglu(swiglu), w(upload(to_bf16(random_values(n * k, seed, 0.5f)))),
        matrix{w.data(), nullptr, n, k} {}
  int64_t out_n() const { return swiglu ? n / 2 : n; }
  std::vector<bf16> run(const GemmEngine& engine, const bf16* x, int64_t m) const {
    auto y = poisoned<bf16>(m * out_n());
    const Status status = swiglu ? gemm_decode_swiglu(engine, x, m, matrix, y.data(), nullptr)
                                 : engine.gemm(x, m, matrix, y.data(), nullptr, nullptr);
    EXPECT_TRUE(status.ok()) << status.message();
    return download(y, m * out_n());
  }
  std::vector<bf16> one_row_launches(const GemmEngine& engine, const bf16* x, int64_t rows) const {
    std::vector<bf16> out;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<bf16> row = run(engine, x + r * k, 1);
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  }
  int differing_rows(const std::vector<bf16>& got, const std::vector<bf16>& want, int64_t m) const {
    return ::ls::cuda::differing_rows(got, want, m, out_n());
  }
  int64_t n, k;
  bool swiglu;
  DeviceBuffer<bf16> w;
  DeviceMatrix matrix;
};

TEST(CudaDecodeSwiglu16, NineToSixteenRowsOnFourWarpsKeepTheOneRowBitsAndSeeAPlantedKFault) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  constexpr int64_t K = 2048, M = 10;
  auto x = upload(to_bf16(random_values(16 * K, 211, 2.0f)));
  // gate_up + SwiGLU of the 1.2B: the streaming kernel's 4-warp launch at 9..16 rows (the default since s14A)
  const Shape gate_up(16384, K, true, 225);
  const std::vector<bf16> want = gate_up.one_row_launches(engine, x.data(), 16);
  for (const int64_t m : {8, 9, 10, 12, 16})
    EXPECT_EQ(gate_up.differing_rows(gate_up.run(engine, x.data(), m), want, m), 0) << "m " << m;
  const std::vector<bf16> clean = gate_up.run(engine, x.data(), M);
  set_decode_pipe_fault_for_test(true);
  const std::vector<bf16> faulty = gate_up.run(engine, x.data(), M);
  set_decode_pipe_fault_for_test(false);
  EXPECT_GT(gate_up.differing_rows(faulty, clean, M), M / 2) << "the K tiles walked backwards went unseen";
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
