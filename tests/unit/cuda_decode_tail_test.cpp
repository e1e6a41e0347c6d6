// The decode GEMMs with a tail (gemm_decode_tail): the GEMM's bits, then the residual add + RMSNorm done by the last
// CTA with add_rms_norm's bits (and the L2 prefetch changing none), the ticket left at zero for the next launch; the
// target with the tails on gives the logits, taps and draws it gives with them off.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "compute/cuda/kernels.h"
#include "cuda_test_util.h"
#include "lfm2_test_util.h"
#include "model/lfm2/cuda/conv_tail.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/weights.h"
#include "model/load.h"
#include "ops_test_util.h"

namespace ls::cuda {
namespace {

using compute::testing::random_values;
using testing::download;
using testing::poisoned;
using testing::to_bf16;
using testing::upload;

size_t differing(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  size_t count = a.size() == b.size() ? 0 : a.size() + b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(bf16)) != 0;
  return count;
}

// One tail case: x [m, K], W [N, K], h [m, N], norm weight [N] from `seed`.
struct TailCase {
  int64_t m, n, k;
  uint64_t seed;
  DeviceBuffer<bf16> x, w, h0, weight;
  TailCase(int64_t m_, int64_t n_, int64_t k_, uint64_t seed_) : m(m_), n(n_), k(k_), seed(seed_) {
    x = upload(to_bf16(random_values(m * k, seed, 2.0f)));
    w = upload(to_bf16(random_values(n * k, seed + 1, 0.5f)));
    h0 = upload(to_bf16(random_values(m * n, seed + 2, 4.0f)));
    weight = upload(to_bf16(random_values(n, seed + 3, 1.5f)));
  }
  DeviceMatrix matrix() const { return DeviceMatrix{w.data(), nullptr, n, k}; }
  DeviceBuffer<bf16> fresh_h() const {
    DeviceBuffer<bf16> h;
    EXPECT_TRUE(h.allocate(m * n).ok());
    EXPECT_EQ(cudaMemcpy(h.data(), h0.data(), m * n * sizeof(bf16), cudaMemcpyDeviceToDevice), cudaSuccess);
    return h;
  }
};

// y, h and norm_out of the GEMM launch then the add_rms_norm launch (the oracle).
struct Outputs {
  std::vector<bf16> y, h, norm;
};
Outputs unfused(const GemmEngine& engine, const TailCase& c) {
  auto y = poisoned<bf16>(c.m * c.n), norm = poisoned<bf16>(c.m * c.n);
  auto h = c.fresh_h();
  EXPECT_TRUE(engine.gemm(c.x.data(), c.m, c.matrix(), y.data(), nullptr, nullptr).ok());
  EXPECT_TRUE(
      add_rms_norm(h.data(), y.data(), c.m, static_cast<int>(c.n), c.weight.data(), 1e-5f, norm.data(), nullptr).ok());
  return {download(y, c.m * c.n), download(h, c.m * c.n), download(norm, c.m * c.n)};
}

Outputs tailed(const GemmEngine& engine, const TailCase& c, unsigned* ticket, const void* l2_next, int64_t l2_bytes) {
  auto y = poisoned<bf16>(c.m * c.n), norm = poisoned<bf16>(c.m * c.n);
  auto h = c.fresh_h();
  DecodeTail tail;
  tail.h = h.data();
  tail.weight = c.weight.data();
  tail.eps = 1e-5f;
  tail.norm_out = norm.data();
  tail.ticket = ticket;
  tail.l2_next = l2_next;
  tail.l2_next_bytes = l2_bytes;
  EXPECT_TRUE(gemm_decode_tail(engine, c.x.data(), c.m, c.matrix(), y.data(), tail, nullptr).ok());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return {download(y, c.m * c.n), download(h, c.m * c.n), download(norm, c.m * c.n)};
}

TEST(CudaDecodeTail, TheTailLaunchGivesTheBitsOfTheGemmThenTheAddRmsNormLaunchAtOneToSixteenRows) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  auto ticket = upload(std::vector<unsigned>{0u});
  auto l2 = upload(to_bf16(random_values(1 << 20, 5)));  // 2 MB some later launch would read
  // (N, K): the 1.2B's out_proj / o_proj (one slice), its down projection (eight slices), three slices with an
  // 8-wide last one and N not a multiple of 16, a wide one-slice N (16-column items up to 8 rows).
  const std::vector<std::tuple<int64_t, int64_t>> shapes = {{2048, 2048}, {2048, 8192}, {1000, 2056}, {8192, 264}};
  for (const auto& [n, k] : shapes) {
    for (const int64_t m : {1, 2, 5, 8, 9, 16}) {
      const TailCase c(m, n, k, 100 + m * 7 + k);
      const std::string where = "N " + std::to_string(n) + " K " + std::to_string(k) + " m " + std::to_string(m);
      // The one-launch path really runs (else the fallback would compare the oracle with itself); rows 8192 wide
      // fit shared memory up to 6 rows.
      auto y_probe = poisoned<bf16>(m * n), norm_probe = poisoned<bf16>(m * n);
      DecodeTail probe;
      probe.h = c.h0.data();
      probe.weight = c.weight.data();
      probe.norm_out = norm_probe.data();
      probe.ticket = ticket.data();
      EXPECT_EQ(decode_tail_fits(m, c.matrix(), c.x.data(), y_probe.data(), probe), n < 8192 || m <= 6) << where;
      const Outputs want = unfused(engine, c);
      for (const bool prefetch : {false, true}) {
        for (int repeat = 0; repeat < 2; ++repeat) {  // the second launch reuses the ticket the first left at zero
          const Outputs got = tailed(engine, c, ticket.data(), prefetch ? l2.data() : nullptr, prefetch ? 2 << 20 : 0);
          EXPECT_EQ(differing(got.y, want.y), 0u) << where << ": y";
          EXPECT_EQ(differing(got.h, want.h), 0u) << where << ": h";
          EXPECT_EQ(differing(got.norm, want.norm), 0u) << where << ": norm";
          EXPECT_EQ(download(ticket, 1)[0], 0u) << where << ": the ticket is left at zero";
        }
      }
    }
  }
}

