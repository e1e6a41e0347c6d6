// drafter_bench's shared setup: the drafter shapes, the embedding-only target a drafter loads against, the context
// taps absorbed before timing, and the CUDA half of the bench (drafter_bench_cuda.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/hash.h"
#include "base/thread_pool.h"
#include "compute/ops.h"
#include "model/target.h"
#ifdef LS_HAVE_CUDA
#include "compute/cuda/cuda_util.h"
#include "drafter_rounds.h"
#endif

namespace ls::bench {

struct Shape {
  std::string name;
  int vocab, hidden, layers, heads, kv_heads, head_dim, ffn, block, rank, target_layers;
  std::vector<int> taps;
};

inline const Shape kShapes[] = {
    {"lfm2.5-1.2b", 65536, 2048, 5, 32, 8, 64, 6144, 9, 256, 16, {2, 5, 8, 11, 14}},
    {"lfm2.5-8b-a1b", 128000, 2048, 5, 32, 8, 64, 6144, 9, 256, 24, {2, 6, 10, 14, 18}},
    {"small", 16384, 512, 2, 8, 4, 64, 1536, 9, 64, 16, {2, 5, 8, 11, 14}},
};

// The target's tied embedding/head as bf16 (what a served target holds), on its own thread pool.
class BenchTarget final : public Target {
 public:
  BenchTarget(const Shape& shape, int threads) : pool_(threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr) {
    facts_.vocab_size = shape.vocab;
    facts_.hidden_size = shape.hidden;
    facts_.num_layers = shape.target_layers;
    embedding_.resize(static_cast<size_t>(shape.vocab) * shape.hidden);
    for (size_t i = 0; i < embedding_.size(); ++i)
      embedding_[i] = float_to_bf16(static_cast<float>(uniform_open01(splitmix64(i + 77)) * 0.2 - 0.1));
  }
  const TargetFacts& facts() const override { return facts_; }
#ifdef LS_HAVE_CUDA
  // Puts E on the CUDA device, as a CUDA target holds it (the drafter shares it through device_embedding()).
  Status upload_embedding() {
    LS_RETURN_IF_ERROR(device_embedding_.allocate(embedding_.size()));
    LS_CUDA_TRY(cudaMemcpy(device_embedding_.data(), embedding_.data(), embedding_.size() * sizeof(bf16),
                           cudaMemcpyHostToDevice));
    return ok_status();
  }
  const void* device_embedding() const override { return device_embedding_.data(); }
#endif
  Status set_taps(std::span<const int>) override { return ok_status(); }
  Result<Verified> forward(std::span<const Window>) override { return Status(ErrorCode::Internal, "no forward"); }
  Status commit(StreamId, int) override { return ok_status(); }
  int64_t committed_length(StreamId) const override { return 0; }
  void release(StreamId) override {}
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override {
    const size_t d = static_cast<size_t>(facts_.hidden_size);
    for (size_t row = 0; row < tokens.size(); ++row)
      for (size_t j = 0; j < d; ++j) out[row * d + j] = bf16_to_float(embedding_[tokens[row] * d + j]);
    return ok_status();
  }
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override {
    const compute::Matrix matrix{nullptr, embedding_.data(), nullptr, facts_.vocab_size, facts_.hidden_size};
    compute::matmul(compute::OpContext{pool_.get(), compute::NumericMode::Fp32}, hidden.data(), rows, matrix,
                    out.data());
    return ok_status();
  }

 private:
  std::unique_ptr<ThreadPool> pool_;
  TargetFacts facts_;
  std::vector<bf16> embedding_;
#ifdef LS_HAVE_CUDA
  cuda::DeviceBuffer<bf16> device_embedding_;
#endif
};

inline std::vector<float> bench_taps(int64_t rows, int64_t width) {
  std::vector<float> taps(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = static_cast<float>(2 * uniform_open01(splitmix64(i + 5)) - 1);
  return taps;
}

#ifdef LS_HAVE_CUDA
// The CUDA drafter: load, absorb of the context, then draft passes by streams (1..64) and depth, device times, or
// (rounds set) lanes-like rounds; flags as drafter_bench's usage says. Returns the process exit code.
int run_cuda(const Shape& shape, const std::string& dir, BenchTarget& target, int context, int repeats,
             const std::string& graphs, const std::string& attention, const std::string& scan,
             const std::string& engine_gemms, const std::string& tuned_gemms, const std::string& skinny,
             const std::string& launch, bool profile, const std::string& buckets, const std::string& pick,
             const std::vector<int>& attention_chunks, const std::vector<int>& skinny_parts,
             const std::vector<int>& stream_counts, const std::string& loads_pin, const RoundOptions* rounds,
             int bits, nlohmann::json& results);
// --int8-kernels: the drafter's GEMMs one by one, bf16 against the int8 GEMM (drafter_bench_int8.cpp).
int run_int8_kernels(const Shape& shape, const std::vector<int>& row_counts, int repeats, nlohmann::json& results);
#endif

}  // namespace ls::bench
