// The narrow-slice order (set_gemm_k2048_slices(2), LS_GEMM_K2048_SLICES=2; session 11, on trial): K in (1024, 2048]
// with 256 <= N <= 4096 as two 1024-wide slices added in slice order. Under it every row of every width and every
// pinned configuration is bitwise its one-row launch, the one-row launches of 1..16 rows run on the pipeline with
// their two chains, the grouped q / k / v launch (pipeline and streaming) and the staged picks keep the bits, the
// planted K-order faults are caught, and the shapes outside the range keep the one-chain bits.
#ifdef LS_HAVE_CUDA

#include <cmath>
#include <cstdio>
#include <set>

#include "cuda_gemm_test_util.h"

namespace ls::cuda {
namespace {

using namespace gemm_testing;  // NOLINT: the GEMM tests' shared helpers

// The order for one scope, put back as it was (LS_GEMM_K2048_SLICES may have set it for the run) however it ends.
struct OrderScope {
  explicit OrderScope(int slices) : was(gemm_k2048_slices()) { set_gemm_k2048_slices(slices); }
  ~OrderScope() { set_gemm_k2048_slices(was); }
  int was;
};

// The narrow shapes (o_proj / out_proj, q / k / v widths, the range's ends, a K tail in the second slice, N odd).
const std::vector<GemmCase> kNarrowShapes = {{2048, 2048}, {3072, 2048}, {512, 2048}, {256, 2048},
                                             {4096, 2048}, {1001, 1544}, {520, 1088}};

// One-row launches of `rows` rows of x (one launch a row) into fp32 under the order as set now.
std::vector<float> one_row_launches(const DeviceBuffer<bf16>& x, int64_t rows, const DeviceMatrix& w) {
  const GemmEngine engine;
  auto y = poisoned<float>(rows * w.rows);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(engine.gemm(x.data() + r * w.cols, 1, w, nullptr, y.data() + r * w.rows, nullptr).ok());
  return download(y, rows * w.rows);
}

TEST(CudaGemmSlices, TheOrderSlicesOnlyTheNarrowWidthsStaysCloseToFp64AndChangesTheirBits) {
  LS_SKIP_WITHOUT_DEVICE();
  constexpr int64_t kRows = 4;
  // In the range: the bits move (two chains, then their sum); outside (N = 32: the MoE router; 8192; K = 1024 or
  // 2056): the bits are the one-chain order's.
  for (const auto& [shape, moves] : std::vector<std::pair<GemmCase, bool>>{{{2048, 2048}, true},
                                                                          {{512, 2048}, true},
                                                                          {{1001, 1544}, true},
                                                                          {{32, 2048}, false},
                                                                          {{8192, 2048}, false},
                                                                          {{2048, 1024}, false},
                                                                          {{1000, 2056}, false}}) {
    const auto x_host = to_bf16(random_values(kRows * shape.k, 41 + shape.n));
    const auto w_host = to_bf16(random_values(shape.n * shape.k, 42 + shape.k, 0.5f));
    auto x = upload(x_host);
    auto w = upload(w_host);
    const DeviceMatrix matrix{w.data(), nullptr, shape.n, shape.k};
    std::vector<float> chain, sliced;
    {
      const OrderScope one(1);
      chain = one_row_launches(x, kRows, matrix);
    }
    {
      const OrderScope two(2);
      sliced = one_row_launches(x, kRows, matrix);
    }
    const bool same = std::memcmp(chain.data(), sliced.data(), sizeof(float) * chain.size()) == 0;
    EXPECT_EQ(same, !moves) << "N " << shape.n << " K " << shape.k;
    // Both orders are rounding-close to fp64.
    const std::vector<float> xf = to_float(x_host), wf = to_float(w_host);
    double diff = 0, norm = 0;
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < shape.n; ++c) {
        double sum = 0;
        for (int64_t i = 0; i < shape.k; ++i) sum += static_cast<double>(xf[r * shape.k + i]) * wf[c * shape.k + i];
        const double got = sliced[r * shape.n + c];
        diff += (got - sum) * (got - sum);
        norm += sum * sum;
      }
    EXPECT_LT(std::sqrt(diff / norm), 1e-4) << "N " << shape.n << " K " << shape.k;
  }
}

TEST(CudaGemmSlices, EveryRowIsBitwiseItsOneRowLaunchAtEveryWidthUpTo2048) {
  LS_SKIP_WITHOUT_DEVICE();
  const OrderScope two(2);
  const GemmEngine engine;
  std::vector<int64_t> widths;
  for (int64_t m = 1; m <= 16; ++m) widths.push_back(m);
  for (int64_t m : {17, 24, 32, 48, 64, 65, 100, 128, 256, 512, 2048}) widths.push_back(m);
  for (const GemmCase& shape : kNarrowShapes)
    EXPECT_EQ(invariance_failure(engine, shape, widths), "") << "N " << shape.n << " K " << shape.k;
}

TEST(CudaGemmSlices, EveryPinnedConfigurationGivesTheOneRowBitsAndCatchesThePlantedFault) {
  LS_SKIP_WITHOUT_DEVICE();
  const OrderScope two(2);
  const std::vector<int64_t> widths = {1, 5, 16, 17, 64, 100, 300};
  std::set<std::string> ran, caught;
  for (int tile = 0; tile < GemmEngine::tile_count(); ++tile) {
    GemmEngine engine;
    engine.pin_tile_for_test(tile);
    for (const GemmCase shape : {GemmCase{2048, 2048}, GemmCase{3072, 2048}, GemmCase{1001, 1544}}) {
      EXPECT_EQ(invariance_failure(engine, shape, widths), "")
          << "tile " << tile << " N " << shape.n << " K " << shape.k;
      for (int64_t m : widths) ran.insert(engine.tile_name(m, shape.n, shape.k));
    }
    // The fault (each slice's K tiles walked backwards above 16 rows) under the pin where it runs at 100 rows.
    const std::string name = engine.tile_name(100, 2048, 2048);
    if (caught.count(name)) continue;
    GemmEngine faulty = engine;
    faulty.set_fault_reverse_k_for_test(true);
    const std::string failure = invariance_failure(faulty, GemmCase{2048, 2048}, {1, 100});
    EXPECT_NE(failure.find("m 100"), std::string::npos) << "tile " << tile << " (" << name << "): " << failure;
    caught.insert(name);
  }
  std::printf("narrow-slice order: %zu configurations ran, the fault caught under %zu:", ran.size(), caught.size());
  for (const std::string& name : caught) std::printf(" [%s]", name.c_str());
  std::printf("\n");
  // The sliced tiles run where the one-chain order gave K = 2048 the unsliced ones: at least the walking and the
  // split tiles show up (split ones need clusters).
  size_t split = 0;
  for (const std::string& name : ran) split += name.find("split") != std::string::npos;
  if (cuda_features().clusters) {
    EXPECT_GT(split, 0u);
  }
}

TEST(CudaGemmSlices, OneToSixteenRowsRunOnThePipelineWithTwoChainsAndAPlantedFaultTurnsThemRed) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const OrderScope two(2);
  const GemmEngine engine;
  constexpr int64_t kRows = 16;
  for (const GemmCase shape : {GemmCase{2048, 2048}, GemmCase{3072, 2048}, GemmCase{512, 2048}}) {
    auto x = upload(to_bf16(random_values(kRows * shape.k, 51 + shape.n)));
    auto w = upload(to_bf16(random_values(shape.n * shape.k, 52, 0.5f)));
    auto bias = upload(random_values(shape.n, 53));
    const DeviceMatrix matrix{w.data(), bias.data(), shape.n, shape.k};
    for (int64_t m = 1; m <= kRows; ++m) {
      bool x_once = false;
      EXPECT_TRUE(decode_pipe_routes(m, matrix, false, &x_once)) << "m " << m << " N " << shape.n;
      EXPECT_TRUE(x_once) << "m " << m << " N " << shape.n;
    }
    const std::vector<float> want = one_row_launches(x, kRows, matrix);
    // The pipeline's fault (each unit's K tiles backwards where x is copied once): red at one row and at eight.
    set_decode_pipe_fault_for_test(true);
    for (int64_t m : {1, 8}) {
      auto y = poisoned<float>(m * shape.n);
      EXPECT_TRUE(gemm_decode_pipe(engine, -1, x.data(), m, matrix, nullptr, y.data(), nullptr).ok());
      const std::vector<float> got = download(y, m * shape.n);
      EXPECT_NE(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0)
          << "the planted fault left m " << m << " N " << shape.n << " unchanged";
    }
    set_decode_pipe_fault_for_test(false);
    for (int64_t m = 1; m <= kRows; ++m) {
      auto y = poisoned<float>(m * shape.n);
      EXPECT_TRUE(gemm_decode_pipe(engine, -1, x.data(), m, matrix, nullptr, y.data(), nullptr).ok());
      const std::vector<float> got = download(y, m * shape.n);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0) << "m " << m << " N " << shape.n;
    }
  }
}