TEST(CudaDecodeTail, TheTailNormMatchesTheFp64ReferenceOfTheResidualAndRmsNorm) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  auto ticket = upload(std::vector<unsigned>{0u});
  const TailCase c(3, 2048, 2048, 77);
  auto y_probe = poisoned<bf16>(3 * 2048), norm_probe = poisoned<bf16>(3 * 2048);
  DecodeTail probe;
  probe.h = c.h0.data();
  probe.weight = c.weight.data();
  probe.norm_out = norm_probe.data();
  probe.ticket = ticket.data();
  ASSERT_TRUE(decode_tail_fits(3, c.matrix(), c.x.data(), y_probe.data(), probe));
  const Outputs got = tailed(engine, c, ticket.data(), nullptr, 0);
  const std::vector<float> x = testing::to_float(download(c.x, 3 * 2048));
  const std::vector<float> w = testing::to_float(download(c.w, 2048 * 2048));
  const std::vector<float> h0 = testing::to_float(download(c.h0, 3 * 2048));
  const std::vector<float> g = testing::to_float(download(c.weight, 2048));
  for (int r = 0; r < 3; ++r) {
    double err = 0, norm = 0, squares = 0;
    std::vector<float> h(2048);
    for (int j = 0; j < 2048; ++j) {
      double dot = 0;
      for (int i = 0; i < 2048; ++i) dot += double{x[r * 2048 + i]} * w[int64_t{j} * 2048 + i];
      const double y = bf16_to_float(got.y[r * 2048 + j]);
      err += (y - dot) * (y - dot);
      norm += dot * dot;
      h[j] = round_to_bf16(h0[r * 2048 + j] + static_cast<float>(y));  // the residual add: one rounding of the sum
      EXPECT_EQ(std::bit_cast<uint16_t>(got.h[r * 2048 + j]), std::bit_cast<uint16_t>(float_to_bf16(h[j])))
          << "row " << r << " col " << j;
      squares += double{h[j]} * h[j];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-2) << "row " << r;
    const double inv = 1.0 / std::sqrt(squares / 2048 + 1e-5);
    for (int j = 0; j < 2048; ++j) {
      const double want = g[j] * double{round_to_bf16(static_cast<float>(h[j] * inv))};
      EXPECT_NEAR(bf16_to_float(got.norm[r * 2048 + j]), want, std::abs(want) * 1e-2 + 1e-6)
          << "row " << r << " col " << j;
    }
  }
}

