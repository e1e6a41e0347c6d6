// Random block caches and the bitwise compare shared by the CUDA drafter's attention kernel tests (head and row
// kernels against the three-launch split).
#pragma once
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "base/bf16.h"
#include "cuda_drafter_kernel_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::testing {

// Per request: random K and V caches of `layers` layers of `kv` values a row, capacity length + gamma + 5.
struct BlockCaches {
  std::vector<ls::cuda::DeviceBuffer<bf16>> caches;
  std::vector<cuda::DeviceBlockRequest> requests;
};
inline BlockCaches random_block_caches(std::mt19937& rng, std::span<const int64_t> lengths, int gamma, int layers,
                                       int64_t kv) {
  BlockCaches out;
  for (const int64_t length : lengths) {
    const int64_t capacity = length + gamma + 5;
    for (int which = 0; which < 2; ++which) {
      out.caches.push_back(
          ls::cuda::testing::upload(random_values(rng, static_cast<size_t>(layers * capacity * kv), 2.0f)));
    }
    const size_t n = out.caches.size();
    out.requests.push_back(cuda::DeviceBlockRequest{reinterpret_cast<cuda::bf16_t*>(out.caches[n - 2].data()),
                                                    reinterpret_cast<cuda::bf16_t*>(out.caches[n - 1].data()),
                                                    length, capacity});
  }
  return out;
}

// Random caches for requests of these context lengths, random queries for all of them and the split's scratch for
// all of them (poisoned), on the device.
struct AttentionInputs {
  BlockCaches block;
  ls::cuda::DeviceBuffer<cuda::DeviceBlockRequest> requests;
  ls::cuda::DeviceBuffer<bf16> queries;
  ls::cuda::DeviceBuffer<float> stats, partials;
  const cuda::bf16_t* q() const { return reinterpret_cast<const cuda::bf16_t*>(queries.data()); }
};
inline AttentionInputs random_attention_inputs(std::mt19937& rng, std::span<const int64_t> lengths, int gamma,
                                               int layers, cuda::AttentionDims dims) {
  AttentionInputs in;
  in.block = random_block_caches(rng, lengths, gamma, layers, static_cast<int64_t>(dims.kv_heads) * dims.head_dim);
  in.requests = ls::cuda::testing::upload(in.block.requests);
  const int most = static_cast<int>(lengths.size());
  const size_t queries = static_cast<size_t>(most) * gamma * dims.heads * dims.head_dim;
  in.queries = ls::cuda::testing::upload(random_values(rng, queries, 2.0f));
  in.stats = ls::cuda::testing::poisoned<float>(cuda::split_attention_stat_floats(most, gamma, dims));
  in.partials = ls::cuda::testing::poisoned<float>(cuda::split_attention_partial_floats(most, gamma, dims));
  return in;
}

// Outputs of the split (the reference, every one written and finite) and of another kernel: how many are bitwise
// equal, and the first index that is not (outputs when none).
struct BitwiseCount {
  int equal = 0;
  size_t first_difference = 0;
};
inline BitwiseCount count_against_split(const ls::cuda::DeviceBuffer<bf16>& split_out,
                                        const ls::cuda::DeviceBuffer<bf16>& other_out, size_t outputs) {
  const std::vector<bf16> split = ls::cuda::testing::download(split_out, outputs);
  const std::vector<bf16> other = ls::cuda::testing::download(other_out, outputs);
  BitwiseCount count{0, outputs};
  for (size_t i = 0; i < outputs; ++i) {
    EXPECT_TRUE(std::isfinite(bf16_to_float(split[i]))) << "split output " << i << " unwritten or non-finite";
    if (count.first_difference == outputs && split[i].bits != other[i].bits) count.first_difference = i;
  }
  count.equal = count_bitwise_equal(other, split);
  return count;
}

}  // namespace ls::dspark::testing
#endif  // LS_HAVE_CUDA
