// The CUDA drafter's block attention kernels on fresh random caches, outputs poisoned first: the tile and split
// variants against the warp kernel, the one-launch split against the split, the head attention (session 9) against
// the split bit for bit.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/bf16.h"
#include "compute/cuda/cuda_util.h"
#include "cuda_drafter_attention_util.h"
#include "cuda_drafter_kernel_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark {
namespace {

using testing::count_bitwise_equal;
using testing::random_floats;
using testing::random_values;

// The tile and split block attention variants against the warp one on the same random caches (3 requests,
// contexts 5 / 40 / 300, layer 1 of 2; the split scratch and every output poisoned first): every output written
// and finite, and each within a few bf16 ulps of the warp kernel (they differ only in how fp32 sums over keys are
// grouped; the split one also combines its chunks' sums of exponentials). Split runs 32 chunks here, so a chunk
// of the 12-key context is empty or holds a single key. The two-launch split (ticketed combine) gives the
// three-launch bits.
TEST(CudaDrafter, TheTileAndSplitAttentionKernelsAgreeWithTheWarpKernelAndTheOneLaunchSplitGivesTheSplitBits) {
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
    // The two-launch split (the last CTA of each request and KV head adds the chunks) gives the three-launch bits,
    // twice on one set of tickets (each last CTA resets its ticket).
    auto tickets = ls::cuda::testing::upload(std::vector<unsigned int>(count * dims.kv_heads, 0u));
    for (int run = 0; run < 2; ++run) {
      auto two_launch_out = ls::cuda::testing::poisoned<bf16>(outputs);
      ASSERT_TRUE(cuda::block_attention_split(q, device_requests.data(), count, gamma, dims, layer,
                                              cuda::SplitAttentionScratch{stats.data(), partials.data(),
                                                                          tickets.data()},
                                              reinterpret_cast<cuda::bf16_t*>(two_launch_out.data()), nullptr)
                      .ok());
      const std::vector<bf16> two = ls::cuda::testing::download(two_launch_out, outputs);
      std::vector<bf16> three(outputs);
      ASSERT_EQ(cudaMemcpy(three.data(), split_out.data(), outputs * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(count_bitwise_equal(two, three), static_cast<int>(outputs)) << "run " << run;
      EXPECT_EQ(ls::cuda::testing::download(tickets, count * dims.kv_heads),
                std::vector<unsigned int>(count * dims.kv_heads, 0u));
    }
    // The one-launch split (a barrier of each pair's chunk CTAs between the phases) gives the three-launch bits, at
    // the automatic chunks and at 3 and 1, twice on one set of counters (each pair's last CTA resets its counter).
    if (cuda::block_attention_cooperative_supported(count, gamma, dims, 0)) {
      const int pairs = count * dims.kv_heads;
      auto barriers = ls::cuda::testing::upload(std::vector<unsigned int>(pairs + 1, 0u));
      for (const int chunks : {0, 3, 1}) {
        auto three_out = ls::cuda::testing::poisoned<bf16>(outputs);
        ASSERT_TRUE(cuda::block_attention_split(q, device_requests.data(), count, gamma, dims, layer,
                                                cuda::SplitAttentionScratch{stats.data(), partials.data(), nullptr,
                                                                            chunks},
                                                reinterpret_cast<cuda::bf16_t*>(three_out.data()), nullptr)
                        .ok());
        const std::vector<bf16> three = ls::cuda::testing::download(three_out, outputs);
        // The three launches with batched loads (session 8) give the same bits, stats and partials poisoned.
        {
          auto batched_out = ls::cuda::testing::poisoned<bf16>(outputs);
          cudaMemset(stats.data(), 0xff, cuda::split_attention_stat_floats(count, gamma, dims) * 4);
          cudaMemset(partials.data(), 0xff, cuda::split_attention_partial_floats(count, gamma, dims) * 4);
          cuda::SplitAttentionScratch scratch{stats.data(), partials.data(), nullptr, chunks};
          scratch.batched_loads = true;
          ASSERT_TRUE(cuda::block_attention_split(q, device_requests.data(), count, gamma, dims, layer, scratch,
                                                  reinterpret_cast<cuda::bf16_t*>(batched_out.data()), nullptr)
                          .ok());
          EXPECT_EQ(count_bitwise_equal(ls::cuda::testing::download(batched_out, outputs), three),
                    static_cast<int>(outputs))
              << "three launches, batched loads, chunks " << chunks;
        }
        for (int run = 0; run < 4; ++run) {
          const bool batched = run >= 2;  // the one launch with its loads one at a time, then batched
          auto one_out = ls::cuda::testing::poisoned<bf16>(outputs);
          cuda::SplitAttentionScratch scratch{stats.data(), partials.data(), nullptr, chunks, barriers.data()};
          scratch.batched_loads = batched;
          ASSERT_TRUE(cuda::block_attention_cooperative(q, device_requests.data(), count, gamma, dims, layer,
                                                        scratch, reinterpret_cast<cuda::bf16_t*>(one_out.data()),
                                                        nullptr)
                          .ok());
          const std::vector<bf16> one = ls::cuda::testing::download(one_out, outputs);
          EXPECT_EQ(count_bitwise_equal(one, three), static_cast<int>(outputs))
              << "chunks " << chunks << " run " << run << (batched ? " batched loads" : "");
          EXPECT_EQ(ls::cuda::testing::download(barriers, pairs + 1), std::vector<unsigned int>(pairs + 1, 0u));
        }
      }
      std::printf("[ attention ] head_dim %d: one-launch split and batched loads vs three launches checked at chunks "
                  "auto, 3, 1\n",
                  head_dim);
    } else {
      ADD_FAILURE() << "the one-launch split does not fit " << count << " requests on this device";
    }
    // Without counters it refuses by name.
    EXPECT_EQ(cuda::block_attention_cooperative(q, device_requests.data(), count, gamma, dims, layer,
                                                cuda::SplitAttentionScratch{stats.data(), partials.data()},
                                                reinterpret_cast<cuda::bf16_t*>(split_out.data()), nullptr)
                  .code(),
              ErrorCode::UnsupportedDraftShape);
    // Fewer chunks pinned (3, and 1: one chunk holds every key), outputs poisoned first.
    std::vector<bf16> split_pinned[2];
    for (int which = 0; which < 2; ++which) {
      auto pinned_out = ls::cuda::testing::poisoned<bf16>(outputs);
      cuda::SplitAttentionScratch pinned{stats.data(), partials.data()};
      pinned.chunks = which == 0 ? 3 : 1;
      ASSERT_TRUE(cuda::block_attention_split(q, device_requests.data(), count, gamma, dims, layer, pinned,
                                              reinterpret_cast<cuda::bf16_t*>(pinned_out.data()), nullptr)
                      .ok());
      split_pinned[which] = ls::cuda::testing::download(pinned_out, outputs);
    }
    std::vector<bf16> warp(outputs), tile(outputs), split(outputs);
    ASSERT_EQ(cudaMemcpy(warp.data(), warp_out.data(), outputs * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(tile.data(), tile_out.data(), outputs * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(split.data(), split_out.data(), outputs * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (const auto& [name, other] : {std::pair{"tile", &tile}, std::pair{"split", &split},
                                      std::pair{"split 3 chunks", &split_pinned[0]},
                                      std::pair{"split 1 chunk", &split_pinned[1]}}) {
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

// The head attention kernel (session 9: a CTA per request and query head over every key with the split's chunk
// arithmetic) against the three-launch split on the same random caches, outputs poisoned first: bit for bit at the
// automatic chunks and pinned 7, 3 and 1, for two head sizes and two group shapes (the 1.2B drafter's 32 / 8 heads at
// block 9), contexts 5 / 40 / 300 / 3000 (3000 keys take several score windows, and at one chunk a chunk spans
// windows), all requests at once and the longest alone (its automatic chunks differ). Shapes it does not take are
// refused by name.
TEST(CudaDrafter, TheHeadAttentionKernelGivesTheSplitBitsAtEveryChunkCountAndAcrossScoreWindows) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Shape {
    int gamma, heads, kv_heads, head_dim;
  };
  for (const Shape shape : {Shape{7, 8, 2, 64}, Shape{7, 8, 2, 32}, Shape{9, 32, 8, 64}}) {
    SCOPED_TRACE("block " + std::to_string(shape.gamma) + ", heads " + std::to_string(shape.heads) + " / " +
                 std::to_string(shape.kv_heads) + ", head_dim " + std::to_string(shape.head_dim));
    const int gamma = shape.gamma, layers = 2, layer = 1;
    const cuda::AttentionDims dims{shape.heads, shape.kv_heads, shape.head_dim,
                                   1.0f / std::sqrt(static_cast<float>(shape.head_dim))};
    ASSERT_TRUE(cuda::block_attention_head_supported(gamma, dims));
    ASSERT_TRUE(cuda::block_attention_tile_supported(gamma, dims));
    const int64_t lengths[] = {3000, 5, 40, 300};
    std::mt19937 rng(7 + shape.head_dim + shape.heads);
    testing::AttentionInputs in = testing::random_attention_inputs(rng, lengths, gamma, layers, dims);
    const int most = static_cast<int>(std::size(lengths));
    for (const int count : {most, 1}) {
      const size_t outputs = static_cast<size_t>(count) * gamma * dims.heads * dims.head_dim;
      for (const auto& [chunks, stage] : {std::pair{0, 128}, std::pair{7, 128}, std::pair{3, 128}, std::pair{1, 128},
                                          std::pair{0, 256}, std::pair{3, 256}, std::pair{1, 256}}) {
        SCOPED_TRACE(std::to_string(count) + " requests, chunks " + std::to_string(chunks) + ", stages of " +
                     std::to_string(stage) + " keys");
        auto split_out = ls::cuda::testing::poisoned<bf16>(outputs);
        auto head_out = ls::cuda::testing::poisoned<bf16>(outputs);
        ASSERT_TRUE(cuda::block_attention_split(in.q(), in.requests.data(), count, gamma, dims, layer,
                                                cuda::SplitAttentionScratch{in.stats.data(), in.partials.data(),
                                                                            nullptr, chunks},
                                                reinterpret_cast<cuda::bf16_t*>(split_out.data()), nullptr)
                        .ok());
        const Status head = cuda::block_attention_head(in.q(), in.requests.data(), count, gamma, dims, layer, chunks,
                                                       reinterpret_cast<cuda::bf16_t*>(head_out.data()), nullptr,
                                                       stage);
        ASSERT_TRUE(head.ok()) << head.to_string();
        const testing::BitwiseCount count = testing::count_against_split(split_out, head_out, outputs);
        EXPECT_EQ(count.equal, static_cast<int>(outputs)) << "first difference at output " << count.first_difference;
      }
    }
    std::printf("[ attention ] head kernel vs split: block %d, heads %d / %d, head_dim %d bitwise at chunks auto, 7, "
                "3, 1 (128-key stages) and auto, 3, 1 (256)\n",
                gamma, dims.heads, dims.kv_heads, dims.head_dim);
  }
  // Refused by name: a head size it is not built for, a block past 32 slots.
  const cuda::AttentionDims odd{8, 2, 16, 0.25f};
  const Status refused = cuda::block_attention_head(nullptr, nullptr, 1, 7, odd, 0, 0, nullptr, nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::UnsupportedDraftShape);
  EXPECT_NE(refused.to_string().find("head_dim 16"), std::string::npos) << refused.to_string();
  const Status odd_stage = cuda::block_attention_head(nullptr, nullptr, 1, 7, cuda::AttentionDims{8, 2, 64, 0.125f}, 0,
                                                      0, nullptr, nullptr, 192);
  EXPECT_EQ(odd_stage.code(), ErrorCode::InvalidArgument) << odd_stage.to_string();
  EXPECT_FALSE(cuda::block_attention_head_supported(33, cuda::AttentionDims{8, 2, 64, 0.125f}));
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
