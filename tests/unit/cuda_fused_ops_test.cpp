// The CUDA target's row ops: RMSNorm (a CTA per wide row, a warp per narrow one) in its defined arithmetic, the
// fused ops (residual add + RMSNorm; q/k norm + RoPE; the drawn rows' gather + last add + final norm) giving the bits
// of the unfused ones, and the target with its norms in the decode GEMMs' prologues giving the unfused forward's
// bits.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/hash.h"

#include "compute/cuda/kernels.h"
#include "compute/cuda/row_gather_norm.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "lfm2_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/weights.h"
#include "model/load.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace ls::cuda {
namespace {

using compute::testing::random_values;

using testing::download;
using testing::upload;

DeviceBuffer<bf16> poisoned(size_t count) { return testing::poisoned<bf16>(count); }

std::vector<bf16> random_bf16(size_t count, uint64_t seed, float scale = 1.0f) {
  return testing::to_bf16(random_values(count, seed, scale));
}

// Counts elements whose bits differ (a NaN left from the poison differs from any real value).
size_t differing(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += a[i].bits != b[i].bits;
  return count;
}

// Values over a wide dynamic range (2^-30 .. 2^30), so that the double sum of squares rounds.
std::vector<bf16> spread_bf16(size_t count, uint64_t seed) {
  std::vector<bf16> out(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = splitmix64(seed * 0x9e3779b97f4a7c15ull + i);
    const double magnitude = std::ldexp(0.5 + uniform_open01(bits), static_cast<int>(bits % 61) - 30);
    out[i] = float_to_bf16(static_cast<float>((bits >> 63) ? -magnitude : magnitude));
  }
  return out;
}

// The defined RMSNorm of one row, on the host: lane l (of 32) chains the squares of elements l, l + 32, ... in
// double, the lanes meet in an xor tree (offsets 16, 8, 4, 2, 1), then the CPU Bf16 mode's two roundings.
std::vector<bf16> rms_norm_reference(const bf16* x, int width, const bf16* weight, float eps) {
  double lanes[32];
  for (int lane = 0; lane < 32; ++lane) {
    lanes[lane] = 0;
    for (int i = lane; i < width; i += 32) {
      const double v = bf16_to_float(x[i]);
      lanes[lane] += v * v;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    double next[32];
    for (int lane = 0; lane < 32; ++lane) next[lane] = lanes[lane] + lanes[lane ^ offset];
    std::memcpy(lanes, next, sizeof(lanes));
  }
  const float mean = static_cast<float>(lanes[0] / static_cast<double>(width));
  const float inverse_rms = 1.0f / std::sqrt(mean + eps);
  std::vector<bf16> out(width);
  for (int i = 0; i < width; ++i) {
    const float normed = round_to_bf16(bf16_to_float(x[i]) * inverse_rms);
    out[i] = float_to_bf16(bf16_to_float(weight[i]) * normed);
  }
  return out;
}

TEST(CudaTargetFusedOps, RmsNormOfWideAndNarrowRowsIsItsDefinedArithmeticBitForBit) {
  LS_SKIP_WITHOUT_DEVICE();
  // 2048 / 256 / 8192: a CTA per row; 64, 1000 (not a multiple of 8) and 8200 (too wide): a warp per row; offset 4
  // (8-byte aligned rows): a warp per row as well.
  const std::vector<std::tuple<int64_t, int, int>> cases = {{1, 2048, 0}, {7, 2048, 0}, {300, 2048, 0}, {3, 256, 0},
                                                            {2, 8192, 0}, {50, 64, 0},  {4, 1000, 0}, {2, 8200, 0},
                                                            {3, 2048, 4}};
  for (const auto& [rows, width, offset] : cases) {
    const size_t n = static_cast<size_t>(rows) * width;
    const std::vector<bf16> x_host = spread_bf16(n + offset, 11 + width + rows);
    const std::vector<bf16> w_host = random_bf16(width, 12 + width, 2.0f);
    auto x = upload(x_host);
    auto weight = upload(w_host);
    auto y = poisoned(n + offset);
    ASSERT_TRUE(rms_norm(x.data() + offset, rows, width, weight.data(), 1e-5f, y.data() + offset, nullptr).ok());
    const std::vector<bf16> got = download(y, n + offset);
    size_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<bf16> want = rms_norm_reference(x_host.data() + offset + r * width, width, w_host.data(), 1e-5f);
      for (int i = 0; i < width; ++i) wrong += got[offset + r * width + i].bits != want[i].bits;
    }
    EXPECT_EQ(wrong, 0u) << rows << " x " << width << " at offset " << offset;
  }
}

TEST(CudaTargetFusedOps, ResidualAddPlusRmsNormGivesTheBitsOfTheTwoOpsForEveryRowCount) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const int width : {2048, 1000, 6144}) {
    for (int64_t rows : {1, 3, 9, 300}) {
      const size_t n = static_cast<size_t>(rows) * width;
      const std::vector<bf16> h_host = random_bf16(n, 100 + rows + width, 3.0f);
      const std::vector<bf16> delta_host = random_bf16(n, 200 + rows + width, 2.0f);
      auto weight = upload(random_bf16(width, 300 + rows));
      auto delta = upload(delta_host);
      auto h_fused = upload(h_host), h_plain = upload(h_host);
      auto y_fused = poisoned(n), y_plain = poisoned(n);
      ASSERT_TRUE(
          add_rms_norm(h_fused.data(), delta.data(), rows, width, weight.data(), 1e-5f, y_fused.data(), nullptr).ok());
      ASSERT_TRUE(add_residual(h_plain.data(), delta.data(), static_cast<int64_t>(n), nullptr).ok());
      ASSERT_TRUE(rms_norm(h_plain.data(), rows, width, weight.data(), 1e-5f, y_plain.data(), nullptr).ok());
      const std::vector<bf16> y_f = download(y_fused, n), y_p = download(y_plain, n);
      const std::vector<bf16> h_f = download(h_fused, n);
      EXPECT_EQ(differing(h_f, download(h_plain, n)), 0u) << width << " x " << rows << " rows: h";
      EXPECT_EQ(differing(y_f, y_p), 0u) << width << " x " << rows << " rows: y";
      size_t nan = 0;
      for (const bf16 v : y_f) nan += (v.bits & 0x7fffu) > 0x7f80u;
      EXPECT_EQ(nan, 0u) << width << " x " << rows << " rows: outputs left unwritten";
      // h really moved: the sum differs from the old h somewhere (delta is not all zero)
      EXPECT_GT(differing(h_f, h_host), 0u);
    }
  }
}

