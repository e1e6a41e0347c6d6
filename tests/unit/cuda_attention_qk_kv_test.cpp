// The q/k norm + RoPE with the KV write in one launch (gpu::qk_norm_rope_kv, step10) against cuda::qk_norm_rope then
// gpu::write_kv: q and the whole page pool (keys and values, every slot the write must leave alone included) bitwise,
// on shuffled pages, windows of several streams, head_dim 64 / 128 and the fallback's 96; a planted one-slot-late
// key write turns the check red.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_attention_util.h"

namespace ls::lfm2::gpu {
namespace {

using namespace attention_testing;
using cuda::testing::poisoned;

int differing(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i].bits != b[i].bits;
  return differ;
}

// q / keys / values that differ between the fused launch and the two launches, over every shape and forward.
int fused_differences(bool fault) {
  const Shape shapes[] = {{32, 8, 64}, {16, 2, 128}, {12, 4, 96}};
  int differ = 0;
  for (const Shape& shape : shapes) {
    PagedCase c = make_case(shape, {70, 200, 33}, 11 + shape.head_dim);
    // decode rows, a verify window across a page edge, a one-row window at position 0
    const std::vector<Win> wins = {{0, 60, 1}, {1, 25, 16}, {2, 0, 1}, {0, 61, 9}};
    Forward forward(c, wins);
    const int hd = shape.head_dim, H = shape.heads, KV = shape.kv_heads;
    const int64_t rows = forward.rows, nq = rows * H * hd, nk = rows * KV * hd;
    std::vector<int64_t> positions_host;
    for (const Win& w : wins)
      for (int64_t r = 0; r < w.rows; ++r) positions_host.push_back(w.start + r);
    DeviceBuffer<int64_t> positions = upload(positions_host);
    std::vector<float> inv_freq_host(hd / 2);
    for (int i = 0; i < hd / 2; ++i) inv_freq_host[i] = std::pow(1e6f, -2.0f * i / hd);
    DeviceBuffer<float> inv_freq = upload(inv_freq_host);
    DeviceBuffer<bf16> q_raw = upload(cuda::testing::to_bf16(compute::testing::random_values(nq, 3 + hd, 4.0f)));
    DeviceBuffer<bf16> k_raw = upload(cuda::testing::to_bf16(compute::testing::random_values(nk, 4 + hd, 4.0f)));
    DeviceBuffer<bf16> v = upload(cuda::testing::to_bf16(compute::testing::random_values(nk, 5 + hd, 2.0f)));
    DeviceBuffer<bf16> q_weight = upload(cuda::testing::to_bf16(compute::testing::random_values(hd, 6 + hd, 2.0f)));
    DeviceBuffer<bf16> k_weight = upload(cuda::testing::to_bf16(compute::testing::random_values(hd, 7 + hd, 2.0f)));
    DeviceBuffer<bf16> q_want = poisoned<bf16>(nq), q_got = poisoned<bf16>(nq), k_want = poisoned<bf16>(nk),
                       k_scratch = poisoned<bf16>(nk);
    // two copies of the pool (NaN past every stream's keys)
    DeviceBuffer<bf16> keys_want = upload(c.keys), values_want = upload(c.values), keys_got = upload(c.keys),
                       values_got = upload(c.values);
    cuda::QkNormRope args;
    args.q_raw = q_raw.data();
    args.k_raw = k_raw.data();
    args.q_weight = q_weight.data();
    args.k_weight = k_weight.data();
    args.rows = rows;
    args.q_heads = H;
    args.k_heads = KV;
    args.head_dim = hd;
    args.eps = 1e-5f;
    args.positions = positions.data();
    args.inv_freq = inv_freq.data();
    cuda::QkNormRope two = args;
    two.q = q_want.data();
    two.k = k_want.data();
    EXPECT_TRUE(cuda::qk_norm_rope(two, nullptr).ok());
    EXPECT_TRUE(write_kv(k_want.data(), v.data(), rows, forward.row_window.data(), forward.windows.data(),
                         c.dev_pages.data(), c.kv_shape(), KvLayer{keys_want.data(), values_want.data()}, nullptr)
                    .ok());
    args.q = q_got.data();
    args.k = k_scratch.data();  // used only by the head_dim 96 fallback
    const Status status =
        qk_norm_rope_kv(args, v.data(), forward.row_window.data(), forward.windows.data(), c.dev_pages.data(),
                        c.kv_shape(), KvLayer{keys_got.data(), values_got.data()}, nullptr, fault);
    EXPECT_TRUE(status.ok()) << status.to_string();
    const std::string at = name(shape);
    const int q_differ = differing(download(q_got, nq), download(q_want, nq));
    const int keys_differ = differing(download(keys_got, c.keys.size()), download(keys_want, c.keys.size()));
    const int values_differ = differing(download(values_got, c.values.size()), download(values_want, c.values.size()));
    if (!fault) {
      EXPECT_EQ(q_differ, 0) << at << ": q of " << nq;
      EXPECT_EQ(keys_differ, 0) << at << ": keys of " << c.keys.size();
      EXPECT_EQ(values_differ, 0) << at << ": values of " << c.values.size();
    }
    differ += q_differ + keys_differ + values_differ;
  }
  return differ;
}

TEST(CudaAttentionQkKv, TheQkNormWithTheKvWriteInOneLaunchGivesTheTwoLaunchesBits) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(fused_differences(false), 0);
}

TEST(CudaAttentionQkKv, APlantedOneSlotLateKeyWriteTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_GT(fused_differences(true), 0);
}

TEST(CudaAttentionQkKv, RefusesKHeadsThatAreNotTheCachesByNumber) {
  LS_SKIP_WITHOUT_DEVICE();
  PagedCase c = make_case(Shape{8, 2, 64}, {8}, 3);
  cuda::QkNormRope args;
  args.rows = 1;
  args.q_heads = 8;
  args.k_heads = 4;
  args.head_dim = 64;
  const Status refused = qk_norm_rope_kv(args, nullptr, nullptr, nullptr, nullptr, c.kv_shape(),
                                         KvLayer{c.dev_keys.data(), c.dev_values.data()}, nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(refused.to_string().find("k heads 4 x 64"), std::string::npos) << refused.to_string();
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
