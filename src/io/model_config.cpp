// config.json for lfm2 / lfm2_moe: field by field as HF's Lfm2Config / Lfm2MoeConfig read them (lfm2.md 1.1, 1.2).
#include "io/model_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "io/json_util.h"

namespace ls::io {

namespace {

using json = nlohmann::json;

constexpr int64_t kMaxSize = int64_t{1} << 30;

std::string architectures_text(const json& config) {
  auto found = config.find("architectures");
  return found == config.end() ? std::string("none") : found->dump();
}

// layer_types, or legacy full_attn_idxs (null / absent: every layer is attention, as HF does).
Status read_layer_kinds(const JsonFields& fields, int num_layers, std::vector<LayerKind>& kinds) {
  kinds.assign(num_layers, LayerKind::Attention);
  if (fields.has("layer_types")) {
    const json& types = fields.at("layer_types");
    if (!types.is_array()) return fields.error("layer_types is " + types.dump() + ", not a list");
    if (static_cast<int>(types.size()) != num_layers)
      return fields.error("layer_types has " + std::to_string(types.size()) + " entries, num_hidden_layers is " +
                          std::to_string(num_layers));
    for (int layer = 0; layer < num_layers; ++layer) {
      const json& type = types[layer];
      if (type == "conv") kinds[layer] = LayerKind::Conv;
      else if (type == "full_attention") kinds[layer] = LayerKind::Attention;
      else return fields.error("layer_types[" + std::to_string(layer) + "] is " + type.dump() +
                               ", not \"conv\" or \"full_attention\"");
    }
    return ok_status();
  }
  if (!fields.has("full_attn_idxs")) return ok_status();
  const json& indices = fields.at("full_attn_idxs");
  if (!indices.is_array()) return fields.error("full_attn_idxs is " + indices.dump() + ", not a list");
  kinds.assign(num_layers, LayerKind::Conv);
  for (const json& index : indices) {
    if (!index.is_number_integer() || index.get<int64_t>() < 0 || index.get<int64_t>() >= num_layers)
      return fields.error("full_attn_idxs entry " + index.dump() + " is not a layer index in [0, " +
                          std::to_string(num_layers) + ")");
    kinds[index.get<int64_t>()] = LayerKind::Attention;
  }
  return ok_status();
}

// rope_parameters.rope_theta (transformers 5) or top-level rope_theta (older configs); only the default rope type.
Result<double> read_rope_theta(const JsonFields& fields) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!fields.has(key)) continue;
    const json& rope = fields.at(key);
    if (!rope.is_object()) return fields.error(std::string(key) + " is " + rope.dump() + ", not an object");
    JsonFields rope_fields(rope, "config.json " + std::string(key), ErrorCode::BadModelConfig);
    for (const char* type_key : {"rope_type", "type"}) {
      LS_ASSIGN_OR_RETURN(std::string rope_type, rope_fields.string_or(type_key, "default"));
      if (rope_type != "default")
        return fields.error(std::string(key) + "." + type_key + " is '" + rope_type + "'; only default RoPE is supported");
    }
    if (rope_fields.has("rope_theta")) return rope_fields.number_or("rope_theta", 1e6, /*positive=*/true);
  }
  return fields.number_or("rope_theta", 1e6, /*positive=*/true);
}

// bos / eos / pad; eos_token_id may be a list (the first is the one generation stops on by default).
Status read_special_ids(const JsonFields& fields, ModelConfig& config) {
  LS_ASSIGN_OR_RETURN(int64_t bos, fields.integer_or("bos_token_id", config.bos_token_id, 0, kMaxSize));
  LS_ASSIGN_OR_RETURN(int64_t pad, fields.integer_or("pad_token_id", config.pad_token_id, 0, kMaxSize));
  config.bos_token_id = static_cast<int>(bos);
  config.pad_token_id = static_cast<int>(pad);
  config.eos_token_ids.clear();
  if (fields.has("eos_token_id") && fields.at("eos_token_id").is_array()) {
    const json& list = fields.at("eos_token_id");
    if (list.empty()) return fields.error("eos_token_id is an empty list");
    for (const json& entry : list) {
      LS_ASSIGN_OR_RETURN(int64_t eos, fields.integer_value("eos_token_id", entry, 0, kMaxSize));
      config.eos_token_ids.push_back(static_cast<int>(eos));
    }
  } else {
    LS_ASSIGN_OR_RETURN(int64_t eos, fields.integer_or("eos_token_id", config.eos_token_id, 0, kMaxSize));
    config.eos_token_ids.push_back(static_cast<int>(eos));
  }
  config.eos_token_id = config.eos_token_ids.front();
  return ok_status();
}

