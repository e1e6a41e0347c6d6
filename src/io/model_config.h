// The target model's config.json (model_type lfm2 / lfm2_moe), read and checked before any weight is touched.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace ls::io {

enum class LayerKind { Conv, Attention };

struct MoeConfig {
  int num_experts = 0;
  int experts_per_token = 0;
  int expert_ffn_size = 0;      // moe_intermediate_size
  int num_dense_layers = 0;     // layers [0, num_dense_layers) use the dense FFN
  bool norm_topk_prob = true;
  bool use_expert_bias = true;
  float routed_scaling_factor = 1.0f;
};

struct ModelConfig {
  std::string model_type;        // "lfm2" or "lfm2_moe"
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;              // hidden_size / num_heads unless config says head_dim
  int ffn_size = 0;              // effective dense FFN width (after the block_auto_adjust_ff_dim rule)
  int conv_kernel = 3;           // conv_L_cache
  bool conv_bias = false;
  float norm_eps = 1e-5f;
  double rope_theta = 1e6;
  long max_position = 128000;
  bool tie_embeddings = true;
  int bos_token_id = 1;
  int eos_token_id = 7;
  std::vector<int> eos_token_ids;  // every id config.json lists as eos (eos_token_id is the first)
  int pad_token_id = 0;
  std::vector<LayerKind> layer_kinds;  // one per layer
  std::optional<MoeConfig> moe;        // set for lfm2_moe

  bool is_moe_layer(int layer) const { return moe && layer >= moe->num_dense_layers; }
};

// Parses config.json text. Refuses by name: UnsupportedArchitecture (model_type), BadModelConfig (missing or
// inconsistent fields, e.g. heads not dividing hidden size, layer_types of the wrong length).
Result<ModelConfig> parse_model_config(const std::string& json_text);
// Reads `<directory>/config.json`.
Result<ModelConfig> read_model_config(const std::string& directory);

// HF Lfm2MLP's width rule: ff = int(2*ff/3); with a multiplier: ff = int(m*ff), rounded up to multiple_of.
int effective_ffn_size(int raw_ffn_size, bool auto_adjust, int multiple_of, std::optional<double> multiplier);

// What a tensor is for, so writers of synthetic weights can pick a sensible distribution.
enum class TensorRole { Embedding, Matrix, Norm, ConvKernel, Bias, Router, ExpertBias };

// One tensor a target checkpoint must hold (HF names, lfm2.md section 3).
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::Matrix;
};

// Every tensor the config implies, in HF order (embedding, then layer by layer, then the final norm, lm_head if untied).
std::vector<ExpectedTensor> expected_target_tensors(const ModelConfig& config);

class Checkpoint;
// Checks, before any weight is read, that every expected tensor is present with the expected shape; refuses with
// BadSafetensors (missing / wrong shape) or BadModelConfig (FFN width in w1 differs from the config's rule).
Status check_target_tensors(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace ls::io
