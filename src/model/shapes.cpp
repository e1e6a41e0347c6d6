// Public LFM2 / LFM2.5 shapes (reference/lfm2.md 1.3) and their config.json text as the checkpoints lay it out.
#include "model/shapes.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace ls::model {

namespace {

const std::vector<int> kSmallDenseAttention = {2, 5, 8, 10, 12, 14};
const std::vector<int> kDense26bAttention = {2, 5, 9, 13, 17, 21, 24, 27};
const std::vector<int> kMoe8bAttention = {2, 6, 10, 14, 18, 21};
// Inferred: 10 attention layers of 40 (the card's ~1:3 ratio), every 4th layer from 2.
const std::vector<int> kMoe24bAttention = {2, 6, 10, 14, 18, 22, 26, 30, 34, 38};

ModelShape dense(std::string_view name, std::string_view repo, int hidden, int layers, std::vector<int> attention,
                 int heads, int ffn_raw, bool auto_adjust) {
  ModelShape shape;
  shape.name = name;
  shape.hf_repo = repo;
  shape.hidden_size = hidden;
  shape.num_layers = layers;
  shape.attention_layers = std::move(attention);
  shape.num_heads = heads;
  shape.ffn_raw_size = ffn_raw;
  shape.ffn_auto_adjust = auto_adjust;
  return shape;
}

ModelShape moe(std::string_view name, std::string_view repo, int vocab, int layers, std::vector<int> attention,
               int experts, int expert_ffn, double rope_theta) {
  ModelShape shape;
  shape.name = name;
  shape.hf_repo = repo;
  shape.moe = true;
  shape.vocab_size = vocab;
  shape.hidden_size = 2048;
  shape.num_layers = layers;
  shape.attention_layers = std::move(attention);
  shape.ffn_raw_size = 7168;  // dense layers' intermediate_size (24B: inferred equal to 8B's)
  shape.rope_theta = rope_theta;
  shape.num_experts = experts;
  shape.experts_per_token = 4;
  shape.expert_ffn_size = expert_ffn;
  shape.num_dense_layers = 2;
  return shape;
}

const std::vector<ModelShape>& table() {
  static const std::vector<ModelShape> shapes = {
      dense("lfm2-350m", "LiquidAI/LFM2-350M", 1024, 16, kSmallDenseAttention, 16, 6656, true),
      dense("lfm2-700m", "LiquidAI/LFM2-700M", 1536, 16, kSmallDenseAttention, 24, 10240, true),
      dense("lfm2-1.2b", "LiquidAI/LFM2-1.2B", 2048, 16, kSmallDenseAttention, 32, 12288, true),
      dense("lfm2.5-1.2b", "LiquidAI/LFM2.5-1.2B-Instruct", 2048, 16, kSmallDenseAttention, 32, 12288, true),
      dense("lfm2-2.6b", "LiquidAI/LFM2-2.6B", 2048, 30, kDense26bAttention, 32, 10752, false),
      moe("lfm2-8b-a1b", "LiquidAI/LFM2-8B-A1B", 65536, 24, kMoe8bAttention, 32, 1792, 1e6),
      // LFM2.5-8B-A1B: rope_theta 5e6 as copies of its config.json show; the 24B's is inferred from it.
      moe("lfm2.5-8b-a1b", "LiquidAI/LFM2.5-8B-A1B", 128000, 24, kMoe8bAttention, 32, 1792, 5e6),
      moe("lfm2-24b-a2b", "LiquidAI/LFM2-24B-A2B", 65536, 40, kMoe24bAttention, 64, 1536, 1e6),
      moe("lfm2.5-24b-a2b", "LiquidAI/LFM2.5-24B-A2B", 128000, 40, kMoe24bAttention, 64, 1536, 5e6),
  };
  return shapes;
}

}  // namespace

std::span<const ModelShape> model_shapes() { return table(); }

const ModelShape* find_model_shape(std::string_view name) {
  for (const ModelShape& shape : table())
    if (shape.name == name) return &shape;
  return nullptr;
}

