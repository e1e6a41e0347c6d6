// DSpark config.json admission: field lookup over LiquidAI's layouts, refusals by name, target and bits checks.
#include "draft/dspark/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "compute/cpu/cpu_features.h"

namespace ls::dspark {
namespace {

using json = nlohmann::json;

Status bad_config(const std::string& message) { return Status(ErrorCode::BadDraftConfig, message); }
Status unsupported_shape(const std::string& message) { return Status(ErrorCode::UnsupportedDraftShape, message); }

// Finds `key` top-level, under `dflash_config`, under `dspark_config`, or as `dspark_<key>`; nullptr when absent.
// Two places giving different values is a BadDraftConfig.
Result<const json*> find_field(const json& root, std::string_view key) {
  const json* found = nullptr;
  std::string found_where;
  auto consider = [&](const json& holder, const std::string& name, const std::string& where) -> Status {
    if (!holder.is_object()) return ok_status();
    auto it = holder.find(name);
    if (it == holder.end() || it->is_null()) return ok_status();
    if (found != nullptr && *found != *it) {
      return bad_config("field " + std::string(key) + " is " + found->dump() + " in " + found_where + " but " +
                        it->dump() + " in " + where);
    }
    if (found == nullptr) {
      found = &*it;
      found_where = where;
    }
    return ok_status();
  };
  const std::string name(key);
  LS_RETURN_IF_ERROR(consider(root, name, "the top level"));
  if (auto it = root.find("dflash_config"); it != root.end()) LS_RETURN_IF_ERROR(consider(*it, name, "dflash_config"));
  if (auto it = root.find("dspark_config"); it != root.end()) LS_RETURN_IF_ERROR(consider(*it, name, "dspark_config"));
  LS_RETURN_IF_ERROR(consider(root, "dspark_" + name, "dspark_" + name));
  return found;
}

// An integer field; BadDraftConfig naming the field when required and missing, or not an integer.
Result<int> read_int(const json& root, std::string_view key, bool required, int fallback) {
  LS_ASSIGN_OR_RETURN(const json* value, find_field(root, key));
  if (value == nullptr) {
    if (required) return bad_config("missing field " + std::string(key));
    return fallback;
  }
  if (!value->is_number_integer())
    return bad_config("field " + std::string(key) + " is " + value->dump() + ", not an integer");
  const int64_t number = value->get<int64_t>();
  if (number < INT32_MIN || number > INT32_MAX)
    return bad_config("field " + std::string(key) + " = " + value->dump() + " is out of range");
  return static_cast<int>(number);
}

Result<double> read_number(const json& root, std::string_view key, bool required, double fallback) {
  LS_ASSIGN_OR_RETURN(const json* value, find_field(root, key));
  if (value == nullptr) {
    if (required) return bad_config("missing field " + std::string(key));
    return fallback;
  }
  if (!value->is_number()) return bad_config("field " + std::string(key) + " is " + value->dump() + ", not a number");
  return value->get<double>();
}

Result<bool> read_bool(const json& root, std::string_view key, bool fallback) {
  LS_ASSIGN_OR_RETURN(const json* value, find_field(root, key));
  if (value == nullptr) return fallback;
  if (!value->is_boolean())
    return bad_config("field " + std::string(key) + " is " + value->dump() + ", not true/false");
  return value->get<bool>();
}

Status require_positive(std::string_view key, int value) {
  if (value <= 0) return bad_config("field " + std::string(key) + " = " + std::to_string(value) + " must be positive");
  return ok_status();
}

// Refuses the variants the drafter does not run: DFlash slots, causal blocks, sliding windows, other heads.
Status refuse_unsupported_variants(const json& root) {
  LS_ASSIGN_OR_RETURN(const json* speculators, find_field(root, "speculators_model_type"));
  if (speculators != nullptr && speculators->is_string() && speculators->get<std::string>() == "dspark") {
    return unsupported_shape(
        "speculators_model_type \"dspark\" uses the DFlash slot convention (drafts from slots "
        "1..block_size-1); only the anchor-first DSpark convention is supported");
  }
  LS_ASSIGN_OR_RETURN(bool sample_from_anchor, read_bool(root, "sample_from_anchor", true));
  if (!sample_from_anchor) {
    return unsupported_shape(
        "sample_from_anchor false is the DFlash slot convention; only anchor-first DSpark "
        "blocks are supported");
  }
  LS_ASSIGN_OR_RETURN(bool bonus_anchor, read_bool(root, "bonus_anchor", false));
  if (bonus_anchor) {
    return unsupported_shape(
        "dspark_bonus_anchor true is the DFlash slot convention; only anchor-first DSpark "
        "blocks are supported");
  }
  for (const char* key : {"causal", "query_causal", "dflash_query_causal", "is_causal"}) {
    LS_ASSIGN_OR_RETURN(bool causal, read_bool(root, key, false));
    if (causal)
      return unsupported_shape(std::string(key) +
                               " true asks for causal in-block attention; the drafter "
                               "runs bidirectional blocks only");
  }
  for (const char* key : {"use_swa", "use_sliding_window"}) {
    LS_ASSIGN_OR_RETURN(bool windowed, read_bool(root, key, false));
    if (windowed)
      return unsupported_shape(std::string(key) +
                               " true asks for sliding-window context; the drafter "
                               "attends to the whole context");
  }
  // Qwen3 configs carry sliding_window: 4096 next to use_sliding_window: false; only an active window is refused.
  LS_ASSIGN_OR_RETURN(const json* window, find_field(root, "sliding_window"));
  const bool window_switched_off = root.contains("use_sliding_window");
  if (window != nullptr && !window_switched_off && !(window->is_number() && window->get<double>() <= 0)) {
    return unsupported_shape("sliding_window " + window->dump() + " is not supported (whole-context attention only)");
  }
  if (auto it = root.find("layer_types"); it != root.end() && it->is_array()) {
    for (const json& kind : *it) {
      if (kind != "full_attention") {
        return unsupported_shape("layer_types holds " + kind.dump() +
                                 "; only full_attention draft layers are supported");
      }
    }
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    LS_ASSIGN_OR_RETURN(bool bias, read_bool(root, key, false));
    if (bias) return unsupported_shape(std::string(key) + " true: the drafter's layers have no biases");
  }
  LS_ASSIGN_OR_RETURN(const json* head_type, find_field(root, "markov_head_type"));
  if (head_type != nullptr && *head_type != "vanilla") {
    return unsupported_shape("markov_head_type " + head_type->dump() + " is not supported; only \"vanilla\"");
  }
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    auto type = it->find("rope_type");
    if (type == it->end()) type = it->find("type");
    if (type != it->end() && *type != "default") {
      return unsupported_shape(std::string(key) + ".rope_type " + type->dump() +
                               " is not supported; only default RoPE");
    }
  }
  return ok_status();
}

Result<double> read_rope_theta(const json& root) {
  LS_ASSIGN_OR_RETURN(const json* value, find_field(root, "rope_theta"));
  if (value == nullptr) {
    if (auto it = root.find("rope_parameters"); it != root.end() && it->is_object()) {
      if (auto theta = it->find("rope_theta"); theta != it->end()) value = &*theta;
    }
  }
  if (value == nullptr) return bad_config("missing field rope_theta");
  if (!value->is_number()) return bad_config("field rope_theta is " + value->dump() + ", not a number");
  const double theta = value->get<double>();
  // RoPE tables are fp32: a theta that overflows float (1e100) is as unusable as inf.
  if (!std::isfinite(theta) || !std::isfinite(static_cast<float>(theta)) || theta <= 0.0) {
    std::ostringstream message;
    message << "rope_theta " << theta << " must be finite in float32 and positive";
    return bad_config(message.str());
  }
  return theta;
}

}  // namespace