TEST(CudaTargetFusedOps, QkNormPlusRopeGivesTheBitsOfTwoNormsAndTwoRopes) {
  LS_SKIP_WITHOUT_DEVICE();
  // A warp per head for hd 64 / 128 / 256 (40 heads = 5 full CTAs, 16 = 2, 8 = one partial); hd 96 falls back.
  const std::vector<std::tuple<int, int, int>> shapes = {{64, 32, 8}, {128, 12, 4}, {256, 5, 3}, {96, 12, 4}};
  for (const auto& [hd, H, KV] : shapes) {
    const int64_t rows = 37;
    const size_t nq = rows * H * hd, nk = rows * KV * hd;
    auto q_raw = upload(random_bf16(nq, 1 + hd, 4.0f));
    auto k_raw = upload(random_bf16(nk, 2 + hd, 4.0f));
    auto q_weight = upload(random_bf16(hd, 3 + hd));
    auto k_weight = upload(random_bf16(hd, 4 + hd));
    std::vector<int64_t> positions_host(rows);
    for (int64_t r = 0; r < rows; ++r) positions_host[r] = (r * 977) % 5000;
    auto positions = upload(positions_host);
    std::vector<float> inv_freq_host(hd / 2);
    for (int i = 0; i < hd / 2; ++i) inv_freq_host[i] = std::pow(1e6f, -2.0f * i / hd);
    auto inv_freq = upload(inv_freq_host);
    auto q_fused = poisoned(nq), k_fused = poisoned(nk), q_plain = poisoned(nq), k_plain = poisoned(nk);
    QkNormRope args;
    args.q_raw = q_raw.data();
    args.k_raw = k_raw.data();
    args.q_weight = q_weight.data();
    args.k_weight = k_weight.data();
    args.q = q_fused.data();
    args.k = k_fused.data();
    args.rows = rows;
    args.q_heads = H;
    args.k_heads = KV;
    args.head_dim = hd;
    args.eps = 1e-5f;
    args.positions = positions.data();
    args.inv_freq = inv_freq.data();
    ASSERT_TRUE(qk_norm_rope(args, nullptr).ok());
    ASSERT_TRUE(rms_norm(q_raw.data(), rows * H, hd, q_weight.data(), 1e-5f, q_plain.data(), nullptr).ok());
    ASSERT_TRUE(rms_norm(k_raw.data(), rows * KV, hd, k_weight.data(), 1e-5f, k_plain.data(), nullptr).ok());
    ASSERT_TRUE(rope_neox(q_plain.data(), rows, H, hd, int64_t{H} * hd, positions.data(), inv_freq.data(), nullptr).ok());
    ASSERT_TRUE(
        rope_neox(k_plain.data(), rows, KV, hd, int64_t{KV} * hd, positions.data(), inv_freq.data(), nullptr).ok());
    EXPECT_EQ(differing(download(q_fused, nq), download(q_plain, nq)), 0u) << "hd " << hd << ": q";
    EXPECT_EQ(differing(download(k_fused, nk), download(k_plain, nk)), 0u) << "hd " << hd << ": k";
  }
  QkNormRope odd;
  odd.rows = 1;
  odd.head_dim = 63;
  const Status refused = qk_norm_rope(odd, nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message().find("63"), std::string::npos) << refused.message();
}

