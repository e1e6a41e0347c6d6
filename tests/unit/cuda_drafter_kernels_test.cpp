// The CUDA drafter's kernels against their references on fresh random data, outputs poisoned first: the tile and
// split block attention against the warp kernel, the fused q/k/v heads step against norm + RoPE + scatter, and
// residual + norm and the stacked SwiGLU against the unfused launches.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/bf16.h"
#include "compute/cuda/cuda_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark {
namespace {

// Fresh random bf16 values in [-scale, scale).
std::vector<bf16> random_values(std::mt19937& rng, size_t count, float scale) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<bf16> values(count);
  for (bf16& value : values) value = float_to_bf16(uniform(rng));
  return values;
}

std::vector<float> random_floats(std::mt19937& rng, size_t count, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(rng);
  return values;
}

int count_bitwise_equal(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  int equal = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) equal += a[i].bits == b[i].bits;
  return equal;
}

// The fused heads step against rms_norm + rope_rotate (q and k) + scatter_block_kv on fresh random data, both
// head layouts (interleaved and NeoX) and two head sizes: queries and every cache row bit for bit, and the cache
// rows outside the block untouched.
TEST(CudaDrafter, TheQkvHeadsKernelGivesTheBitsOfNormRopeAndScatter) {
  LS_SKIP_WITHOUT_DEVICE();
  using ls::cuda::testing::download;
  using ls::cuda::testing::upload;
  std::mt19937 rng(4242);
  for (const int head_dim : {64, 128}) {
    for (const bool neox : {false, true}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + (neox ? " neox" : " interleaved"));
      const int gamma = 5, heads = 6, kv_heads = 2, layers = 2, layer = 1, count = 3;
      const int64_t rows = static_cast<int64_t>(count) * gamma, q = heads * head_dim, kv = kv_heads * head_dim;
      const int64_t lengths[] = {0, 17, 40}, capacity = 64;
      auto qkv = upload(random_values(rng, rows * (q + 2 * kv), 3.0f));
      auto q_norm = upload(random_floats(rng, head_dim, 0.5f, 1.5f));
      auto k_norm = upload(random_floats(rng, head_dim, 0.5f, 1.5f));
      std::vector<float> inv(head_dim / 2);
      for (int i = 0; i < head_dim / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / head_dim);
      auto inv_freq = upload(inv);
      std::vector<int32_t> position_values(rows);
      for (int64_t row = 0; row < rows; ++row) position_values[row] = static_cast<int32_t>(lengths[row / gamma] + row % gamma + 3);
      auto positions = upload(position_values);
      const std::vector<bf16> cache_start = random_values(rng, static_cast<size_t>(layers * capacity * kv), 1.0f);
      std::vector<ls::cuda::DeviceBuffer<bf16>> caches;
      for (int k = 0; k < 4 * count; ++k) caches.push_back(upload(cache_start));
      std::vector<cuda::DeviceBlockRequest> fused_requests, reference_requests;
      auto as_device = [](ls::cuda::DeviceBuffer<bf16>& buffer) { return reinterpret_cast<cuda::bf16_t*>(buffer.data()); };
      for (int i = 0; i < count; ++i) {
        fused_requests.push_back({as_device(caches[4 * i]), as_device(caches[4 * i + 1]), lengths[i], capacity});
        reference_requests.push_back({as_device(caches[4 * i + 2]), as_device(caches[4 * i + 3]), lengths[i], capacity});
      }
      auto fused_device = upload(fused_requests);
      auto reference_device = upload(reference_requests);
      // Reference: split the stacked rows on the host, then the unfused launches.
      const std::vector<bf16> stacked = download(qkv, static_cast<size_t>(rows * (q + 2 * kv)));
      std::vector<bf16> q_part, k_part, v_part;
      for (int64_t row = 0; row < rows; ++row) {
        const bf16* from = stacked.data() + row * (q + 2 * kv);
        q_part.insert(q_part.end(), from, from + q);
        k_part.insert(k_part.end(), from + q, from + q + kv);
        v_part.insert(v_part.end(), from + q + kv, from + q + 2 * kv);
      }
      auto ref_q = upload(q_part), ref_k = upload(k_part), ref_v = upload(v_part);
      auto* rq = reinterpret_cast<cuda::bf16_t*>(ref_q.data());
      auto* rk = reinterpret_cast<cuda::bf16_t*>(ref_k.data());
      ASSERT_TRUE(cuda::rms_norm(rq, rows * heads, head_dim, q_norm.data(), 1e-5f, rq, nullptr).ok());
      ASSERT_TRUE(cuda::rope_rotate(rq, rows, heads, head_dim, positions.data(), 0, inv_freq.data(), neox, nullptr).ok());
      ASSERT_TRUE(cuda::rms_norm(rk, rows * kv_heads, head_dim, k_norm.data(), 1e-5f, rk, nullptr).ok());
      ASSERT_TRUE(cuda::rope_rotate(rk, rows, kv_heads, head_dim, positions.data(), 0, inv_freq.data(), neox, nullptr).ok());
      ASSERT_TRUE(cuda::scatter_block_kv(rk, reinterpret_cast<cuda::bf16_t*>(ref_v.data()), reference_device.data(),
                                         count, gamma, static_cast<int>(kv), layer, nullptr)
                      .ok());
      auto queries = ls::cuda::testing::poisoned<bf16>(static_cast<size_t>(rows * q));
      cuda::QkvHeads args;
      args.qkv = reinterpret_cast<const cuda::bf16_t*>(qkv.data());
      args.rows = rows;
      args.gamma = gamma;
      args.heads = heads;
      args.kv_heads = kv_heads;
      args.head_dim = head_dim;
      args.q_norm = q_norm.data();
      args.k_norm = k_norm.data();
      args.eps = 1e-5f;
      args.positions = positions.data();
      args.inv_freq = inv_freq.data();
      args.neox = neox;
      args.requests = fused_device.data();
      args.layer = layer;
      args.queries = reinterpret_cast<cuda::bf16_t*>(queries.data());
      ASSERT_TRUE(cuda::qkv_heads(args, nullptr).ok());
      const std::vector<bf16> fused_q = download(queries, static_cast<size_t>(rows * q));
      const std::vector<bf16> reference_q = download(ref_q, static_cast<size_t>(rows * q));
      EXPECT_EQ(count_bitwise_equal(fused_q, reference_q), static_cast<int>(rows * q)) << "queries";
      int differing_cache = 0, written = 0;
      for (int k = 0; k < 2 * count; ++k) {
        const std::vector<bf16> fused = download(caches[(k / 2) * 4 + k % 2], cache_start.size());
        const std::vector<bf16> reference = download(caches[(k / 2) * 4 + 2 + k % 2], cache_start.size());
        differing_cache += static_cast<int>(cache_start.size()) - count_bitwise_equal(fused, reference);
        written += static_cast<int>(cache_start.size()) - count_bitwise_equal(fused, cache_start);
      }
      EXPECT_EQ(differing_cache, 0) << "cache bits differ from the unfused scatter";
      EXPECT_GT(written, static_cast<int>(rows * kv)) << "the block K/V reached the caches";
    }
  }
}