Result<DsparkConfig> parse_dspark_config(const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& error) {
    return bad_config(std::string("config.json is not valid JSON: ") + error.what());
  }
  if (!root.is_object()) return bad_config("config.json is not a JSON object");

  // Activation first: it decides whether the fixed SiLU path may run at all.
  auto act = root.find("hidden_act");
  if (act != root.end() && !(act->is_string() && act->get<std::string>() == "silu")) {
    return Status(ErrorCode::UnsupportedDraftActivation,
                  "hidden_act " + act->dump() + " is not supported; the drafter's FFN is SiLU-gated only");
  }
  LS_RETURN_IF_ERROR(refuse_unsupported_variants(root));

  DsparkConfig config;
  LS_ASSIGN_OR_RETURN(config.vocab_size, read_int(root, "vocab_size", true, 0));
  LS_ASSIGN_OR_RETURN(config.hidden_size, read_int(root, "hidden_size", true, 0));
  LS_ASSIGN_OR_RETURN(config.num_layers, read_int(root, "num_hidden_layers", true, 0));
  LS_ASSIGN_OR_RETURN(config.num_heads, read_int(root, "num_attention_heads", true, 0));
  LS_ASSIGN_OR_RETURN(config.num_kv_heads, read_int(root, "num_key_value_heads", false, config.num_heads));
  LS_ASSIGN_OR_RETURN(config.ffn_size, read_int(root, "intermediate_size", true, 0));
  for (auto [key, value] : {std::pair{"vocab_size", config.vocab_size},
                            {"hidden_size", config.hidden_size},
                            {"num_hidden_layers", config.num_layers},
                            {"num_attention_heads", config.num_heads},
                            {"num_key_value_heads", config.num_kv_heads},
                            {"intermediate_size", config.ffn_size}}) {
    LS_RETURN_IF_ERROR(require_positive(key, value));
  }
  const int default_head_dim = config.hidden_size / config.num_heads;
  LS_ASSIGN_OR_RETURN(config.head_dim, read_int(root, "head_dim", false, default_head_dim));
  LS_RETURN_IF_ERROR(require_positive("head_dim", config.head_dim));
  if (config.head_dim % 2 != 0)
    return bad_config("head_dim " + std::to_string(config.head_dim) + " must be even for RoPE");
  if (config.num_heads % config.num_kv_heads != 0) {
    return bad_config("num_attention_heads " + std::to_string(config.num_heads) +
                      " is not a multiple of num_key_value_heads " + std::to_string(config.num_kv_heads));
  }
  if (auto it = root.find("layer_types");
      it != root.end() && it->is_array() && static_cast<int>(it->size()) != config.num_layers) {
    return bad_config("layer_types has " + std::to_string(it->size()) + " entries, num_hidden_layers is " +
                      std::to_string(config.num_layers));
  }
  LS_ASSIGN_OR_RETURN(double eps, read_number(root, "rms_norm_eps", false, 1e-6));
  if (!(eps > 0.0) || !std::isfinite(eps))
    return bad_config("rms_norm_eps " + std::to_string(eps) + " must be finite and positive");
  config.norm_eps = static_cast<float>(eps);
  LS_ASSIGN_OR_RETURN(config.rope_theta, read_rope_theta(root));
  LS_ASSIGN_OR_RETURN(bool neox, read_bool(root, "rope_is_neox_style", false));
  config.rope_style = neox ? RopeStyle::NeoX : RopeStyle::Interleaved;

  LS_ASSIGN_OR_RETURN(config.block_size, read_int(root, "block_size", true, 0));
  if (config.block_size <= 0)
    return bad_config("block_size " + std::to_string(config.block_size) + " must be at least 1");
  LS_ASSIGN_OR_RETURN(config.mask_token_id, read_int(root, "mask_token_id", false, -1));
  if (config.mask_token_id < 0) {
    return bad_config(
        "missing mask_token_id (looked top-level, in dflash_config, dspark_config, dspark_mask_token_id)");
  }
  if (config.mask_token_id >= config.vocab_size) {
    return bad_config("mask_token_id " + std::to_string(config.mask_token_id) + " is outside vocab_size " +
                      std::to_string(config.vocab_size));
  }

  LS_ASSIGN_OR_RETURN(const json* taps, find_field(root, "target_layer_ids"));
  if (taps == nullptr) return bad_config("missing field target_layer_ids");
  if (!taps->is_array() || taps->empty())
    return bad_config("target_layer_ids " + taps->dump() + " is not a non-empty list");
  for (const json& tap : *taps) {
    if (!tap.is_number_integer()) return bad_config("target_layer_ids holds " + tap.dump() + ", not an integer");
    config.target_layer_ids.push_back(tap.get<int>());
  }
  LS_ASSIGN_OR_RETURN(config.num_target_layers, read_int(root, "num_target_layers", false, -1));

  LS_ASSIGN_OR_RETURN(config.markov_rank, read_int(root, "markov_rank", true, 0));
  if (config.markov_rank <= 0) {
    return unsupported_shape("markov_rank " + std::to_string(config.markov_rank) +
                             ": no Markov head means a DFlash drafter, which is not supported");
  }
  if (config.markov_rank > kMaxMarkovRank) {
    return unsupported_shape("markov_rank " + std::to_string(config.markov_rank) + " is above the kernels' limit of " +
                             std::to_string(kMaxMarkovRank));
  }

  LS_ASSIGN_OR_RETURN(config.has_confidence, read_bool(root, "enable_confidence_head", false));
  LS_ASSIGN_OR_RETURN(bool with_markov, read_bool(root, "confidence_head_with_markov", true));
  if (config.has_confidence && !with_markov) {
    return unsupported_shape("confidence_head_with_markov false is not supported (the head reads [hidden ; W1[prev]])");
  }
  LS_ASSIGN_OR_RETURN(const json* temperatures, find_field(root, "confidence_temperatures"));
  if (temperatures != nullptr) {
    if (!config.has_confidence) return bad_config("confidence_temperatures given without enable_confidence_head");
    if (!temperatures->is_array() || static_cast<int>(temperatures->size()) != config.block_size) {
      return bad_config("confidence_temperatures " + temperatures->dump() + " must list block_size " +
                        std::to_string(config.block_size) + " numbers");
    }
    for (const json& value : *temperatures) {
      const double temperature = value.is_number() ? value.get<double>() : NAN;
      if (!(temperature > 0.0) || !std::isfinite(static_cast<float>(temperature))) {
        return bad_config("confidence_temperatures holds " + value.dump() + "; each must be finite and positive");
      }
      config.confidence_temperatures.push_back(static_cast<float>(temperature));
    }
  }
  return config;
}