// The drawn rows' gather + last residual add + final norm in one launch (gather_rms_norm, step10) against
// add_residual on every row, the gather, then rms_norm: the normed rows bitwise (and without delta: the gather then
// rms_norm), outputs poisoned first, rows drawn out of order and twice; the planted left-out add must show.
int gather_norm_differences(bool fault) {
  int differ = 0;
  for (const int width : {2048, 264, 6144}) {
    const int64_t rows = 9;
    const std::vector<int32_t> index_host = {8, 0, 3, 3, 5};
    const int64_t n = static_cast<int64_t>(index_host.size());
    const std::vector<bf16> h_host = random_bf16(rows * width, 21 + width, 4.0f);
    auto h = upload(h_host), h_added = upload(h_host);
    auto delta = upload(random_bf16(rows * width, 22 + width, 1.0f));
    auto weight = upload(random_bf16(width, 23 + width));
    auto index = upload(index_host);
    auto gathered = poisoned(n * width), want = poisoned(n * width), got = poisoned(n * width);
    auto want_plain = poisoned(n * width), got_plain = poisoned(n * width);
    EXPECT_TRUE(add_residual(h_added.data(), delta.data(), rows * width, nullptr).ok());
    EXPECT_TRUE(lfm2::gpu::gather_rows(h_added.data(), index.data(), n, width, 1, gathered.data(), nullptr).ok());
    EXPECT_TRUE(rms_norm(gathered.data(), n, width, weight.data(), 1e-5f, want.data(), nullptr).ok());
    EXPECT_TRUE(lfm2::gpu::gather_rows(h.data(), index.data(), n, width, 1, gathered.data(), nullptr).ok());
    EXPECT_TRUE(rms_norm(gathered.data(), n, width, weight.data(), 1e-5f, want_plain.data(), nullptr).ok());
    EXPECT_TRUE(gather_rms_norm(h.data(), delta.data(), index.data(), n, width, weight.data(), 1e-5f, got.data(),
                                nullptr, fault)
                    .ok());
    EXPECT_TRUE(
        gather_rms_norm(h.data(), nullptr, index.data(), n, width, weight.data(), 1e-5f, got_plain.data(), nullptr).ok());
    const size_t with_add = differing(download(got, n * width), download(want, n * width));
    const size_t plain = differing(download(got_plain, n * width), download(want_plain, n * width));
    const size_t h_moved = differing(download(h, rows * width), h_host);
    if (!fault) {
      EXPECT_EQ(with_add, 0u) << "width " << width << ": with the add";
      EXPECT_EQ(plain, 0u) << "width " << width << ": without";
      EXPECT_EQ(h_moved, 0u) << "width " << width << ": h is not written";
    }
    differ += static_cast<int>(with_add + plain + h_moved);
  }
  return differ;
}

TEST(CudaTargetFusedOps, TheGatherResidualAddAndFinalNormInOneLaunchGiveTheThreeLaunchesBits) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(gather_norm_differences(false), 0);
  EXPECT_FALSE(gather_rms_norm_fits(1004, nullptr, nullptr, nullptr, nullptr)) << "not a multiple of 8";
  EXPECT_FALSE(gather_rms_norm_fits(200, nullptr, nullptr, nullptr, nullptr)) << "narrower than the CTA kernel's rows";
}

TEST(CudaTargetFusedOps, APlantedLeftOutResidualAddInTheGatherNormTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_GT(gather_norm_differences(true), 0);
}

}  // namespace
}  // namespace ls::cuda

namespace ls::lfm2 {
namespace {

TEST(CudaTargetFusedOps, NormsInTheDecodeGemmProloguesGiveTheUnfusedLogitsTapsAndDraws) {
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
    ASSERT_TRUE(cuda::decode_norm_fits(16, config.hidden_size));  // the fused path really runs
    std::vector<std::vector<uint32_t>> runs;
    // With logits (eager), then twice without (the second time from captured graphs): unfused, the mixers' norms
    // fused, every norm fused (the FFN's on the staged SwiGLU kernel, then on the streaming one: swiglu config 4).
    for (const int fused : {0, 1, 2, 3}) {
      cuda::set_decode_norm_configs(0, fused == 3 ? 4 : 2);
      target.set_decode_norm_fusion(fused > 0, fused > 1);
      runs.push_back(testing::window_run_bits(target, true));
      runs.push_back(testing::window_run_bits(target, false));
      runs.push_back(testing::window_run_bits(target, false));
    }
    cuda::set_decode_norm_configs(0, 2);
    EXPECT_GT(target.graph_count(), 0);
    EXPECT_TRUE(testing::runs_match_the_first_mode(runs))
        << (moe ? "moe" : "dense")
        << " (3..5: mixers fused, 6..8: all, 9..11: all, SwiGLU streamed; 2, 5, 8, 11: graphs)";
  }
}

}  // namespace
}  // namespace ls::lfm2

#endif  // LS_HAVE_CUDA