// residual_norm against add_residual + rms_norm, and swiglu_stacked against swiglu, on fresh random rows with the
// outputs poisoned: the residual and SwiGLU bit for bit; the norm within one bf16 rounding (its double sum of
// squares is a CTA tree here, a warp's there) and nearly always bitwise.
TEST(CudaDrafter, TheResidualNormAndStackedSwigluKernelsGiveTheUnfusedBits) {
  LS_SKIP_WITHOUT_DEVICE();
  using ls::cuda::testing::download;
  using ls::cuda::testing::upload;
  std::mt19937 rng(77);
  const int64_t rows = 13, width = 2048;
  const std::vector<bf16> x_start = random_values(rng, rows * width, 4.0f);
  auto delta = upload(random_values(rng, rows * width, 1.0f));
  auto weight = upload(random_floats(rng, width, 0.5f, 1.5f));
  auto fused_x = upload(x_start), reference_x = upload(x_start);
  auto fused_y = ls::cuda::testing::poisoned<bf16>(rows * width);
  auto reference_y = ls::cuda::testing::poisoned<bf16>(rows * width);
  auto* d = reinterpret_cast<const cuda::bf16_t*>(delta.data());
  ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(fused_x.data()), d, rows, width, weight.data(), 1e-5f,
                                  reinterpret_cast<cuda::bf16_t*>(fused_y.data()), nullptr)
                  .ok());
  auto* rx = reinterpret_cast<cuda::bf16_t*>(reference_x.data());
  ASSERT_TRUE(cuda::add_residual(rx, d, rows * width, nullptr).ok());
  ASSERT_TRUE(cuda::rms_norm(rx, rows, width, weight.data(), 1e-5f, reinterpret_cast<cuda::bf16_t*>(reference_y.data()),
                             nullptr)
                  .ok());
  const std::vector<bf16> fx = download(fused_x, rows * width), rxs = download(reference_x, rows * width);
  EXPECT_EQ(count_bitwise_equal(fx, rxs), static_cast<int>(rows * width)) << "residual";
  const std::vector<bf16> fy = download(fused_y, rows * width), ry = download(reference_y, rows * width);
  double worst = 0;
  for (size_t i = 0; i < fy.size(); ++i) {
    const float a = bf16_to_float(fy[i]), b = bf16_to_float(ry[i]);
    ASSERT_TRUE(std::isfinite(a)) << "norm output " << i << " unwritten";
    worst = std::max(worst, std::fabs(static_cast<double>(a) - b) / std::max(std::fabs(static_cast<double>(b)), 1e-3));
  }
  EXPECT_LE(worst, 1.0 / 128) << "more than one bf16 rounding apart";
  EXPECT_GE(count_bitwise_equal(fy, ry) * 100, static_cast<int>(rows * width) * 99);
  // A null delta normalises x as it is.
  auto plain_y = ls::cuda::testing::poisoned<bf16>(rows * width);
  ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(reference_x.data()), nullptr, rows, width,
                                  weight.data(), 1e-5f, reinterpret_cast<cuda::bf16_t*>(plain_y.data()), nullptr)
                  .ok());
  EXPECT_GE(count_bitwise_equal(download(plain_y, rows * width), ry) * 100, static_cast<int>(rows * width) * 99);
  EXPECT_EQ(count_bitwise_equal(download(reference_x, rows * width), rxs), static_cast<int>(rows * width));

  const int64_t ff = 384;
  const std::vector<bf16> gate_up_values = random_values(rng, rows * 2 * ff, 6.0f);
  std::vector<bf16> gate_values, up_values;
  for (int64_t row = 0; row < rows; ++row) {
    gate_values.insert(gate_values.end(), gate_up_values.begin() + row * 2 * ff, gate_up_values.begin() + row * 2 * ff + ff);
    up_values.insert(up_values.end(), gate_up_values.begin() + row * 2 * ff + ff, gate_up_values.begin() + (row + 1) * 2 * ff);
  }
  auto gate_up = upload(gate_up_values), gate = upload(gate_values), up = upload(up_values);
  auto stacked_out = ls::cuda::testing::poisoned<bf16>(rows * ff), plain_out = ls::cuda::testing::poisoned<bf16>(rows * ff);
  ASSERT_TRUE(cuda::swiglu_stacked(reinterpret_cast<const cuda::bf16_t*>(gate_up.data()), rows, ff,
                                   reinterpret_cast<cuda::bf16_t*>(stacked_out.data()), nullptr)
                  .ok());
  ASSERT_TRUE(cuda::swiglu(reinterpret_cast<const cuda::bf16_t*>(gate.data()),
                           reinterpret_cast<const cuda::bf16_t*>(up.data()), rows * ff,
                           reinterpret_cast<cuda::bf16_t*>(plain_out.data()), nullptr)
                  .ok());
  EXPECT_EQ(count_bitwise_equal(download(stacked_out, rows * ff), download(plain_out, rows * ff)),
            static_cast<int>(rows * ff));
}

