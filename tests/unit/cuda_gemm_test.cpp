// The batch-invariant bf16 GEMM (GemmEngine): accuracy against an fp64 reference, every row bitwise its one-row
// launch at every width and under every pinned kernel configuration (mma.sync, split, wgmma, TMA), the planted
// K-order fault caught, and the refusals.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compute/cuda/kernels.h"
#include "compute/ops.h"
#include "cuda_gemm_test_util.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace ls::cuda {
namespace {

using compute::NumericMode;
using compute::testing::random_values;

using testing::bf16_exact;
using testing::download;
using testing::poisoned;
using testing::to_bf16;
using testing::to_float;
using testing::upload;
using gemm_testing::GemmCase;
using gemm_testing::invariance_failure;
using gemm_testing::run_gemm;

double normwise_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    diff += (y[i] - ref[i]) * (y[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

TEST(CudaGemm, MatchesTheFp64ReferenceForEveryTileShapeWithTailsAndBias) {
  LS_SKIP_WITHOUT_DEVICE();
  GemmEngine engine;
  // m picks the decode, medium, large and split kernels; N odd, K not a multiple of 64 and K = 2056 / 4104 (three
  // and five slices, the last one 8 wide) exercise the edges.
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 517, 1032}, {13, 4100, 264}, {40, 517, 1032}, {300, 520, 200}, {260, 9000, 72}, {3, 260, 2056},
           {70, 260, 2056}, {40, 130, 4104}, {9, 131, 4104}}) {
    auto x_host = bf16_exact(random_values(m * k, 11 + m));
    compute::OwnedMatrix w_host = compute::testing::random_matrix(n, k, 12 + n, NumericMode::Bf16);
    w_host.bias = random_values(n, 13);
    auto x = upload(to_bf16(x_host));
    auto w = upload(w_host.b16);
    auto bias = upload(w_host.bias);
    const DeviceMatrix matrix{w.data(), bias.data(), n, k};
    const std::vector<double> ref = compute::testing::reference_matmul(x_host, m, w_host);
    const double err32 = normwise_error(run_gemm(engine, x, 0, m, matrix, false), ref);
    const double err16 = normwise_error(run_gemm(engine, x, 0, m, matrix, true), ref);
    EXPECT_LT(err32, 1e-3) << "m " << m << " n " << n << " k " << k << " " << engine.tile_name(m, n, k);
    EXPECT_LT(err16, 1e-2) << "m " << m << " n " << n << " k " << k << " " << engine.tile_name(m, n, k);
  }
}

std::vector<int64_t> invariance_widths() {
  std::vector<int64_t> widths;
  for (int64_t m = 1; m <= 16; ++m) widths.push_back(m);
  for (int64_t m : {17, 32, 48, 64, 65, 100, 128, 200, 256, 512, 2048}) widths.push_back(m);
  return widths;
}

TEST(CudaGemm, EveryRowIsBitwiseItsOneRowLaunchAtEveryWidthUpTo2048) {
  LS_SKIP_WITHOUT_DEVICE();
  GemmEngine engine;
  for (const GemmCase shape : {GemmCase{2048, 8192}, GemmCase{8192, 2048}, GemmCase{1000, 2056}})
    EXPECT_EQ(invariance_failure(engine, shape, invariance_widths()), "") << "N " << shape.n << " K " << shape.k;
}

// The wgmma tiles (sm_90a) were on trial (kWgmmaOnTrial: the pinned tests below left them to the wgmma test, then
// disabled) until the H200 showed them bitwise (batch A, commit 91d1689); now every pinned test covers them.
constexpr bool kWgmmaOnTrial = false;
// wgmma 128x256, 128x128 (sliced K too), 128x128 x2, both split; TMA 128x256, 128x128 (sliced K too), both split,
// 128x128 pair (sliced K too), 128x256 pair, 128x256 persistent.
constexpr size_t kWgmmaTiles = 12, kWgmmaSplitTiles = 4;
// mma.sync split tiles: 64x128, 128x128, 16x128 and the verify tiles 32x32, 64x32.
constexpr size_t kMmaSplitTiles = 5;
bool is_wgmma(const std::string& name) { return name.find("wgmma") != std::string::npos; }
// wgmma code is built for sm_90a only: it runs on compute capability 9.0, where this binary carries sm_90a code and
// LS_CUDA_PORTABLE is off (features.h).
bool device_runs_wgmma() { return cuda_features().wgmma; }