TEST(CudaDecodeTail, ShapesTheTailDoesNotTakeRunTheTwoLaunchesWithTheSameBits) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  auto ticket = upload(std::vector<unsigned>{0u});
  const TailCase c(17, 512, 1024, 9);  // 17 rows: above the decode kernel's 16
  DecodeTail tail;
  tail.h = c.h0.data();
  tail.weight = c.weight.data();
  tail.ticket = ticket.data();
  auto y = poisoned<bf16>(17 * 512), out = poisoned<bf16>(17 * 512);
  tail.norm_out = out.data();
  EXPECT_FALSE(decode_tail_fits(17, c.matrix(), c.x.data(), y.data(), tail)) << "17 rows";
  EXPECT_TRUE(decode_tail_fits(16, c.matrix(), c.x.data(), y.data(), tail)) << "16 rows";
  DecodeTail no_ticket = tail;
  no_ticket.ticket = nullptr;
  EXPECT_FALSE(decode_tail_fits(16, c.matrix(), c.x.data(), y.data(), no_ticket)) << "a norm without a ticket";
  DecodeTail aliased = tail;
  aliased.norm_out = y.data();
  EXPECT_FALSE(decode_tail_fits(16, c.matrix(), c.x.data(), y.data(), aliased)) << "norm_out aliasing y";
  EXPECT_FALSE(decode_tail_fits(16, DeviceMatrix{c.w.data(), nullptr, 500, 1024}, c.x.data(), y.data(), tail))
      << "N 500 (not a multiple of 8)";
  EXPECT_FALSE(decode_tail_fits(16, c.matrix(), c.x.data() + 1, y.data(), tail)) << "x not 16-byte aligned";
  const Outputs want = unfused(engine, c);
  const Outputs got = tailed(engine, c, ticket.data(), nullptr, 0);
  EXPECT_EQ(differing(got.y, want.y), 0u);
  EXPECT_EQ(differing(got.h, want.h), 0u);
  EXPECT_EQ(differing(got.norm, want.norm), 0u);
}

}  // namespace
}  // namespace ls::cuda