// The tile and split block attention variants against the warp one on the same random caches (3 requests,
// contexts 5 / 40 / 300, layer 1 of 2; the split scratch and every output poisoned first): every output written
// and finite, and each within a few bf16 ulps of the warp kernel (they differ only in how fp32 sums over keys are
// grouped; the split one also combines its chunks' sums of exponentials). Split runs 32 chunks here, so a chunk
// of the 12-key context is empty or holds a single key.
TEST(CudaDrafter, TheTileAndSplitAttentionKernelsAgreeWithTheWarpKernel) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const int head_dim : {64, 32}) {
    const int gamma = 7, layers = 2, layer = 1;
    const cuda::AttentionDims dims{8, 2, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
    ASSERT_TRUE(cuda::block_attention_tile_supported(gamma, dims));
    const int64_t kv = static_cast<int64_t>(dims.kv_heads) * head_dim;
    const int64_t lengths[] = {5, 40, 300};
    std::mt19937 rng(99 + head_dim);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto random_bf16 = [&](size_t count, float scale) {
      std::vector<bf16> values(count);
      for (bf16& value : values) value = float_to_bf16(scale * uniform(rng));
      return values;
    };
    std::vector<ls::cuda::DeviceBuffer<bf16>> caches;
    std::vector<cuda::DeviceBlockRequest> requests;
    for (int64_t length : lengths) {
      const int64_t capacity = length + gamma + 3;
      for (int which = 0; which < 2; ++which) {
        const std::vector<bf16> values = random_bf16(static_cast<size_t>(layers * capacity * kv), 2.0f);
        caches.emplace_back();
        ASSERT_TRUE(caches.back().allocate(values.size()).ok());
        cudaMemcpy(caches.back().data(), values.data(), values.size() * 2, cudaMemcpyHostToDevice);
      }
      const size_t n = caches.size();
      requests.push_back(cuda::DeviceBlockRequest{reinterpret_cast<cuda::bf16_t*>(caches[n - 2].data()),
                                                  reinterpret_cast<cuda::bf16_t*>(caches[n - 1].data()), length,
                                                  capacity});
    }
    const int count = static_cast<int>(requests.size());
    const size_t outputs = static_cast<size_t>(count) * gamma * dims.heads * head_dim;
    const std::vector<bf16> queries = random_bf16(outputs, 2.0f);
    ls::cuda::DeviceBuffer<bf16> device_queries, warp_out, tile_out, split_out;
    ls::cuda::DeviceBuffer<cuda::DeviceBlockRequest> device_requests;
    ASSERT_TRUE(device_queries.allocate(outputs).ok() && warp_out.allocate(outputs).ok() &&
                tile_out.allocate(outputs).ok() && split_out.allocate(outputs).ok() &&
                device_requests.allocate(requests.size()).ok());
    ls::cuda::DeviceBuffer<float> stats =
        ls::cuda::testing::poisoned<float>(cuda::split_attention_stat_floats(count, gamma, dims));
    ls::cuda::DeviceBuffer<float> partials =
        ls::cuda::testing::poisoned<float>(cuda::split_attention_partial_floats(count, gamma, dims));
    cudaMemset(split_out.data(), 0xff, outputs * 2);
    cudaMemcpy(device_queries.data(), queries.data(), outputs * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(device_requests.data(), requests.data(), requests.size() * sizeof(cuda::DeviceBlockRequest),
               cudaMemcpyHostToDevice);
    cudaMemset(warp_out.data(), 0xff, outputs * 2);
    cudaMemset(tile_out.data(), 0xff, outputs * 2);
    const auto* q = reinterpret_cast<const cuda::bf16_t*>(device_queries.data());
    ASSERT_TRUE(cuda::block_attention_warp(q, device_requests.data(), count, gamma, dims, layer,
                                           reinterpret_cast<cuda::bf16_t*>(warp_out.data()), nullptr)
                    .ok());
    ASSERT_TRUE(cuda::block_attention_tile(q, device_requests.data(), count, gamma, dims, layer,
                                           reinterpret_cast<cuda::bf16_t*>(tile_out.data()), nullptr)
                    .ok());
    ASSERT_TRUE(cuda::block_attention_split(q, device_requests.data(), count, gamma, dims, layer,
                                            cuda::SplitAttentionScratch{stats.data(), partials.data()},
                                            reinterpret_cast<cuda::bf16_t*>(split_out.data()), nullptr)
                    .ok());
    std::vector<bf16> warp(outputs), tile(outputs), split(outputs);
    ASSERT_EQ(cudaMemcpy(warp.data(), warp_out.data(), outputs * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(tile.data(), tile_out.data(), outputs * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(split.data(), split_out.data(), outputs * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (const auto& [name, other] : {std::pair{"tile", &tile}, std::pair{"split", &split}}) {
      double worst = 0;
      int bitwise = 0;
      for (size_t i = 0; i < outputs; ++i) {
        const float a = bf16_to_float((*other)[i]), b = bf16_to_float(warp[i]);
        ASSERT_TRUE(std::isfinite(a) && std::isfinite(b)) << name << " output " << i << " unwritten or non-finite";
        worst = std::max(worst, static_cast<double>(std::fabs(a - b)));
        bitwise += a == b;
      }
      std::printf("[ attention ] head_dim %d: %s vs warp worst |diff| %.3g, %d of %zu bitwise\n", head_dim, name,
                  worst, bitwise, outputs);
      EXPECT_LE(worst, 2e-2) << name;
      EXPECT_GE(bitwise * 10, static_cast<int>(outputs) * 8) << name;
    }
  }
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
