// Builds LFM2 weights from a checkpoint (or from seeded random values for tests), fp32 or bf16 per the numeric mode.
#include "model/lfm2/weights.h"

#include <cmath>
#include <string>

#include "base/hash.h"

namespace ls::lfm2 {
namespace {

enum class VectorKind { Norm, ConvKernel, Bias, ExpertBias };

// Where tensor values come from: a checkpoint or a seeded generator.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Fills values [elements] (fp32) for the named tensor of the given shape.
  virtual Status read_f32(const std::string& name, const std::vector<int64_t>& shape, VectorKind kind,
                          std::vector<float>& out) = 0;
  virtual Status read_bf16(const std::string& name, const std::vector<int64_t>& shape, std::vector<bf16>& out) = 0;
  // The tensor's bf16 values in place when it is stored as BF16 with that shape, else null (then read_bf16 copies).
  virtual const bf16* mapped_bf16(const std::string& name, const std::vector<int64_t>& shape) { return nullptr; }
};

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

class CheckpointSource final : public TensorSource {
 public:
  explicit CheckpointSource(const io::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  Status read_f32(const std::string& name, const std::vector<int64_t>& shape, VectorKind,
                  std::vector<float>& out) override {
    out.resize(elements(shape));
    return checkpoint_.read_f32(name, shape, out);
  }
  Status read_bf16(const std::string& name, const std::vector<int64_t>& shape, std::vector<bf16>& out) override {
    out.resize(elements(shape));
    return checkpoint_.read_bf16(name, shape, out);
  }
  const bf16* mapped_bf16(const std::string& name, const std::vector<int64_t>& shape) override {
    const io::TensorInfo* info = checkpoint_.find(name);
    if (!info || info->dtype != io::DType::BF16 || info->shape != shape) return nullptr;
    if (reinterpret_cast<uintptr_t>(info->data) % alignof(bf16) != 0) return nullptr;
    return reinterpret_cast<const bf16*>(info->data);
  }

 private:
  const io::Checkpoint& checkpoint_;
};

class RandomSource final : public TensorSource {
 public:
  explicit RandomSource(uint64_t seed) : state_(seed) {}
  Status read_f32(const std::string& name, const std::vector<int64_t>& shape, VectorKind kind,
                  std::vector<float>& out) override {
    out.resize(elements(shape));
    const double scale = kind == VectorKind::Norm         ? 0.4
                         : kind == VectorKind::ExpertBias ? 0.3
                         : kind == VectorKind::ConvKernel ? 0.6
                         : shape.size() == 2              ? 1.0 / std::sqrt(static_cast<double>(shape[1]))
                                                          : 0.1;
    const double center = kind == VectorKind::Norm ? 1.0 : 0.0;
    for (float& value : out) value = static_cast<float>(center + scale * (2.0 * next() - 1.0));
    return ok_status();
  }
  Status read_bf16(const std::string& name, const std::vector<int64_t>& shape, std::vector<bf16>& out) override {
    std::vector<float> values;
    LS_RETURN_IF_ERROR(read_f32(name, shape, VectorKind::Bias, values));
    out.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = float_to_bf16(values[i]);
    return ok_status();
  }

 private:
  double next() { return uniform_open01(splitmix64(state_++)); }
  uint64_t state_;
};

class Builder {
 public:
  Builder(TensorSource& source, NumericMode mode) : source_(source), mode_(mode) {}

  Status matrix(const std::string& name, int64_t rows, int64_t cols, OwnedMatrix& out) {
    out.rows = rows;
    out.cols = cols;
    if (mode_ == NumericMode::Bf16) {
      out.mapped_b16 = source_.mapped_bf16(name, {rows, cols});
      return out.mapped_b16 ? ok_status() : source_.read_bf16(name, {rows, cols}, out.b16);
    }
    return source_.read_f32(name, {rows, cols}, VectorKind::Bias, out.f32);
  }

