// Synthetic DSpark drafters: LiquidAI's config layout sized to a target, the manifest's tensors with random values.
#include "draft/synthetic/synthetic_drafter_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "draft/dspark/config.h"
#include "draft/dspark/weights.h"

namespace ls::dspark {

Result<std::vector<int>> drafter_taps_for(int target_layers) {
  if (target_layers < 2) {
    return Status(ErrorCode::InvalidArgument,
                  "a drafter needs a target of at least 2 layers to tap, got " + std::to_string(target_layers));
  }
  if (target_layers == 16) return std::vector<int>{2, 5, 8, 11, 14};   // LFM2.5-1.2B
  if (target_layers == 24) return std::vector<int>{2, 6, 10, 14, 18};  // LFM2.5-8B-A1B
  if (target_layers == 30) return std::vector<int>{2, 9, 17, 21, 27};  // LFM2.5-2.6B
  const int last = target_layers - 2;
  const int count = std::min(5, last + 1);
  std::vector<int> taps;
  for (int index = 0; index < count; ++index)
    taps.push_back(count == 1 ? 0 : static_cast<int>(std::lround(double(index) * last / (count - 1))));
  return taps;
}

Result<std::string> drafter_config_json(const io::ModelConfig& target, const SyntheticDrafterShape& shape) {
  constexpr int kHeadDim = 64;
  if (target.hidden_size % kHeadDim != 0 || target.hidden_size < 4 * kHeadDim) {
    return Status(ErrorCode::InvalidArgument, "a synthetic drafter needs a hidden size that is a multiple of 64 and "
                                              "at least 256, got " + std::to_string(target.hidden_size));
  }
  if (shape.num_layers < 1 || shape.block_size < 1 || shape.markov_rank < 1 || shape.markov_rank > kMaxMarkovRank) {
    return Status(ErrorCode::InvalidArgument, "synthetic drafter shape out of range: " +
                                                  std::to_string(shape.num_layers) + " layers, block " +
                                                  std::to_string(shape.block_size) + ", Markov rank " +
                                                  std::to_string(shape.markov_rank));
  }
  LS_ASSIGN_OR_RETURN(std::vector<int> taps, drafter_taps_for(target.num_layers));
  const int heads = target.hidden_size / kHeadDim;
  // LiquidAI's mask ids where the vocabulary matches theirs, else the second-to-last id.
  const int mask_token_id = target.vocab_size == 65536 ? 64402 : target.vocab_size == 128000 ? 125017
                                                                                                : target.vocab_size - 2;
  nlohmann::json config = {
      {"architectures", {"Lfm2DSparkDraftModel"}},
      {"model_type", "qwen3"},
      {"hidden_size", target.hidden_size},
      {"num_hidden_layers", shape.num_layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", std::max(1, heads / 4)},
      {"head_dim", kHeadDim},
      {"intermediate_size", 3 * target.hidden_size},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"vocab_size", target.vocab_size},
      {"rope_theta", target.rope_theta},
      {"max_position_embeddings", target.max_position},
      {"layer_types", std::vector<std::string>(shape.num_layers, "full_attention")},
      {"torch_dtype", "bfloat16"},
      {"block_size", shape.block_size},
      {"dflash_config",
       {{"mask_token_id", mask_token_id}, {"target_layer_ids", taps}, {"num_target_layers", target.num_layers}}},
      {"markov_rank", shape.markov_rank},
      {"markov_head_type", "vanilla"},
      {"rope_is_neox_style", false},
      {"enable_confidence_head", true}};
  return config.dump(2);
}

Result<io::SyntheticSummary> write_synthetic_drafter(const std::string& directory,
                                                     const std::string& target_config_json,
                                                     const SyntheticDrafterShape& shape,
                                                     const io::SyntheticOptions& options) {
  LS_ASSIGN_OR_RETURN(io::ModelConfig target, io::parse_model_config(target_config_json));
  LS_ASSIGN_OR_RETURN(std::string config_json, drafter_config_json(target, shape));
  LS_ASSIGN_OR_RETURN(DsparkConfig config, parse_dspark_config(config_json));  // our own layout must pass admission
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) return Status(ErrorCode::IoError, directory + ": cannot create (" + error.message() + ")");
  {
    std::ofstream file(directory + "/config.json", std::ios::binary | std::ios::trunc);
    file << config_json << "\n";
    file.close();
    if (!file) return Status(ErrorCode::IoError, directory + "/config.json: write failed");
  }
  std::vector<io::ExpectedTensor> tensors;
  for (const ManifestEntry& entry : draft_manifest(config)) {
    const bool is_bias = entry.name.size() >= 4 && entry.name.compare(entry.name.size() - 4, 4, "bias") == 0;
    const io::TensorRole role = is_bias                  ? io::TensorRole::Bias
                                : entry.shape.size() == 1 ? io::TensorRole::Norm
                                                          : io::TensorRole::Matrix;
    tensors.push_back({entry.name, entry.shape, role});
  }
  return io::write_synthetic_safetensors(directory + "/model.safetensors", tensors, options);
}

}  // namespace ls::dspark
