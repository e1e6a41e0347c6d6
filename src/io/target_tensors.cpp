// The tensor list a ModelConfig implies (HF names, lfm2.md section 3) and the pre-load shape check against a checkpoint.
#include <algorithm>

#include "io/model_config.h"
#include "io/safetensors.h"

namespace ls::io {

namespace {

std::string shape_text(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t index = 0; index < shape.size(); ++index) text += (index ? ", " : "") + std::to_string(shape[index]);
  return text + "]";
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

std::vector<ExpectedTensor> expected_target_tensors(const ModelConfig& config) {
  const int64_t hidden = config.hidden_size;
  const int64_t head_dim = config.head_dim;
  std::vector<ExpectedTensor> tensors;
  auto add = [&](std::string name, std::vector<int64_t> shape, TensorRole role) {
    tensors.push_back({std::move(name), std::move(shape), role});
  };
  add("model.embed_tokens.weight", {config.vocab_size, hidden}, TensorRole::Embedding);
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    add(prefix + "operator_norm.weight", {hidden}, TensorRole::Norm);
    if (config.layer_kinds[layer] == LayerKind::Conv) {
      add(prefix + "conv.in_proj.weight", {3 * hidden, hidden}, TensorRole::Matrix);
      if (config.conv_bias) add(prefix + "conv.in_proj.bias", {3 * hidden}, TensorRole::Bias);
      add(prefix + "conv.conv.weight", {hidden, 1, config.conv_kernel}, TensorRole::ConvKernel);
      if (config.conv_bias) add(prefix + "conv.conv.bias", {hidden}, TensorRole::Bias);
      add(prefix + "conv.out_proj.weight", {hidden, hidden}, TensorRole::Matrix);
      if (config.conv_bias) add(prefix + "conv.out_proj.bias", {hidden}, TensorRole::Bias);
    } else {
      add(prefix + "self_attn.q_proj.weight", {config.num_heads * head_dim, hidden}, TensorRole::Matrix);
      add(prefix + "self_attn.k_proj.weight", {config.num_kv_heads * head_dim, hidden}, TensorRole::Matrix);
      add(prefix + "self_attn.v_proj.weight", {config.num_kv_heads * head_dim, hidden}, TensorRole::Matrix);
      add(prefix + "self_attn.out_proj.weight", {hidden, config.num_heads * head_dim}, TensorRole::Matrix);
      add(prefix + "self_attn.q_layernorm.weight", {head_dim}, TensorRole::Norm);
      add(prefix + "self_attn.k_layernorm.weight", {head_dim}, TensorRole::Norm);
    }
    add(prefix + "ffn_norm.weight", {hidden}, TensorRole::Norm);
    if (config.is_moe_layer(layer)) {
      const MoeConfig& moe = *config.moe;
      add(prefix + "feed_forward.gate.weight", {moe.num_experts, hidden}, TensorRole::Router);
      if (moe.use_expert_bias) add(prefix + "feed_forward.expert_bias", {moe.num_experts}, TensorRole::ExpertBias);
      for (int expert = 0; expert < moe.num_experts; ++expert) {
        const std::string expert_prefix = prefix + "feed_forward.experts." + std::to_string(expert) + ".";
        add(expert_prefix + "w1.weight", {moe.expert_ffn_size, hidden}, TensorRole::Matrix);
        add(expert_prefix + "w3.weight", {moe.expert_ffn_size, hidden}, TensorRole::Matrix);
        add(expert_prefix + "w2.weight", {hidden, moe.expert_ffn_size}, TensorRole::Matrix);
      }
    } else {
      add(prefix + "feed_forward.w1.weight", {config.ffn_size, hidden}, TensorRole::Matrix);
      add(prefix + "feed_forward.w3.weight", {config.ffn_size, hidden}, TensorRole::Matrix);
      add(prefix + "feed_forward.w2.weight", {hidden, config.ffn_size}, TensorRole::Matrix);
    }
  }
  add("model.embedding_norm.weight", {hidden}, TensorRole::Norm);
  if (!config.tie_embeddings) add("lm_head.weight", {config.vocab_size, hidden}, TensorRole::Matrix);
  return tensors;
}

Status check_target_tensors(const Checkpoint& checkpoint, const ModelConfig& config) {
  const std::string& where = checkpoint.directory();
  for (const ExpectedTensor& expected : expected_target_tensors(config)) {
    const TensorInfo* found = checkpoint.find(expected.name);
    if (!found) {
      const std::string hint = expected.name == "lm_head.weight" ? " (config.json says tie_word_embeddings false)" : "";
      return Status(ErrorCode::BadSafetensors, where + ": tensor " + expected.name + " " + shape_text(expected.shape) +
                                                   " is missing" + hint);
    }
    if (found->shape == expected.shape) continue;
    // A dense w1 whose rows differ only in the FFN width means config.json's width rule disagrees with the weights.
    const bool dense_w1 = ends_with(expected.name, ".feed_forward.w1.weight") && found->shape.size() == 2 &&
                          found->shape[1] == expected.shape[1];
    if (dense_w1)
      return Status(ErrorCode::BadModelConfig,
                    where + ": tensor " + expected.name + " has shape " + shape_text(found->shape) + " (FFN width " +
                        std::to_string(found->shape[0]) + "), config.json's FFN width rule gives " +
                        std::to_string(config.ffn_size));
    return Status(ErrorCode::BadSafetensors, where + ": tensor " + expected.name + " has shape " +
                                                 shape_text(found->shape) + ", config.json implies " +
                                                 shape_text(expected.shape));
  }
  return ok_status();
}

}  // namespace ls::io