TEST(CudaGemmSlices, TheGroupedQkvLaunchAndTheStagedPicksKeepEachMatrixsOneRowBits) {
  LS_SKIP_WITHOUT_DEVICE();
  const OrderScope two(2);
  const GemmEngine engine;
  constexpr int64_t kK = 2048, kRows = 32;
  const int64_t widths[3] = {2048, 512, 512};
  auto x = upload(to_bf16(random_values(kRows * kK, 61)));
  std::vector<DeviceBuffer<bf16>> ws;
  std::vector<DeviceMatrix> matrices;
  for (int i = 0; i < 3; ++i) ws.push_back(upload(to_bf16(random_values(widths[i] * kK, 62 + i, 0.5f))));
  for (int i = 0; i < 3; ++i) matrices.push_back(DeviceMatrix{ws[i].data(), nullptr, widths[i], kK});
  std::vector<std::vector<float>> want;  // the bf16 store of each one-row launch's fp32 sums
  for (int i = 0; i < 3; ++i) want.push_back(to_float(to_bf16(one_row_launches(x, kRows, matrices[i]))));
  // `label` launches of m rows into ys[i] [m, N_i] against want.
  const auto check = [&](int64_t m, const std::vector<DeviceBuffer<bf16>>& ys, const std::string& label) {
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> got = to_float(download(ys[i], m * widths[i]));
      EXPECT_EQ(std::memcmp(got.data(), want[i].data(), sizeof(float) * got.size()), 0)
          << label << " m " << m << " matrix " << i;
    }
  };
  // The grouped launch: the pipeline up to 16 rows, the streaming group kernel (a warp a slice) up to 32.
  for (int64_t m : {1, 2, 5, 8, 9, 16, 17, 24, 32}) {
    ASSERT_TRUE(decode_group_fits(m, matrices)) << "m " << m;
    std::vector<DeviceBuffer<bf16>> ys;
    std::vector<bf16*> outs;
    for (int i = 0; i < 3; ++i) ys.push_back(poisoned<bf16>(m * widths[i]));
    for (int i = 0; i < 3; ++i) outs.push_back(ys[i].data());
    ASSERT_TRUE(gemm_decode_group(engine, x.data(), m, matrices, outs, nullptr).ok()) << "m " << m;
    check(m, ys, "q / k / v group");
  }
  // Every staged configuration (each warp's two chains in turn), the engine's launches and the grouped one, with the
  // pipeline's automatic picks off (they come first).
  const bool narrow_was = decode_pipe_narrow_on();
  set_decode_pipe_narrow(false);
  for (int config = 0; config < decode_staged_config_count(); ++config) {
    set_decode_staged_pick(config);
    for (int64_t m : {1, 7, 16}) {
      std::vector<DeviceBuffer<bf16>> ys, grouped;
      std::vector<bf16*> outs;
      for (int i = 0; i < 3; ++i) {
        ys.push_back(poisoned<bf16>(m * widths[i]));
        grouped.push_back(poisoned<bf16>(m * widths[i]));
        outs.push_back(grouped[i].data());
        EXPECT_TRUE(engine.gemm(x.data(), m, matrices[i], ys[i].data(), nullptr, nullptr).ok());
      }
      EXPECT_TRUE(gemm_decode_group(engine, x.data(), m, matrices, outs, nullptr).ok());
      check(m, ys, "staged " + std::to_string(config));
      check(m, grouped, "staged group " + std::to_string(config));
    }
  }
  // The planted fault (one chain where the order says two) turns the staged and the streaming group launches red.
  set_gemm_slices_fault_for_test(true);
  for (const int64_t m : {7, 24}) {  // staged pick 0 at 7 rows, the streaming group at 24
    set_decode_staged_pick(m <= 16 ? 0 : -1);
    std::vector<DeviceBuffer<bf16>> ys, grouped;
    std::vector<bf16*> outs;
    for (int i = 0; i < 3; ++i) {
      ys.push_back(poisoned<bf16>(m * widths[i]));
      grouped.push_back(poisoned<bf16>(m * widths[i]));
      outs.push_back(grouped[i].data());
    }
    EXPECT_TRUE(gemm_decode_group(engine, x.data(), m, matrices, outs, nullptr).ok());
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> got = to_float(download(grouped[i], m * widths[i]));
      EXPECT_NE(std::memcmp(got.data(), want[i].data(), sizeof(float) * got.size()), 0)
          << "the planted fault left the " << (m <= 16 ? "staged" : "streaming") << " group's matrix " << i
          << " unchanged";
    }
    if (m > 16) continue;
    EXPECT_TRUE(engine.gemm(x.data(), m, matrices[0], ys[0].data(), nullptr, nullptr).ok());
    const std::vector<float> got = to_float(download(ys[0], m * widths[0]));
    EXPECT_NE(std::memcmp(got.data(), want[0].data(), sizeof(float) * got.size()), 0)
        << "the planted fault left the staged launch unchanged";
  }
  set_gemm_slices_fault_for_test(false);
  set_decode_staged_pick(-1);
  set_decode_pipe_narrow(narrow_was);
  // The fused gate_up + SwiGLU (N = 2F beyond the range) keeps one chain and still fits.
  EXPECT_TRUE(decode_swiglu_fits(1, DeviceMatrix{ws[0].data(), nullptr, 16384, kK}));
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