TEST(CudaGemm, EveryKernelConfigurationGivesTheOneRowBitsWhereverItMayRun) {
  LS_SKIP_WITHOUT_DEVICE();
  // The automatic choice may pick any configuration for some (m, N): each one, pinned, must add in the same order.
  const std::vector<int64_t> widths = {1, 5, 16, 17, 64, 100, 300};
  std::set<std::string> ran;  // configurations that really ran (a pin falls back where it may not run)
  for (int tile = 0; tile < GemmEngine::tile_count(); ++tile) {
    GemmEngine engine;
    engine.pin_tile_for_test(tile);
    if (kWgmmaOnTrial && is_wgmma(engine.tile_name(300, 2048, 2048))) continue;
    // K = 9216: nine slices, more than a cluster holds (the split configurations give way to the automatic pick).
    for (const GemmCase shape : {GemmCase{2048, 8192}, GemmCase{1000, 2056}, GemmCase{520, 1024}, GemmCase{8192, 2048},
                                 GemmCase{260, 9216}}) {
      EXPECT_EQ(invariance_failure(engine, shape, widths), "") << "tile " << tile << " N " << shape.n << " K " << shape.k;
      for (int64_t m : widths) ran.insert(engine.tile_name(m, shape.n, shape.k));
    }
  }
  // Every configuration ran somewhere; the split ones need thread-block clusters (sm_90 code on compute capability
  // 9+), the wgmma ones (kWgmmaTiles, kWgmmaSplitTiles of them split) sm_90a code on 9.0 (features.h).
  const bool clusters = cuda_features().clusters;
  const bool wgmma = !kWgmmaOnTrial && device_runs_wgmma();
  size_t split = 0, wgmma_ran = 0;
  for (const std::string& name : ran) {
    split += name.find("split") != std::string::npos;
    wgmma_ran += is_wgmma(name);
  }
  EXPECT_EQ(ran.size() + (clusters ? 0 : kMmaSplitTiles) + (wgmma ? 0 : kWgmmaTiles),
            static_cast<size_t>(GemmEngine::tile_count()));
  EXPECT_EQ(wgmma_ran, wgmma ? kWgmmaTiles : 0u);
  if (clusters) {
    EXPECT_EQ(split, kMmaSplitTiles + (wgmma ? kWgmmaSplitTiles : 0u));
  }
}

TEST(CudaGemm, APlantedKOrderFaultAboveSixteenRowsIsCaughtByTheInvarianceCheck) {
  LS_SKIP_WITHOUT_DEVICE();
  GemmEngine engine;
  engine.set_fault_reverse_k_for_test(true);
  const std::string failure = invariance_failure(engine, GemmCase{1024, 8192}, {1, 16, 17, 64, 100});
  EXPECT_NE(failure.find("m 17 "), std::string::npos) << failure;
  std::printf("planted fault caught: %s\n", failure.c_str());
  // The split configurations (each slice's tiles walked backwards in its own CTA) are caught alike. A pin that
  // cannot run at this shape gives way to the automatic pick (itself split), so count distinct split tiles.
  std::set<std::string> split_tiles;
  for (int tile = 0; tile < GemmEngine::tile_count(); ++tile) {
    GemmEngine pinned;
    pinned.pin_tile_for_test(tile);
    const std::string name = pinned.tile_name(100, 1024, 8192);
    if (name.find("split") == std::string::npos || (kWgmmaOnTrial && is_wgmma(name))) continue;
    pinned.set_fault_reverse_k_for_test(true);
    const std::string split_failure = invariance_failure(pinned, GemmCase{1024, 8192}, {1, 100});
    EXPECT_NE(split_failure.find("m 100"), std::string::npos) << "tile " << tile << ": " << split_failure;
    EXPECT_NE(split_failure.find("split"), std::string::npos) << split_failure;
    split_tiles.insert(name);
  }
  const bool clusters = cuda_features().clusters;  // split mode needs clusters (features.h)
  const bool wgmma = !kWgmmaOnTrial && device_runs_wgmma();
  EXPECT_EQ(split_tiles.size(), clusters ? 2u + (wgmma ? kWgmmaSplitTiles : 0u) : 0u);
}