Status read_moe(const JsonFields& fields, ModelConfig& config) {
  MoeConfig moe;
  LS_ASSIGN_OR_RETURN(int64_t experts, fields.integer("num_experts", 1, kMaxSize));
  LS_ASSIGN_OR_RETURN(int64_t per_token, fields.integer("num_experts_per_tok", 1, kMaxSize));
  LS_ASSIGN_OR_RETURN(int64_t expert_ffn, fields.integer("moe_intermediate_size", 1, kMaxSize));
  LS_ASSIGN_OR_RETURN(int64_t dense_layers, fields.integer_or("num_dense_layers", 2, 0, config.num_layers));
  if (per_token > experts)
    return fields.error("num_experts_per_tok " + std::to_string(per_token) + " is more than num_experts " +
                        std::to_string(experts));
  moe.num_experts = static_cast<int>(experts);
  moe.experts_per_token = static_cast<int>(per_token);
  moe.expert_ffn_size = static_cast<int>(expert_ffn);
  moe.num_dense_layers = static_cast<int>(dense_layers);
  LS_ASSIGN_OR_RETURN(moe.norm_topk_prob, fields.boolean_or("norm_topk_prob", true));
  LS_ASSIGN_OR_RETURN(moe.use_expert_bias, fields.boolean_or("use_expert_bias", true));
  LS_ASSIGN_OR_RETURN(double scaling, fields.number_or("routed_scaling_factor", 1.0, /*positive=*/true));
  moe.routed_scaling_factor = static_cast<float>(scaling);
  config.moe = moe;
  return ok_status();
}

// Dense FFN width: lfm2 applies the block_* rule to block_ff_dim (else intermediate_size); lfm2_moe uses it as-is.
Status read_ffn_size(const JsonFields& fields, ModelConfig& config) {
  const bool moe = config.model_type == "lfm2_moe";
  const char* raw_key = !moe && fields.has("block_ff_dim") ? "block_ff_dim" : "intermediate_size";
  LS_ASSIGN_OR_RETURN(int64_t raw, fields.integer(raw_key, 1, kMaxSize));
  if (moe) {
    config.ffn_size = static_cast<int>(raw);
    return ok_status();
  }
  LS_ASSIGN_OR_RETURN(bool auto_adjust, fields.boolean_or("block_auto_adjust_ff_dim", true));
  LS_ASSIGN_OR_RETURN(int64_t multiple_of, fields.integer_or("block_multiple_of", 256, 1, kMaxSize));
  std::optional<double> multiplier;
  if (fields.has("block_ffn_dim_multiplier")) {
    LS_ASSIGN_OR_RETURN(double value, fields.number_or("block_ffn_dim_multiplier", 1.0, /*positive=*/true));
    multiplier = value;
  } else if (!fields.present("block_ffn_dim_multiplier")) {
    multiplier = 1.0;  // absent: HF's default 1.0; an explicit null skips the multiplier and the rounding
  }
  const int ffn = effective_ffn_size(static_cast<int>(raw), auto_adjust, static_cast<int>(multiple_of), multiplier);
  if (ffn <= 0)
    return fields.error(std::string(raw_key) + " " + std::to_string(raw) + " gives a non-positive FFN width " +
                        std::to_string(ffn));
  config.ffn_size = ffn;
  return ok_status();
}

}  // namespace

int effective_ffn_size(int raw_ffn_size, bool auto_adjust, int multiple_of, std::optional<double> multiplier) {
  int ffn = raw_ffn_size;
  if (!auto_adjust) return ffn;
  ffn = static_cast<int>(2.0 * ffn / 3.0);  // Python int(2 * ff / 3): float division, truncation
  if (multiplier) {
    ffn = static_cast<int>(*multiplier * ffn);
    ffn = multiple_of * ((ffn + multiple_of - 1) / multiple_of);
  }
  return ffn;
}

