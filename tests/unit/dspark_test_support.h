// Test support for the DSpark drafter: a target that is only an embedding/head, random drafter checkpoints, temp dirs.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "compute/ops.h"
#include "draft/drafter.h"
#include "draft/dspark/config.h"
#include "draft/dspark/weights.h"
#include "io/safetensors.h"
#include "base/thread_pool.h"
#include "model/target.h"

namespace ls::dspark::testing {

// A Target that only has the tied embedding E [vocab, hidden] (fp32): embed() gathers rows, head() is fp32 h @ E^T.
// forward/commit/set_taps/release are counted, so a test can show the drafter never touched the target's state.
class EmbeddingTarget final : public Target {
 public:
  EmbeddingTarget(std::vector<float> embedding, int vocab, int hidden, int layers) : embedding_(std::move(embedding)) {
    facts_.vocab_size = vocab;
    facts_.hidden_size = hidden;
    facts_.num_layers = layers;
    facts_.max_rows = 64;
    facts_.exact_width = 16;
  }

  const TargetFacts& facts() const override { return facts_; }
  Status set_taps(std::span<const int>) override {
    ++state_calls;
    return ok_status();
  }
  Result<Verified> forward(std::span<const Window>) override {
    ++state_calls;
    return Status(ErrorCode::Internal, "EmbeddingTarget has no forward");
  }
  Status commit(StreamId, int) override {
    ++state_calls;
    return ok_status();
  }
  int64_t committed_length(StreamId) const override { return 0; }
  void release(StreamId) override { ++state_calls; }
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override {
    const int d = facts_.hidden_size;
    if (out.size() != tokens.size() * static_cast<size_t>(d)) return Status(ErrorCode::InvalidArgument, "embed size");
    for (size_t row = 0; row < tokens.size(); ++row)
      std::copy_n(embedding_.data() + static_cast<size_t>(tokens[row]) * d, d, out.data() + row * d);
    return ok_status();
  }
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override {
    const compute::Matrix matrix{embedding_.data(), nullptr, nullptr, facts_.vocab_size, facts_.hidden_size};
    compute::matmul(compute::OpContext{}, hidden.data(), rows, matrix, out.data());
    return ok_status();
  }

  ThreadPool* cpu_pool() const override { return pool; }

  int state_calls = 0;  // calls that would change a real target's state
  ThreadPool* pool = nullptr;  // the pool a CPU target would share with its drafter, or none

 private:
  std::vector<float> embedding_;
  TargetFacts facts_;
};

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dspark_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A small drafter config in LiquidAI's layout (all sizes small enough for fast tests).
inline nlohmann::json small_drafter_config(int vocab = 96, int hidden = 32, int layers = 2, int block = 4,
                                           int markov_rank = 8) {
  return nlohmann::json{
      {"architectures", {"Lfm2DSparkDraftModel"}},
      {"model_type", "qwen3"},
      {"hidden_size", hidden},
      {"num_hidden_layers", layers},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 16},
      {"intermediate_size", 48},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"vocab_size", vocab},
      {"rope_theta", 1e6},
      {"block_size", block},
      {"dflash_config", {{"mask_token_id", vocab - 1}, {"target_layer_ids", {0, 2}}, {"num_target_layers", 4}}},
      {"markov_rank", markov_rank},
      {"markov_head_type", "vanilla"},
      {"rope_is_neox_style", false},
      {"enable_confidence_head", true}};
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

// Random bf16 weights for every tensor of `names`/`shapes` (norm gains near 1, matrices ~ U(-scale, scale)).
struct RandomTensor {
  std::string name;
  std::vector<int64_t> shape;
};

inline Status write_random_checkpoint(const std::string& path, const std::vector<RandomTensor>& tensors,
                                      uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<bf16>> storage;
  std::vector<io::TensorToWrite> writes;
  storage.reserve(tensors.size());
  for (const RandomTensor& tensor : tensors) {
    int64_t count = 1;
    for (int64_t dim : tensor.shape) count *= dim;
    const bool gain = tensor.shape.size() == 1 && tensor.name.find("norm") != std::string::npos;
    const float scale = tensor.shape.size() == 2 ? 1.5f / std::sqrt(static_cast<float>(tensor.shape[1])) : 0.2f;
    std::uniform_real_distribution<float> uniform(-scale, scale);
    std::vector<bf16> values(static_cast<size_t>(count));
    for (bf16& value : values) value = float_to_bf16(gain ? 1.0f + uniform(rng) : uniform(rng));
    storage.push_back(std::move(values));
    writes.push_back(io::TensorToWrite{tensor.name, io::DType::BF16, tensor.shape,
                                       std::as_bytes(std::span<const bf16>(storage.back()))});
  }
  return io::write_safetensors(path, writes);
}

// A safetensors file whose header declares `tensors` (BF16) and whose data section is a hole of the right size:
// costs no disk and no time, reads as zeros.
inline void write_sparse_checkpoint(const std::string& path, const std::vector<RandomTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const RandomTensor& tensor : tensors) {
    uint64_t count = 1;
    for (int64_t dim : tensor.shape) count *= static_cast<uint64_t>(dim);
    header[tensor.name] = {{"dtype", "BF16"}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + 2 * count}}};
    offset += 2 * count;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::FILE* file = std::fopen(path.c_str(), "wb");
  const uint64_t length = text.size();
  std::fwrite(&length, 8, 1, file);
  std::fwrite(text.data(), 1, text.size(), file);
  std::fclose(file);
  std::filesystem::resize_file(path, 8 + text.size() + offset);
}

// A target embedding E [vocab, hidden] ~ U(-1, 1), fixed by the seed.
inline std::vector<float> random_embedding(int vocab, int hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(vocab) * hidden);
  for (float& value : values) value = round_to_bf16(uniform(rng));
  return values;
}

// Random taps [rows, width] ~ U(-2, 2), fixed by the seed.
inline std::vector<float> random_taps(int64_t rows, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> values(static_cast<size_t>(rows * width));
  for (float& value : values) value = uniform(rng);
  return values;
}

// Writes `config` as config.json and random bf16 weights for its whole manifest into `directory`.
// A greedy request for `depth` drafts of `stream`, whose context ends at `position`, from `anchor`.
inline DraftRequest draft_request(StreamId stream, int64_t position, int32_t anchor, int depth) {
  DraftRequest request;
  request.stream = stream;
  request.anchor_token = anchor;
  request.anchor_position = position;
  request.depth = depth;
  return request;
}

inline Status write_small_drafter(const std::string& directory, const nlohmann::json& config, uint32_t seed) {
  write_text(directory + "/config.json", config.dump(2));
  LS_ASSIGN_OR_RETURN(DsparkConfig parsed, parse_dspark_config(config.dump()));
  std::vector<RandomTensor> tensors;
  for (const ManifestEntry& entry : draft_manifest(parsed)) tensors.push_back({entry.name, entry.shape});
  return write_random_checkpoint(directory + "/model.safetensors", tensors, seed);
}

}  // namespace ls::dspark::testing
