// Fixed random inputs of one request's Markov scan on the device (W1, W2, U, Hf, a confidence head), shared by the
// scan tests that call the scan kernels directly (the split pick's, the persistent scan's session-14 paths').
#pragma once
#ifdef LS_HAVE_CUDA

#include <cstdint>
#include <random>
#include <vector>

#include "draft/dspark/cuda/draft_kernels.h"
#include "cuda_test_util.h"

namespace ls::dspark::cuda {

struct ScanFixture {
  ScanShape shape;
  ls::cuda::DeviceBuffer<bf16> w1, w2, final_hidden;
  ls::cuda::DeviceBuffer<float> base, confidence_weight, temperatures;
  float bias = 0.1f;

  ScanFixture(int64_t vocab, int rank, int hidden, int gamma, std::mt19937& rng) {
    using ls::cuda::testing::to_bf16;
    using ls::cuda::testing::upload;
    shape = ScanShape{vocab, rank, hidden, gamma, true};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto values = [&](size_t count, float scale) {
      std::vector<float> out(count);
      for (float& v : out) v = scale * normal(rng);
      return out;
    };
    w1 = upload(to_bf16(values(static_cast<size_t>(vocab) * rank, 0.5f)));
    w2 = upload(to_bf16(values(static_cast<size_t>(vocab) * rank, 0.3f)));
    final_hidden = upload(to_bf16(values(static_cast<size_t>(gamma) * hidden, 1.0f)));
    base = upload(values(static_cast<size_t>(gamma) * vocab, 2.0f));
    confidence_weight = upload(values(static_cast<size_t>(hidden + rank), 0.2f));
    std::vector<float> t(static_cast<size_t>(gamma));
    for (int slot = 0; slot < gamma; ++slot) t[slot] = 0.8f + 0.1f * static_cast<float>(slot);
    temperatures = upload(t);
  }
};

}  // namespace ls::dspark::cuda

#endif  // LS_HAVE_CUDA