  // Vectors are fp32 arrays; in Bf16 mode they hold the bf16 values the model would use (expert_bias stays fp32).
  Status vector(const std::string& name, const std::vector<int64_t>& shape, VectorKind kind, std::vector<float>& out) {
    LS_RETURN_IF_ERROR(source_.read_f32(name, shape, kind, out));
    if (mode_ == NumericMode::Bf16 && kind != VectorKind::ExpertBias)
      for (float& value : out) value = round_to_bf16(value);
    return ok_status();
  }

 private:
  TensorSource& source_;
  NumericMode mode_;
};

Status build_layer(Builder& build, const io::ModelConfig& config, int index, LayerWeights& layer) {
  const int64_t D = config.hidden_size, hd = config.head_dim, K = config.conv_kernel;
  const std::string prefix = "model.layers." + std::to_string(index) + ".";
  layer.kind = config.layer_kinds[index];
  layer.moe = config.is_moe_layer(index);
  LS_RETURN_IF_ERROR(build.vector(prefix + "operator_norm.weight", {D}, VectorKind::Norm, layer.operator_norm));
  LS_RETURN_IF_ERROR(build.vector(prefix + "ffn_norm.weight", {D}, VectorKind::Norm, layer.ffn_norm));
  if (layer.kind == io::LayerKind::Conv) {
    LS_RETURN_IF_ERROR(build.matrix(prefix + "conv.in_proj.weight", 3 * D, D, layer.conv_in_proj));
    LS_RETURN_IF_ERROR(build.vector(prefix + "conv.conv.weight", {D, 1, K}, VectorKind::ConvKernel, layer.conv_kernel));
    LS_RETURN_IF_ERROR(build.matrix(prefix + "conv.out_proj.weight", D, D, layer.conv_out_proj));
    if (config.conv_bias) {
      LS_RETURN_IF_ERROR(build.vector(prefix + "conv.in_proj.bias", {3 * D}, VectorKind::Bias, layer.conv_in_proj.bias));
      LS_RETURN_IF_ERROR(build.vector(prefix + "conv.conv.bias", {D}, VectorKind::Bias, layer.conv_bias));
      LS_RETURN_IF_ERROR(build.vector(prefix + "conv.out_proj.bias", {D}, VectorKind::Bias, layer.conv_out_proj.bias));
    }
  } else {
    const int64_t q_width = int64_t{config.num_heads} * hd, kv_width = int64_t{config.num_kv_heads} * hd;
    LS_RETURN_IF_ERROR(build.matrix(prefix + "self_attn.q_proj.weight", q_width, D, layer.q_proj));
    LS_RETURN_IF_ERROR(build.matrix(prefix + "self_attn.k_proj.weight", kv_width, D, layer.k_proj));
    LS_RETURN_IF_ERROR(build.matrix(prefix + "self_attn.v_proj.weight", kv_width, D, layer.v_proj));
    LS_RETURN_IF_ERROR(build.matrix(prefix + "self_attn.out_proj.weight", D, q_width, layer.attn_out_proj));
    LS_RETURN_IF_ERROR(build.vector(prefix + "self_attn.q_layernorm.weight", {hd}, VectorKind::Norm, layer.q_norm));
    LS_RETURN_IF_ERROR(build.vector(prefix + "self_attn.k_layernorm.weight", {hd}, VectorKind::Norm, layer.k_norm));
  }
  const std::string ffn = prefix + "feed_forward.";
  if (!layer.moe) {
    const int64_t F = config.ffn_size;
    LS_RETURN_IF_ERROR(build.matrix(ffn + "w1.weight", F, D, layer.w1));
    LS_RETURN_IF_ERROR(build.matrix(ffn + "w3.weight", F, D, layer.w3));
    LS_RETURN_IF_ERROR(build.matrix(ffn + "w2.weight", D, F, layer.w2));
    return ok_status();
  }
  const io::MoeConfig& moe = *config.moe;
  const int64_t E = moe.num_experts, I = moe.expert_ffn_size;
  LS_RETURN_IF_ERROR(build.matrix(ffn + "gate.weight", E, D, layer.router));
  if (moe.use_expert_bias)
    LS_RETURN_IF_ERROR(build.vector(ffn + "expert_bias", {E}, VectorKind::ExpertBias, layer.expert_bias));
  layer.experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string expert = ffn + "experts." + std::to_string(e) + ".";
    LS_RETURN_IF_ERROR(build.matrix(expert + "w1.weight", I, D, layer.experts[e].w1));
    LS_RETURN_IF_ERROR(build.matrix(expert + "w3.weight", I, D, layer.experts[e].w3));
    LS_RETURN_IF_ERROR(build.matrix(expert + "w2.weight", D, I, layer.experts[e].w2));
  }
  return ok_status();
}

Result<Weights> build_weights(TensorSource& source, const io::ModelConfig& config, NumericMode mode) {
  Builder build(source, mode);
  Weights weights;
  weights.mode = mode;
  const int64_t V = config.vocab_size, D = config.hidden_size;
  LS_RETURN_IF_ERROR(build.matrix("model.embed_tokens.weight", V, D, weights.embedding));
  weights.layers.resize(config.num_layers);
  for (int layer = 0; layer < config.num_layers; ++layer)
    LS_RETURN_IF_ERROR(build_layer(build, config, layer, weights.layers[layer]));
  LS_RETURN_IF_ERROR(build.vector("model.embedding_norm.weight", {D}, VectorKind::Norm, weights.final_norm));
  if (!config.tie_embeddings) LS_RETURN_IF_ERROR(build.matrix("lm_head.weight", V, D, weights.lm_head));
  return weights;
}

int64_t matrix_bytes(const OwnedMatrix& m) {
  const int64_t mapped = m.mapped_b16 ? m.rows * m.cols * static_cast<int64_t>(sizeof(bf16)) : 0;
  return mapped + static_cast<int64_t>(m.f32.size() * sizeof(float) + m.b16.size() * sizeof(bf16) + m.bias.size() * 4);
}

}  // namespace