Result<ModelConfig> parse_model_config(const std::string& json_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Status(ErrorCode::BadModelConfig, "config.json is not valid JSON");
  if (!root.is_object()) return Status(ErrorCode::BadModelConfig, "config.json is not a JSON object");
  JsonFields fields(root, "config.json", ErrorCode::BadModelConfig);

  ModelConfig config;
  if (!fields.has("model_type") || !root["model_type"].is_string())
    return Status(ErrorCode::UnsupportedArchitecture, "config.json has no model_type string (architectures " +
                                                          architectures_text(root) + "); lanespark runs lfm2 and lfm2_moe");
  config.model_type = root["model_type"].get<std::string>();
  if (config.model_type != "lfm2" && config.model_type != "lfm2_moe")
    return Status(ErrorCode::UnsupportedArchitecture, "config.json model_type '" + config.model_type + "' (architectures " +
                                                          architectures_text(root) + ") is not lfm2 or lfm2_moe");

  LS_ASSIGN_OR_RETURN(int64_t vocab, fields.integer("vocab_size", 1, kMaxSize));
  LS_ASSIGN_OR_RETURN(int64_t hidden, fields.integer("hidden_size", 1, kMaxSize));
  LS_ASSIGN_OR_RETURN(int64_t layers, fields.integer("num_hidden_layers", 1, 100000));
  LS_ASSIGN_OR_RETURN(int64_t heads, fields.integer("num_attention_heads", 1, kMaxSize));
  LS_ASSIGN_OR_RETURN(int64_t kv_heads, fields.integer("num_key_value_heads", 1, kMaxSize));
  if (hidden % heads != 0)
    return fields.error("num_attention_heads " + std::to_string(heads) + " does not divide hidden_size " + std::to_string(hidden));
  if (heads % kv_heads != 0)
    return fields.error("num_key_value_heads " + std::to_string(kv_heads) + " does not divide num_attention_heads " +
                        std::to_string(heads));
  LS_ASSIGN_OR_RETURN(int64_t head_dim, fields.integer_or("head_dim", hidden / heads, 1, kMaxSize));
  config.vocab_size = static_cast<int>(vocab);
  config.hidden_size = static_cast<int>(hidden);
  config.num_layers = static_cast<int>(layers);
  config.num_heads = static_cast<int>(heads);
  config.num_kv_heads = static_cast<int>(kv_heads);
  config.head_dim = static_cast<int>(head_dim);

  if (fields.has("sliding_window")) {
    LS_ASSIGN_OR_RETURN(int64_t window, fields.integer("sliding_window"));
    if (window > 0)
      return fields.error("sliding_window " + std::to_string(window) + ": sliding-window attention is not supported");
  }
  LS_RETURN_IF_ERROR(read_layer_kinds(fields, config.num_layers, config.layer_kinds));
  LS_RETURN_IF_ERROR(read_ffn_size(fields, config));
  LS_ASSIGN_OR_RETURN(config.rope_theta, read_rope_theta(fields));
  LS_ASSIGN_OR_RETURN(double norm_eps, fields.number_or("norm_eps", 1e-5, /*positive=*/true));
  config.norm_eps = static_cast<float>(norm_eps);
  LS_ASSIGN_OR_RETURN(int64_t conv_kernel, fields.integer_or("conv_L_cache", 3, 1, 1024));
  config.conv_kernel = static_cast<int>(conv_kernel);
  LS_ASSIGN_OR_RETURN(config.conv_bias, fields.boolean_or("conv_bias", false));
  LS_ASSIGN_OR_RETURN(bool tie_legacy, fields.boolean_or("tie_embedding", true));
  LS_ASSIGN_OR_RETURN(config.tie_embeddings, fields.boolean_or("tie_word_embeddings", tie_legacy));
  LS_ASSIGN_OR_RETURN(int64_t max_position, fields.integer_or("max_position_embeddings", 128000, 1, INT64_MAX));
  config.max_position = static_cast<long>(max_position);
  LS_RETURN_IF_ERROR(read_special_ids(fields, config));
  if (config.model_type == "lfm2_moe") LS_RETURN_IF_ERROR(read_moe(fields, config));
  return config;
}

Result<ModelConfig> read_model_config(const std::string& directory) {
  const std::string path = directory + "/config.json";
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return Status(ErrorCode::NotFound, path + ": cannot open");
  std::ostringstream text;
  text << stream.rdbuf();
  Result<ModelConfig> config = parse_model_config(text.str());
  // Messages start with "config.json"; prefix the directory so they name the whole path.
  if (!config.ok()) return Status(config.status().code(), directory + "/" + config.status().message());
  return config;
}

}  // namespace ls::io
