// LFM2 / LFM2-MoE weights in memory: per-layer structs with Hugging Face names, loaded fp32 or bf16 as the mode says.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "compute/ops.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace ls::lfm2 {

using compute::NumericMode;
using compute::OwnedMatrix;

struct ExpertWeights {
  OwnedMatrix w1;  // [I, D] gate
  OwnedMatrix w3;  // [I, D] up
  OwnedMatrix w2;  // [D, I] down
};

// One decoder layer; only the fields of its kind (conv / attention, dense / MoE) are filled.
// Vectors (norms, conv kernel, biases) are fp32 arrays holding bf16-exact values in Bf16 mode.
struct LayerWeights {
  io::LayerKind kind = io::LayerKind::Conv;
  bool moe = false;
  std::vector<float> operator_norm;  // [D] model.layers.{i}.operator_norm.weight
  std::vector<float> ffn_norm;       // [D] model.layers.{i}.ffn_norm.weight
  // conv.*
  OwnedMatrix conv_in_proj;          // [3D, D] (+ bias [3D] when conv_bias)
  std::vector<float> conv_kernel;    // [D, K] conv.conv.weight [D, 1, K]
  std::vector<float> conv_bias;      // [D] or empty
  OwnedMatrix conv_out_proj;         // [D, D]
  // self_attn.*
  OwnedMatrix q_proj;                // [H*hd, D]
  OwnedMatrix k_proj;                // [KV*hd, D]
  OwnedMatrix v_proj;                // [KV*hd, D]
  OwnedMatrix attn_out_proj;         // [D, H*hd] self_attn.out_proj
  std::vector<float> q_norm;         // [hd] self_attn.q_layernorm.weight
  std::vector<float> k_norm;         // [hd] self_attn.k_layernorm.weight
  // feed_forward.* (dense)
  OwnedMatrix w1;                    // [F, D]
  OwnedMatrix w3;                    // [F, D]
  OwnedMatrix w2;                    // [D, F]
  // feed_forward.* (MoE)
  OwnedMatrix router;                // [E, D] feed_forward.gate.weight
  std::vector<float> expert_bias;    // [E] fp32 as stored (used only to select)
  std::vector<ExpertWeights> experts;  // [E]
};

struct Weights {
  NumericMode mode = NumericMode::Fp32;
  // In Bf16 mode, BF16 tensors of the checkpoint are used in place (OwnedMatrix::mapped_b16); this keeps the
  // mapping alive. Null when nothing is borrowed.
  std::unique_ptr<io::Checkpoint> mapping;
  OwnedMatrix embedding;             // [V, D] model.embed_tokens.weight (also the head when tied)
  OwnedMatrix lm_head;               // [V, D] lm_head.weight when untied, else empty
  std::vector<float> final_norm;     // [D] model.embedding_norm.weight (the FINAL norm)
  std::vector<LayerWeights> layers;

  const OwnedMatrix& head() const { return lm_head.rows > 0 ? lm_head : embedding; }
  int64_t bytes() const;
};

// Reads every tensor the config implies (shapes already checked by io::check_target_tensors). In Bf16 mode the
// checkpoint's BF16 matrices are borrowed from the mapping (no copy) and the checkpoint moves into the weights.
Result<Weights> load_weights(std::unique_ptr<io::Checkpoint> checkpoint, const io::ModelConfig& config,
                             NumericMode mode);

// Random weights for a config (tests): matrices ~ U(-1,1)/sqrt(cols), norms ~ 1 +- 0.4, expert_bias ~ +-0.3.
Weights random_weights(const io::ModelConfig& config, NumericMode mode, uint64_t seed);

}  // namespace ls::lfm2