Result<std::string> shape_config_json(const ModelShape& shape, const ShapeOverrides& overrides) {
  const int layers = overrides.num_layers.value_or(shape.num_layers);
  if (layers < 1 || layers > shape.num_layers)
    return Status(ErrorCode::InvalidArgument, "--layers " + std::to_string(layers) + " is outside [1, " +
                                                  std::to_string(shape.num_layers) + "] for " + std::string(shape.name));
  const int vocab = overrides.vocab_size.value_or(shape.vocab_size);
  constexpr int kHighestSpecialId = 13;  // <|tool_response_end|>; eos 7 and the chat tokens must exist
  if (vocab <= kHighestSpecialId)
    return Status(ErrorCode::InvalidArgument, "--vocab " + std::to_string(vocab) + " must be above " +
                                                  std::to_string(kHighestSpecialId) + " (the special token ids)");
  if (overrides.torch_dtype != "bfloat16" && overrides.torch_dtype != "float32")
    return Status(ErrorCode::InvalidArgument, "dtype " + overrides.torch_dtype + " is not bfloat16 or float32");

  nlohmann::json layer_types = nlohmann::json::array();
  for (int layer = 0; layer < layers; ++layer) {
    bool attention = false;
    for (int index : shape.attention_layers) attention |= index == layer;
    layer_types.push_back(attention ? "full_attention" : "conv");
  }
  // nlohmann::json keeps keys sorted, as transformers' save_pretrained writes them.
  nlohmann::json config = {
      {"bos_token_id", 1},
      {"conv_L_cache", 3},
      {"conv_bias", false},
      {"dtype", overrides.torch_dtype},
      {"eos_token_id", 7},
      {"hidden_size", shape.hidden_size},
      {"intermediate_size", shape.ffn_raw_size},
      {"layer_types", layer_types},
      {"max_position_embeddings", shape.max_position},
      {"norm_eps", 1e-5},
      {"num_attention_heads", shape.num_heads},
      {"num_hidden_layers", layers},
      {"num_key_value_heads", shape.num_kv_heads},
      {"pad_token_id", 0},
      {"rope_parameters", {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}}},
      {"transformers_version", "5.17.0"},
      {"use_cache", true},
      {"vocab_size", vocab},
  };
  if (shape.moe) {
    config["architectures"] = {"Lfm2MoeForCausalLM"};
    config["model_type"] = "lfm2_moe";
    config["tie_word_embeddings"] = true;
    config["moe_intermediate_size"] = shape.expert_ffn_size;
    config["norm_topk_prob"] = true;
    config["num_dense_layers"] = std::min(shape.num_dense_layers, layers);
    config["num_experts"] = shape.num_experts;
    config["num_experts_per_tok"] = shape.experts_per_token;
    config["routed_scaling_factor"] = 1.0;
    config["use_expert_bias"] = true;
  } else {
    // Liquid's dense configs carry the original block_* fields beside the HF ones (block_ff_dim wins).
    config["architectures"] = {"Lfm2ForCausalLM"};
    config["model_type"] = "lfm2";
    config["block_auto_adjust_ff_dim"] = shape.ffn_auto_adjust;
    config["block_dim"] = shape.hidden_size;
    config["block_ff_dim"] = shape.ffn_raw_size;
    config["block_ffn_dim_multiplier"] = 1.0;
    config["block_mlp_init_scale"] = 1.0;
    config["block_multiple_of"] = 256;
    config["block_norm_eps"] = 1e-5;
    config["block_out_init_scale"] = 1.0;
    config["block_use_swiglu"] = true;
    config["block_use_xavier_init"] = true;
    config["conv_dim"] = shape.hidden_size;
    config["conv_use_xavier_init"] = true;
    config["tie_embedding"] = true;
    config["use_pos_enc"] = true;
  }
  return config.dump(2) + "\n";
}

}  // namespace ls::model
