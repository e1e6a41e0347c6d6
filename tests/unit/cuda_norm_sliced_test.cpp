// The sliced sum-of-squares order of the target's norms (set_norm_sliced, session 12; row_norm.cuh): a row built so
// that the two orders give different normed bits shows every norm path following the switch (the CTA-per-row
// rms_norm / add_rms_norm / gather_rms_norm, and the decode GEMMs' norm prologue, whose one-warp helper the MoE route's
// norm shares); under the switch spread rows of every width give the host's sliced reference bitwise; a planted fault
// (the last slice left out of the total) turns it red.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "compute/cuda/kernels.h"
#include "compute/cuda/norm_order.h"
#include "compute/cuda/row_gather_norm.h"
#include "cuda_norm_reference.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace ls::cuda {
namespace {

using norm_testing::rms_norm_reference;
using norm_testing::spread_bf16;
using testing::download;
using testing::poisoned;
using testing::upload;

// set_norm_sliced (and the planted fault) for one scope, put back however the test ends.
struct SlicedScope {
  explicit SlicedScope(bool on, bool fault = false) : was(norm_sliced()) {
    set_norm_sliced(on);
    set_norm_sliced_fault_for_test(fault);
  }
  ~SlicedScope() {
    set_norm_sliced(was);
    set_norm_sliced_fault_for_test(false);
  }
  bool was;
};

size_t differing(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += a[i].bits != b[i].bits;
  return count;
}

constexpr int kWidth = 2048;

// A row of 2048 whose sum of squares is exact in the sliced order but one ulp up in the one-warp order: 32 at 0 and
// 2^-7 at 256 give S = 2^10 (1 + 2^-24), whose mean 0.5 + 2^-25 is a float midpoint (ties to 0.5); seven 2^-22 at 1..7
// (squares a quarter ulp of S) are absorbed one by one in the sliced order (lane 0 chains 0..7) but meet in pairs in
// the one-warp order's tree (lanes 1..7) and add one ulp, so its mean rounds up to 0.5 + 2^-24.
std::vector<bf16> two_order_row() {
  std::vector<bf16> row(kWidth, float_to_bf16(0.0f));
  row[0] = float_to_bf16(32.0f);
  row[256] = float_to_bf16(std::ldexp(1.0f, -7));
  for (int i = 1; i < 8; ++i) row[i] = float_to_bf16(std::ldexp(1.0f, -22));
  return row;
}

// An eps (a multiple of 2^-24 below 0.5) that puts 1 / sqrt(mean + eps) of the two means on either side of a bf16
// rounding boundary, so the normed values differ: searched near 1 / sqrt(x) = 1 + 2^-8 (a bf16 midpoint).
float splitting_eps() {
  const float target = 1.0f / ((1.0f + 0x1p-8f) * (1.0f + 0x1p-8f)) - 0.5f;
  for (int step = -4096; step <= 4096; ++step) {
    const float eps = std::ldexp(std::round(std::ldexp(target, 24)) + step, -24);
    const float low = round_to_bf16(1.0f / std::sqrt(0.5f + eps));
    const float high = round_to_bf16(1.0f / std::sqrt(0.5f + 0x1p-24f + eps));
    if (low != high) return eps;
  }
  return 0.0f;
}

TEST(CudaNormSliced, TheTwoOrdersDifferOnABuiltRowAndEveryNormPathFollowsTheSwitch) {
  LS_SKIP_WITHOUT_DEVICE();
  const float eps = splitting_eps();
  ASSERT_NE(eps, 0.0f) << "no eps splits the two means";
  // Rows: spread, the built row, spread (the built row in the middle of a launch).
  std::vector<bf16> rows_host = spread_bf16(3 * kWidth, 5);
  const std::vector<bf16> built = two_order_row();
  std::copy(built.begin(), built.end(), rows_host.begin() + kWidth);
  const std::vector<bf16> weight_host(kWidth, float_to_bf16(1.0f));
  std::vector<bf16> want[2];
  for (const bool sliced : {false, true})
    for (int r = 0; r < 3; ++r) {
      const std::vector<bf16> row = rms_norm_reference(rows_host.data() + r * kWidth, kWidth, weight_host.data(), eps,
                                                       sliced);
      want[sliced].insert(want[sliced].end(), row.begin(), row.end());
    }
  ASSERT_GT(differing(want[0], want[1]), 0u) << "the built row does not tell the orders apart";
  auto x = upload(rows_host);
  auto weight = upload(weight_host);
  auto zeros = upload(std::vector<bf16>(3 * kWidth, float_to_bf16(0.0f)));
  const std::vector<int32_t> index_host = {1, 0, 2};
  auto index = upload(index_host);
  const GemmEngine engine;
  auto w = upload(testing::to_bf16(compute::testing::random_values(264 * kWidth, 7, 0.5f)));
  const std::vector<DeviceMatrix> ws = {DeviceMatrix{w.data(), nullptr, 264, kWidth}};
  std::vector<bf16> gemm_of[2];  // the GEMM of each order's normed rows
  for (const bool sliced : {false, true}) {
    auto normed = upload(want[sliced]);
    auto y = poisoned<bf16>(3 * 264);
    ASSERT_TRUE(engine.gemm(normed.data(), 3, ws[0], y.data(), nullptr, nullptr).ok());
    gemm_of[sliced] = download(y, 3 * 264);
  }
  ASSERT_GT(differing(gemm_of[0], gemm_of[1]), 0u) << "the GEMM hides the orders' difference";
  for (const bool sliced : {false, true}) {
    const SlicedScope order(sliced);
    const char* name = sliced ? "sliced" : "one warp";
    auto y = poisoned<bf16>(3 * kWidth);
    ASSERT_TRUE(rms_norm(x.data(), 3, kWidth, weight.data(), eps, y.data(), nullptr).ok());
    EXPECT_EQ(differing(download(y, 3 * kWidth), want[sliced]), 0u) << "rms_norm, " << name;
    auto h = upload(rows_host);
    auto y_add = poisoned<bf16>(3 * kWidth);
    ASSERT_TRUE(add_rms_norm(h.data(), zeros.data(), 3, kWidth, weight.data(), eps, y_add.data(), nullptr).ok());
    EXPECT_EQ(differing(download(y_add, 3 * kWidth), want[sliced]), 0u) << "add_rms_norm, " << name;
    EXPECT_EQ(differing(download(h, 3 * kWidth), rows_host), 0u) << "add_rms_norm's h, " << name;
    auto y_gather = poisoned<bf16>(3 * kWidth);
    ASSERT_TRUE(gather_rms_norm(x.data(), zeros.data(), index.data(), 3, kWidth, weight.data(), eps, y_gather.data(),
                                nullptr)
                    .ok());
    std::vector<bf16> want_gather;
    for (const int32_t r : index_host)
      want_gather.insert(want_gather.end(), want[sliced].begin() + r * kWidth, want[sliced].begin() + (r + 1) * kWidth);
    EXPECT_EQ(differing(download(y_gather, 3 * kWidth), want_gather), 0u) << "gather_rms_norm, " << name;
    // The decode GEMM with the add + norm in its prologue (a warp a row: the helper the MoE route's norm runs).
    ASSERT_TRUE(decode_norm_fits(3, kWidth));
    auto h_in = upload(rows_host);
    auto h_out = poisoned<bf16>(3 * kWidth);
    DecodeNorm norm;
    norm.h = h_in.data();
    norm.delta = zeros.data();
    norm.h_out = h_out.data();
    norm.weight = weight.data();
    norm.eps = eps;
    auto got = poisoned<bf16>(3 * 264);
    std::vector<bf16*> outs = {got.data()};
    ASSERT_TRUE(gemm_decode_norm(engine, norm, 3, ws, outs, nullptr).ok());
    EXPECT_EQ(differing(download(got, 3 * 264), gemm_of[sliced]), 0u) << "the norm prologue, " << name;
  }
}

TEST(CudaNormSliced, UnderTheSwitchSpreadRowsOfEveryWidthGiveTheSlicedReference) {
  LS_SKIP_WITHOUT_DEVICE();
  const SlicedScope order(true);
  // 264: a slice of one chunk; 2056: a short last slice; 8192: 32 slices (4 a warp); 256: one slice (the one-warp
  // order).
  for (const int width : {264, 2048, 2056, 6144, 8192, 256}) {
    for (const int64_t rows : {1, 5}) {
      const size_t n = static_cast<size_t>(rows) * width;
      const std::vector<bf16> h_host = spread_bf16(n, 31 + width + rows);
      const std::vector<bf16> delta_host = spread_bf16(n, 32 + width + rows);
      const std::vector<bf16> w_host = testing::to_bf16(compute::testing::random_values(width, 33 + width, 2.0f));
      std::vector<bf16> sum(n), want;
      for (size_t i = 0; i < n; ++i) sum[i] = float_to_bf16(bf16_to_float(h_host[i]) + bf16_to_float(delta_host[i]));
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<bf16> row = rms_norm_reference(sum.data() + r * width, width, w_host.data(), 1e-5f, true);
        want.insert(want.end(), row.begin(), row.end());
      }
      auto h = upload(h_host);
      auto delta = upload(delta_host);
      auto weight = upload(w_host);
      auto y = poisoned<bf16>(n);
      ASSERT_TRUE(add_rms_norm(h.data(), delta.data(), rows, width, weight.data(), 1e-5f, y.data(), nullptr).ok());
      EXPECT_EQ(differing(download(h, n), sum), 0u) << width << " x " << rows << ": h";
      EXPECT_EQ(differing(download(y, n), want), 0u) << width << " x " << rows << ": y";
      auto y_plain = poisoned<bf16>(n);
      ASSERT_TRUE(rms_norm(h.data(), rows, width, weight.data(), 1e-5f, y_plain.data(), nullptr).ok());
      EXPECT_EQ(differing(download(y_plain, n), want), 0u) << width << " x " << rows << ": rms_norm";
    }
  }
}

TEST(CudaNormSliced, APlantedLeftOutSliceTurnsTheSlicedNormRed) {
  LS_SKIP_WITHOUT_DEVICE();
  const SlicedScope faulty(true, true);
  const std::vector<bf16> x_host = spread_bf16(4 * kWidth, 41);
  const std::vector<bf16> w_host(kWidth, float_to_bf16(1.0f));
  std::vector<bf16> want;
  for (int r = 0; r < 4; ++r) {
    const std::vector<bf16> row = rms_norm_reference(x_host.data() + r * kWidth, kWidth, w_host.data(), 1e-5f, true);
    want.insert(want.end(), row.begin(), row.end());
  }
  auto x = upload(x_host);
  auto weight = upload(w_host);
  auto y = poisoned<bf16>(4 * kWidth);
  ASSERT_TRUE(rms_norm(x.data(), 4, kWidth, weight.data(), 1e-5f, y.data(), nullptr).ok());
  EXPECT_GT(differing(download(y, 4 * kWidth), want), 0u) << "the left-out slice went unseen";
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