int64_t Weights::bytes() const {
  int64_t total = matrix_bytes(embedding) + matrix_bytes(lm_head) + 4 * static_cast<int64_t>(final_norm.size());
  for (const LayerWeights& l : layers) {
    for (const OwnedMatrix* m : {&l.conv_in_proj, &l.conv_out_proj, &l.q_proj, &l.k_proj, &l.v_proj,
                                 &l.attn_out_proj, &l.w1, &l.w3, &l.w2, &l.router})
      total += matrix_bytes(*m);
    for (const ExpertWeights& e : l.experts) total += matrix_bytes(e.w1) + matrix_bytes(e.w3) + matrix_bytes(e.w2);
    total += 4 * static_cast<int64_t>(l.operator_norm.size() + l.ffn_norm.size() + l.conv_kernel.size() +
                                      l.conv_bias.size() + l.q_norm.size() + l.k_norm.size() + l.expert_bias.size());
  }
  return total;
}

Result<Weights> load_weights(std::unique_ptr<io::Checkpoint> checkpoint, const io::ModelConfig& config,
                             NumericMode mode) {
  CheckpointSource source(*checkpoint);
  LS_ASSIGN_OR_RETURN(Weights weights, build_weights(source, config, mode));
  if (mode == NumericMode::Bf16) weights.mapping = std::move(checkpoint);
  return weights;
}

Weights random_weights(const io::ModelConfig& config, NumericMode mode, uint64_t seed) {
  RandomSource source(seed);
  Result<Weights> weights = build_weights(source, config, mode);
  LS_CHECK(weights.ok(), "random weights cannot fail");
  return std::move(weights).value();
}

}  // namespace ls::lfm2
