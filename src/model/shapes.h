// The table of public LFM2 / LFM2.5 model shapes (config.json values as their checkpoints ship them), for synth.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ls::model {

// One public checkpoint's architecture. Values marked inferred in docs/checkpoints.md are our best reading.
struct ModelShape {
  std::string_view name;             // "lfm2-350m"
  std::string_view hf_repo;          // "LiquidAI/LFM2-350M"
  bool moe = false;                  // model_type lfm2_moe
  int vocab_size = 65536;
  int hidden_size = 0;
  int num_layers = 0;
  std::vector<int> attention_layers;  // indices of full_attention layers; the rest are conv
  int num_heads = 32;
  int num_kv_heads = 8;
  int ffn_raw_size = 0;              // dense: block_ff_dim / intermediate_size before the width rule; MoE: as-is
  bool ffn_auto_adjust = true;       // block_auto_adjust_ff_dim (dense only)
  long max_position = 128000;        // max_position_embeddings
  double rope_theta = 1e6;           // rope_parameters.rope_theta
  int num_experts = 0;               // MoE only from here on
  int experts_per_token = 0;
  int expert_ffn_size = 0;
  int num_dense_layers = 0;
};

std::span<const ModelShape> model_shapes();
const ModelShape* find_model_shape(std::string_view name);

// What synth may change about a shape: fewer layers (a prefix of the layer pattern), another vocabulary size, dtype.
struct ShapeOverrides {
  std::optional<int> num_layers;
  std::optional<int> vocab_size;
  std::string torch_dtype = "bfloat16";  // config.json "dtype": "bfloat16" or "float32"
};

// The shape's config.json text in the public field layout (sorted keys, indent 2). InvalidArgument when an override
// is out of range (layers beyond the shape's, vocab not above the special token ids).
Result<std::string> shape_config_json(const ModelShape& shape, const ShapeOverrides& overrides);

}  // namespace ls::model