// The verify tiles (17..64 rows) each pinned: every row of every window bitwise its one-row launch on the 1.2B's
// one-slice and sliced shapes, a K tail with three slices and an odd N; the planted K-order fault red under each.
TEST(CudaGemm, EveryVerifyTileGivesTheOneRowBitsAtSeventeenToSixtyFourRowsAndCatchesThePlantedFault) {
  LS_SKIP_WITHOUT_DEVICE();
  // The verify tiles are not automatic (set_verify_tiles), so a pin that gives way to the automatic pick never names
  // one: only the verify pins run the shapes.
  std::set<std::string> ran;
  for (int tile = 0; tile < GemmEngine::tile_count(); ++tile) {
    GemmEngine engine;
    engine.pin_tile_for_test(tile);
    const std::string name = engine.tile_name(17, 2048, 8192);
    if (name.find("verify") == std::string::npos &&
        std::string(engine.tile_name(17, 2048, 2048)).find("verify") == std::string::npos)
      continue;
    for (const GemmCase shape : {GemmCase{2048, 2048}, GemmCase{3072, 2048}, GemmCase{2048, 8192}, GemmCase{1001, 2056}}) {
      const bool verify = std::string(engine.tile_name(24, shape.n, shape.k)).find("verify") != std::string::npos;
      if (!verify) continue;  // the pin does not run here (one slice vs split)
      EXPECT_EQ(invariance_failure(engine, shape, {1, 17, 24, 32, 48, 64}), "")
          << "tile " << tile << " N " << shape.n << " K " << shape.k;
      GemmEngine faulty = engine;
      faulty.set_fault_reverse_k_for_test(true);
      const std::string failure = invariance_failure(faulty, shape, {1, 24});
      EXPECT_NE(failure.find("m 24 "), std::string::npos) << "tile " << tile << " K " << shape.k << ": " << failure;
      EXPECT_NE(failure.find("verify"), std::string::npos) << failure;
      ran.insert(engine.tile_name(24, shape.n, shape.k));
    }
  }
  // 32x32, 64x32, 64x64, 64x16, and with clusters the two split ones.
  EXPECT_EQ(ran.size(), cuda_features().clusters ? 6u : 4u);
}

// The largest |batch - one-row launch| over the largest |one-row launch| at width m: rounding-sized where only the
// order differs, about 1 where the kernel computes something else.
double largest_gap(const GemmEngine& engine, const GemmCase& shape, int64_t m) {
  const GemmEngine reference;
  auto x = upload(to_bf16(random_values(m * shape.k, 31)));
  auto w = upload(to_bf16(random_values(shape.n * shape.k, 32, 0.5f)));
  const DeviceMatrix matrix{w.data(), nullptr, shape.n, shape.k};
  const std::vector<float> batch = run_gemm(engine, x, 0, m, matrix, false);
  double gap = 0, scale = 0;
  for (int64_t r = 0; r < m; ++r) {
    const std::vector<float> one = run_gemm(reference, x, r, 1, matrix, false);
    for (int64_t c = 0; c < shape.n; ++c) {
      const double diff = std::abs(static_cast<double>(batch[r * shape.n + c]) - one[c]);
      if (std::isnan(diff)) return std::numeric_limits<double>::infinity();  // an output never written
      gap = std::max(gap, diff);
      scale = std::max(scale, std::abs(static_cast<double>(one[c])));
    }
  }
  return gap / scale;
}