Result<DsparkConfig> read_dspark_config(const std::string& directory) {
  const std::string path = directory + "/config.json";
  std::ifstream file(path);
  if (!file) return Status(ErrorCode::NotFound, "drafter config " + path + " cannot be opened");
  std::stringstream text;
  text << file.rdbuf();
  return parse_dspark_config(text.str());
}

Status check_draft_fits_target(const DsparkConfig& config, const TargetFacts& target) {
  auto mismatch = [](const std::string& message) { return Status(ErrorCode::DraftTargetMismatch, message); };
  if (config.vocab_size != target.vocab_size) {
    return mismatch("drafter vocab_size " + std::to_string(config.vocab_size) + " != target vocab_size " +
                    std::to_string(target.vocab_size));
  }
  if (config.hidden_size != target.hidden_size) {
    return mismatch("drafter hidden_size " + std::to_string(config.hidden_size) + " != target hidden_size " +
                    std::to_string(target.hidden_size) + " (the drafter shares the target's embedding and head)");
  }
  if (config.num_target_layers >= 0 && config.num_target_layers != target.num_layers) {
    return mismatch("drafter num_target_layers " + std::to_string(config.num_target_layers) + " != target layers " +
                    std::to_string(target.num_layers));
  }
  for (int tap : config.target_layer_ids) {
    if (tap < 0 || tap > target.num_layers - 2) {
      return mismatch("target_layer_ids holds " + std::to_string(tap) + ", outside [0, " +
                      std::to_string(target.num_layers - 2) + "] for a " + std::to_string(target.num_layers) +
                      "-layer target");
    }
  }
  return ok_status();
}

int resolve_draft_bits(int bits, Device device, compute::NumericMode mode) {
  if (bits != kDraftBitsAuto) return bits;
  const bool int8_pays =
      device == Device::Cpu && mode == compute::NumericMode::Bf16 && compute::cpu_features().avx512_vnni;
  return int8_pays ? 8 : 0;
}

Status check_draft_bits(int bits) {
  if (bits != 0 && bits != 8) {
    return Status(ErrorCode::UnsupportedDraftBits, "--drafter-bits " + std::to_string(bits) +
                                                       " is not supported; use 0 (bf16 as stored) or 8 (int8 per row)");
  }
  return ok_status();
}

}  // namespace ls::dspark
