// The row attention kernel (session 12: a CTA per request, query head and block row, every step short) and its
// grouped variant (session 19: 2 or 4 query heads of a KV head a CTA) against the three-launch split on fresh random
// caches, outputs poisoned first, bit for bit; a planted fault (the first chunk left out of the sum) must differ.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/bf16.h"
#include "compute/cuda/cuda_util.h"
#include "cuda_drafter_attention_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark {
namespace {

// 1, 2, 5, 16 and 64 requests (the first of 64 random contexts of 1..600 keys, one of 5000 so scores take two
// windows (three in the grouped kernel's 2048-score windows) and, at one chunk, a chunk spans windows), chunks
// automatic and pinned 7, 3 and 1, for two head sizes, the 1.2B drafter's 32 / 8 heads at block 9 and the nano's
// 6 / 2 (the first 160 keys from shared memory in the row kernel, 256 / 512 in the grouped one at 2 / 3-4 heads a
// CTA), each kernel planted; seeds fresh each run (printed).
TEST(CudaDrafter, TheRowAttentionKernelGivesTheSplitBitsAtOneToSixtyFourRequests) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Shape {
    int gamma, heads, kv_heads, head_dim;
  };
  const unsigned seed = std::random_device{}();
  std::printf("[ attention ] row kernel seed %u\n", seed);
  for (const Shape shape : {Shape{9, 32, 8, 64}, Shape{7, 8, 2, 64}, Shape{7, 8, 2, 32}, Shape{7, 6, 2, 64}}) {
    SCOPED_TRACE("block " + std::to_string(shape.gamma) + ", heads " + std::to_string(shape.heads) + " / " +
                 std::to_string(shape.kv_heads) + ", head_dim " + std::to_string(shape.head_dim) + ", seed " +
                 std::to_string(seed));
    const int gamma = shape.gamma, layers = 2, layer = 1, most = 64;
    const cuda::AttentionDims dims{shape.heads, shape.kv_heads, shape.head_dim,
                                   1.0f / std::sqrt(static_cast<float>(shape.head_dim))};
    ASSERT_TRUE(cuda::block_attention_row_supported(gamma, dims));
    // Query heads a CTA: 1 the row kernel, else the grouped kernel for every group that divides the heads of a KV head.
    std::vector<int> groups = {1};
    for (const int group : {2, 3, 4}) {
      if ((shape.heads / shape.kv_heads) % group != 0) continue;
      ASSERT_TRUE(cuda::block_attention_row_group_supported(gamma, dims, group)) << group << " heads a CTA";
      groups.push_back(group);
    }
    std::mt19937 rng(seed + shape.head_dim + shape.heads);
    std::uniform_int_distribution<int64_t> context(1, 600);
    std::vector<int64_t> lengths(most);
    for (int i = 0; i < most; ++i) lengths[i] = i == 3 ? 5000 : context(rng);
    testing::AttentionInputs in = testing::random_attention_inputs(rng, lengths, gamma, layers, dims);
    for (const int count : {1, 2, 5, 16, 64}) {
      const size_t outputs = static_cast<size_t>(count) * gamma * dims.heads * dims.head_dim;
      for (const int chunks : {0, 7, 3, 1}) {
        SCOPED_TRACE(std::to_string(count) + " requests, chunks " + std::to_string(chunks));
        auto split_out = ls::cuda::testing::poisoned<bf16>(outputs);
        ASSERT_TRUE(cuda::block_attention_split(in.q(), in.requests.data(), count, gamma, dims, layer,
                                                cuda::SplitAttentionScratch{in.stats.data(), in.partials.data(),
                                                                            nullptr, chunks},
                                                reinterpret_cast<cuda::bf16_t*>(split_out.data()), nullptr)
                        .ok());
        for (const int group : groups)
        for (const bool planted : {false, true}) {
          if (planted && chunks != 0) continue;
          SCOPED_TRACE(std::string(planted ? "planted" : "not planted") + ", query heads a CTA " +
                       std::to_string(group));
          auto row_out = ls::cuda::testing::poisoned<bf16>(outputs);
          auto* to = reinterpret_cast<cuda::bf16_t*>(row_out.data());
          // group 1: the row kernel; 2 and 4: the grouped kernel (session 19).
          const Status row =
              group == 1 ? cuda::block_attention_row(in.q(), in.requests.data(), count, gamma, dims, layer, chunks,
                                                     to, nullptr, planted)
                         : cuda::block_attention_row_group(in.q(), in.requests.data(), count, gamma, dims, layer,
                                                           chunks, group, to, nullptr, planted);
          ASSERT_TRUE(row.ok()) << row.to_string();
          const testing::BitwiseCount count = testing::count_against_split(split_out, row_out, outputs);
          if (planted) {
            EXPECT_LT(count.equal, static_cast<int>(outputs)) << "the planted fault (first chunk left out) unseen";
          } else {
            EXPECT_EQ(count.equal, static_cast<int>(outputs))
                << "first difference at output " << count.first_difference;
          }
        }
      }
    }
    std::printf("[ attention ] row kernel and grouped row kernel (2, 3, 4 heads a CTA where they divide) vs split: block %d, heads %d / %d, "
                "head_dim %d bitwise at 1 / 2 / 5 / 16 / 64 requests, chunks auto, 7, 3, 1; planted first chunk red\n",
                gamma, dims.heads, dims.kv_heads, dims.head_dim);
  }
  // Refused by name: a head size it is not built for.
  const Status refused = cuda::block_attention_row(nullptr, nullptr, 1, 7, cuda::AttentionDims{8, 2, 16, 0.25f}, 0,
                                                   0, nullptr, nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::UnsupportedDraftShape);
  EXPECT_NE(refused.to_string().find("head_dim 16"), std::string::npos) << refused.to_string();
  EXPECT_FALSE(cuda::block_attention_row_supported(33, cuda::AttentionDims{8, 2, 64, 0.125f}));
  // The grouped kernel refuses a group that does not divide the query heads of a KV head, by name.
  EXPECT_FALSE(cuda::block_attention_row_group_supported(7, cuda::AttentionDims{6, 2, 64, 0.125f}, 2));
  EXPECT_FALSE(cuda::block_attention_row_group_supported(7, cuda::AttentionDims{8, 2, 64, 0.125f}, 3));
  const Status grouped = cuda::block_attention_row_group(nullptr, nullptr, 1, 7, cuda::AttentionDims{8, 4, 64, 0.125f},
                                                         0, 0, 4, nullptr, nullptr);
  EXPECT_EQ(grouped.code(), ErrorCode::UnsupportedDraftShape);
  EXPECT_NE(grouped.to_string().find("4 of 2 query heads"), std::string::npos) << grouped.to_string();
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
