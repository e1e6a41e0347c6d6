// The CUDA target's fused row ops (residual add + RMSNorm; q/k norm + RoPE) give the bits of the unfused ops.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compute/cuda/kernels.h"
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

TEST(CudaTargetFusedOps, ResidualAddPlusRmsNormGivesTheBitsOfTheTwoOpsForEveryRowCount) {
  LS_SKIP_WITHOUT_DEVICE();
  const int width = 2048;
  for (int64_t rows : {1, 3, 9, 300}) {
    const size_t n = static_cast<size_t>(rows) * width;
    const std::vector<bf16> h_host = random_bf16(n, 100 + rows, 3.0f);
    const std::vector<bf16> delta_host = random_bf16(n, 200 + rows, 2.0f);
    auto weight = upload(random_bf16(width, 300 + rows));
    auto delta = upload(delta_host);
    auto h_fused = upload(h_host), h_plain = upload(h_host);
    auto y_fused = poisoned(n), y_plain = poisoned(n);
    ASSERT_TRUE(add_rms_norm(h_fused.data(), delta.data(), rows, width, weight.data(), 1e-5f, y_fused.data(), nullptr)
                    .ok());
    ASSERT_TRUE(add_residual(h_plain.data(), delta.data(), static_cast<int64_t>(n), nullptr).ok());
    ASSERT_TRUE(rms_norm(h_plain.data(), rows, width, weight.data(), 1e-5f, y_plain.data(), nullptr).ok());
    const std::vector<bf16> y_f = download(y_fused, n), y_p = download(y_plain, n);
    EXPECT_EQ(differing(download(h_fused, n), download(h_plain, n)), 0u) << rows << " rows: h";
    EXPECT_EQ(differing(y_f, y_p), 0u) << rows << " rows: y";
    size_t nan = 0;
    for (const bf16 v : y_f) nan += (v.bits & 0x7fffu) > 0x7f80u;
    EXPECT_EQ(nan, 0u) << rows << " rows: outputs left unwritten";
  }
}

TEST(CudaTargetFusedOps, QkNormPlusRopeGivesTheBitsOfTwoNormsAndTwoRopes) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const int hd : {64, 128}) {
    const int H = 12, KV = 4;
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

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