namespace ls::lfm2 {
namespace {

using compute::testing::random_values;

// The conv tail: in_proj [3D, K] then ShortConv (3 taps) over windows of two streams (rows of a window reading the
// rows before them, the first ones the stream's history), against the GEMM launch then the short_conv launch.
TEST(CudaDecodeTail, TheConvTailGivesTheBitsOfTheInProjGemmThenTheShortConvLaunch) {
  LS_SKIP_WITHOUT_DEVICE();
  const cuda::GemmEngine engine;
  gpu::allow_conv_tail_shared();
  auto ticket = cuda::testing::upload(std::vector<unsigned>{0u});
  const int D = 2048, K = 2048, taps = 3, conv_layers = 2, slots = 3;
  auto w = cuda::testing::upload(cuda::testing::to_bf16(random_values(int64_t{3} * D * K, 41, 0.5f)));
  auto history = cuda::testing::upload(
      cuda::testing::to_bf16(random_values(int64_t{slots} * conv_layers * (taps - 1) * D, 42, 2.0f)));
  auto conv_weight = cuda::testing::upload(random_values(int64_t{D} * taps, 43));
  auto conv_bias = cuda::testing::upload(random_values(D, 44));
  const cuda::DeviceMatrix in_proj{w.data(), nullptr, 3 * D, K};
  for (const int rows : {1, 3, 9, 16}) {
    // two windows: slot 2 with the first rows / 2 (at least 1) rows, slot 0 with the rest (possibly none)
    const int first = std::max(1, rows / 2);
    std::vector<gpu::WindowInfo> infos(2);
    infos[0].first_row = 0;
    infos[0].rows = first;
    infos[0].slot = 2;
    infos[1].first_row = first;
    infos[1].rows = rows - first;
    infos[1].slot = 0;
    std::vector<int32_t> row_window(rows);
    for (int r = 0; r < rows; ++r) row_window[r] = r < first ? 0 : 1;
    auto windows_dev = cuda::testing::upload(infos);
    auto row_window_dev = cuda::testing::upload(row_window);
    auto x = cuda::testing::upload(cuda::testing::to_bf16(random_values(int64_t{rows} * K, 45 + rows, 2.0f)));
    gpu::ConvArgs args;
    args.rows = rows;
    args.width = D;
    args.kernel = taps;
    args.conv_layers = conv_layers;
    args.conv_slot = 1;
    args.history = history.data();
    args.conv_weight = conv_weight.data();
    args.conv_bias = rows % 2 ? conv_bias.data() : nullptr;
    std::vector<bf16> want[3], got[3];  // bcx, z, y
    for (const bool tail : {false, true}) {
      auto bcx = cuda::testing::poisoned<bf16>(int64_t{rows} * 3 * D);
      auto z = cuda::testing::poisoned<bf16>(int64_t{rows} * D), y = cuda::testing::poisoned<bf16>(int64_t{rows} * D);
      args.bcx = bcx.data();
      if (tail) {
        ASSERT_TRUE(gpu::conv_tail_fits(x.data(), in_proj, args, ticket.data())) << rows << " rows";
        ASSERT_TRUE(gpu::gemm_conv_tail(engine, x.data(), in_proj, args, row_window_dev.data(), windows_dev.data(),
                                        z.data(), y.data(), ticket.data(), nullptr)
                        .ok());
      } else {
        ASSERT_TRUE(engine.gemm(x.data(), rows, in_proj, bcx.data(), nullptr, nullptr).ok());
        ASSERT_TRUE(gpu::short_conv(args, row_window_dev.data(), windows_dev.data(), z.data(), y.data(), nullptr).ok());
      }
      std::vector<bf16>* out = tail ? got : want;
      out[0] = cuda::testing::download(bcx, int64_t{rows} * 3 * D);
      out[1] = cuda::testing::download(z, int64_t{rows} * D);
      out[2] = cuda::testing::download(y, int64_t{rows} * D);
    }
    EXPECT_EQ(cuda::differing(got[0], want[0]), 0u) << rows << " rows: bcx";
    EXPECT_EQ(cuda::differing(got[1], want[1]), 0u) << rows << " rows: z";
    EXPECT_EQ(cuda::differing(got[2], want[2]), 0u) << rows << " rows: y";
    size_t nan = 0;
    for (const bf16 v : got[2]) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0u) << rows << " rows: every output written";
    EXPECT_EQ(cuda::testing::download(ticket, 1)[0], 0u) << "the ticket is left at zero";
  }
  gpu::ConvArgs seventeen;
  seventeen.rows = 17;
  seventeen.width = D;
  seventeen.kernel = taps;
  EXPECT_FALSE(gpu::conv_tail_fits(w.data(), in_proj, seventeen, ticket.data())) << "17 rows";
  seventeen.rows = 1;
  seventeen.bcx = w.data();
  seventeen.kernel = 5;
  EXPECT_FALSE(gpu::conv_tail_fits(w.data(), in_proj, seventeen, ticket.data())) << "5 taps";
  seventeen.kernel = taps;
  EXPECT_FALSE(gpu::conv_tail_fits(w.data(), in_proj, seventeen, nullptr)) << "no ticket";
  EXPECT_TRUE(gpu::conv_tail_fits(w.data(), in_proj, seventeen, ticket.data())) << "1 row";
}

TEST(CudaDecodeTail, TheTargetWithTailNormsL2PrefetchAndProgrammaticLaunchesGivesTheLogitsTapsAndDrawsOfTheDefault) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const bool moe : {false, true}) {
    const io::ModelConfig config = testing::small_config(moe);
    LoadOptions options;
    options.device = Device::Cuda;
    options.max_rows = 64;
    options.max_streams = 4;
    auto made = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 9), options);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    CudaTarget& target = **made;
    const int taps[] = {0, 2, 4};
    ASSERT_TRUE(target.set_taps(taps).ok());
    std::vector<std::vector<uint32_t>> runs;
    // Per mode: with logits (eager), then twice without (the second time from captured graphs).
    // (norms, L2 MB, programmatic conv / kv / attention launches, conv tail)
    const std::tuple<bool, int, bool, bool> modes[] = {
        {false, 0, false, false}, {true, 0, false, true}, {false, 1, true, false}, {true, 1, true, true}};
    for (const auto& [norms, l2_mb, programmatic, conv] : modes) {
      gpu::set_programmatic_state_launches(programmatic);
      target.set_decode_tail(norms, l2_mb, conv);
      runs.push_back(testing::window_run_bits(target, true));
      runs.push_back(testing::window_run_bits(target, false));
      runs.push_back(testing::window_run_bits(target, false));
    }
    EXPECT_GT(target.graph_count(), 0);  // (before the reset below drops them)
    target.set_decode_tail(false, 0);
    gpu::set_programmatic_state_launches(false);
    EXPECT_TRUE(testing::runs_match_the_first_mode(runs))
        << (moe ? "moe" : "dense")
        << " (3..5: tail norms + conv, 6..8: L2 prefetch + programmatic launches, 9..11: all; 2, 5, 8, 11: "
                  "graphs)";
  }
}

}  // namespace
}  // namespace ls::lfm2

#endif  // LS_HAVE_CUDA