// Each wgmma tile pinned at prefill widths on the five shapes (one slice, tails, sliced and split K): every row
// bitwise its one-row launch (the decode kernel's mma.sync chain), and the planted K-order fault red under each.
TEST(CudaGemm, TheWgmmaTilesGiveTheOneRowBitsAtPrefillWidthsAndCatchThePlantedFault) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!device_runs_wgmma()) GTEST_SKIP() << "wgmma needs compute capability 9.0";
  std::set<std::string> ran;
  for (int tile = 0; tile < GemmEngine::tile_count(); ++tile) {
    GemmEngine engine;
    engine.pin_tile_for_test(tile);
    if (!is_wgmma(engine.tile_name(300, 2048, 2048))) continue;
    for (const GemmCase shape : {GemmCase{2048, 8192}, GemmCase{1000, 2056}, GemmCase{520, 1024}, GemmCase{8192, 2048},
                                 GemmCase{260, 9216}}) {
      const std::string failure = invariance_failure(engine, shape, {1, 5, 17, 100, 128, 300, 513});
      EXPECT_EQ(failure, "") << "tile " << tile << " N " << shape.n << " K " << shape.k << ", largest gap to the "
                             << "one-row launch at m 300: " << largest_gap(engine, shape, 300) << " (relative)";
      ran.insert(engine.tile_name(300, shape.n, shape.k));
    }
    std::printf("trial: %s ran its shapes\n", engine.tile_name(300, 2048, 2048));
    std::fflush(stdout);
    // The fault on one slice (every wgmma tile runs there: K = 2048 walked backwards) and on sliced K.
    for (const GemmCase shape : {GemmCase{1024, 2048}, GemmCase{1024, 8192}}) {
      const std::string name = engine.tile_name(100, shape.n, shape.k);
      if (!is_wgmma(name)) continue;
      GemmEngine faulty;
      faulty.pin_tile_for_test(tile);
      faulty.set_fault_reverse_k_for_test(true);
      const std::string failure = invariance_failure(faulty, shape, {1, 100});
      EXPECT_NE(failure.find("m 100"), std::string::npos) << "tile " << tile << " K " << shape.k << ": " << failure;
      EXPECT_NE(failure.find("wgmma"), std::string::npos) << failure;
      std::printf("planted fault caught under %s, K %lld: %s\n", name.c_str(), static_cast<long long>(shape.k),
                  failure.c_str());
    }
  }
  size_t wgmma_ran = 0;
  for (const std::string& name : ran) wgmma_ran += is_wgmma(name);
  EXPECT_EQ(wgmma_ran, kWgmmaTiles);
}

TEST(CudaGemm, RefusesTwoOutputsARaggedKAMisalignedYAndTooManyRows) {
  LS_SKIP_WITHOUT_DEVICE();
  GemmEngine engine;
  DeviceBuffer<bf16> x, w, y;
  ASSERT_TRUE(x.allocate(64).ok() && w.allocate(64).ok() && y.allocate(64).ok());
  DeviceBuffer<float> y32;
  ASSERT_TRUE(y32.allocate(64).ok());
  const Status both = engine.gemm(x.data(), 1, DeviceMatrix{w.data(), nullptr, 4, 16}, y.data(), y32.data(), nullptr);
  EXPECT_EQ(both.code(), ErrorCode::InvalidArgument);
  const Status odd_k = engine.gemm(x.data(), 1, DeviceMatrix{w.data(), nullptr, 4, 12}, y.data(), nullptr, nullptr);
  EXPECT_EQ(odd_k.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(odd_k.message().find("12"), std::string::npos);
  const Status odd_y = engine.gemm(x.data(), 1, DeviceMatrix{w.data(), nullptr, 4, 16}, y.data() + 1, nullptr, nullptr);
  EXPECT_EQ(odd_y.code(), ErrorCode::InvalidArgument);
  const Status too_many = engine.gemm(x.data(), (1 << 20) + 1, DeviceMatrix{w.data(), nullptr, 4, 16}, y.data(),
                                      nullptr, nullptr);
  EXPECT_EQ(too_many.code(), ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
