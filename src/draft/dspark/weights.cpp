// DSpark weights: manifest check, bf16-as-stored or int8-per-row loading one matrix at a time.
#include "draft/dspark/weights.h"

#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_amx.h"

#include <algorithm>
#include <functional>
#include <sstream>

namespace ls::dspark {
namespace {

std::string shape_text(std::span<const int64_t> shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::string layer_name(int layer, const char* suffix) { return "layers." + std::to_string(layer) + "." + suffix; }

const io::TensorInfo& tensor(const io::Checkpoint& checkpoint, const std::string& name) {
  const io::TensorInfo* info = checkpoint.find(name);
  LS_CHECK(info != nullptr, "check_draft_tensors runs before loading, so every manifest tensor exists");
  return *info;
}

Status read_vector(const io::Checkpoint& checkpoint, const std::string& name, std::vector<int64_t> shape,
                   std::vector<float>& out, InitSteps& steps) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  LS_RETURN_IF_ERROR(steps.allocate(out, static_cast<size_t>(count), name));
  return checkpoint.read_f32(name, shape, out);
}

// Reads one matrix as stored (bf16 stays bf16; F32/F16 become fp32), or quantizes it to int8 rows.
Status read_matrix(const io::Checkpoint& checkpoint, const std::string& name, int64_t rows, int64_t cols, int bits,
                   DraftMatrix& out, InitSteps& steps) {
  const std::vector<int64_t> shape = {rows, cols};
  const size_t count = static_cast<size_t>(rows * cols);
  const bool stored_bf16 = tensor(checkpoint, name).dtype == io::DType::BF16;
  out.rows = out.dense.rows = rows;
  out.cols = out.dense.cols = cols;
  if (bits == 0) {
    if (stored_bf16) {
      LS_RETURN_IF_ERROR(steps.allocate(out.dense.b16, count, name));
      return checkpoint.read_bf16(name, shape, out.dense.b16);
    }
    LS_RETURN_IF_ERROR(steps.allocate(out.dense.f32, count, name));
    return checkpoint.read_f32(name, shape, out.dense.f32);
  }
  // bits 8: the matrix as stored in a temporary, quantized row by row into its final int8 buffer, then freed.
  std::vector<bf16> stored_b16;
  std::vector<float> stored_f32;
  if (stored_bf16) {
    LS_RETURN_IF_ERROR(steps.allocate(stored_b16, count, name + " (bf16 staging)"));
    LS_RETURN_IF_ERROR(checkpoint.read_bf16(name, shape, stored_b16));
  } else {
    LS_RETURN_IF_ERROR(steps.allocate(stored_f32, count, name + " (fp32 staging)"));
    LS_RETURN_IF_ERROR(checkpoint.read_f32(name, shape, stored_f32));
  }
  auto row_values = [&](int64_t row, float* values) {
    for (int64_t col = 0; col < cols; ++col) {
      const size_t index = static_cast<size_t>(row * cols + col);
      values[col] = stored_bf16 ? bf16_to_float(stored_b16[index]) : stored_f32[index];
    }
  };
  auto free_staging = [&] {  // before the panels are made, so the staging and both code layouts never coexist
    steps.drop(static_cast<int64_t>(stored_b16.size() * sizeof(bf16) + stored_f32.size() * sizeof(float)));
    std::vector<bf16>().swap(stored_b16);
    std::vector<float>().swap(stored_f32);
  };
  return quantize_draft_matrix(rows, cols, name, out, steps, row_values, free_staging);
}

}  // namespace

Status quantize_draft_matrix(int64_t rows, int64_t cols, const std::string& name, DraftMatrix& out, InitSteps& steps,
                             const std::function<void(int64_t row, float* values)>& row_values,
                             const std::function<void()>& rows_read) {
  const size_t count = static_cast<size_t>(rows * cols);
  out.rows = out.dense.rows = rows;
  out.cols = out.dense.cols = cols;
  LS_RETURN_IF_ERROR(steps.allocate(out.codes, count, name + " (int8 codes)"));
  LS_RETURN_IF_ERROR(steps.allocate(out.scales, static_cast<size_t>(rows), name + " (int8 scales)"));
  LS_RETURN_IF_ERROR(steps.allocate(out.code_sums, static_cast<size_t>(rows), name + " (int8 code sums)"));
  std::vector<float> values(static_cast<size_t>(cols));
  for (int64_t row = 0; row < rows; ++row) {
    row_values(row, values.data());
    compute::quantize_row_int8(values, std::span<int8_t>(out.codes).subspan(static_cast<size_t>(row * cols), cols),
                               out.scales[row]);
  }
  compute::sum_int8_codes(out.codes.data(), rows, cols, out.code_sums.data());
  if (rows_read) rows_read();
  if (compute::cpu_features().avx512_vnni) {  // the w8a8 kernel reads panels only: they replace the codes
    const std::vector<int8_t> panels = compute::pack_int8_panels(out.codes.data(), rows, cols);
    LS_RETURN_IF_ERROR(steps.allocate(out.panels, panels.size(), name + " (int8 panels)"));
    std::copy(panels.begin(), panels.end(), out.panels.begin());
    steps.drop(static_cast<int64_t>(out.codes.size()));
    std::vector<int8_t>().swap(out.codes);
  }
  return ok_status();
}

int64_t DraftMatrix::bytes() const {
  return static_cast<int64_t>(dense.f32.size() * sizeof(float) + dense.b16.size() * sizeof(bf16) + codes.size() +
                              scales.size() * sizeof(float) + code_sums.size() * sizeof(int32_t) + panels.size());
}

int8_t DraftMatrix::code(int64_t row, int64_t col) const {
  return codes.empty() ? compute::int8_panel_code(panels.data(), cols, row, col) : codes[row * cols + col];
}

void apply_matrix(const compute::OpContext& ctx, const float* x, int64_t rows, const DraftMatrix& w, float* y) {
  if (w.quantized()) {
    const compute::Int8Matrix int8{w.codes.empty() ? nullptr : w.codes.data(), w.scales.data(), w.rows, w.cols,
                                   w.code_sums.data(), w.panels.empty() ? nullptr : w.panels.data()};
    compute::matmul_int8(ctx, x, rows, int8, y);
  } else {
    compute::matmul(ctx, x, rows, w.dense.view(), y);
  }
}

int pack_draft_weights(DsparkWeights& weights) {
  std::vector<compute::OwnedMatrix*> order = {&weights.fc.dense};
  for (DraftLayerWeights& layer : weights.layers)
    for (DraftMatrix* m : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.gate_proj,
                           &layer.up_proj, &layer.down_proj})
      order.push_back(&m->dense);
  order.push_back(&weights.markov_w2.dense);
  return compute::pack_for_cpu(order, compute::cpu_packed_layout(compute::WeightsOf::Drafter));
}

int64_t DsparkWeights::bytes() const {
  auto floats = [](const std::vector<float>& v) { return static_cast<int64_t>(v.size() * sizeof(float)); };
  int64_t total = fc.bytes() + head.bytes() + floats(hidden_norm) + floats(final_norm) + markov_w2.bytes() +
                  floats(confidence_weight) + (confidence_weight.empty() ? 0 : 4) +
                  static_cast<int64_t>(markov_w1.b16.size() * sizeof(bf16)) + floats(markov_w1.f32);
  for (const DraftLayerWeights& layer : layers) {
    total += floats(layer.input_norm) + floats(layer.q_norm) + floats(layer.k_norm) + floats(layer.post_norm);
    for (const DraftMatrix* m : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.gate_proj,
                                 &layer.up_proj, &layer.down_proj}) {
      total += m->bytes();
    }
  }
  return total;
}

std::vector<ManifestEntry> draft_manifest(const DsparkConfig& c) {
  const int64_t d = c.hidden_size, hd = c.head_dim, q = c.q_size(), kv = c.kv_size(), ff = c.ffn_size;
  const int64_t V = c.vocab_size, r = c.markov_rank;
  std::vector<ManifestEntry> entries = {{"fc.weight", {d, c.tap_count() * d}}, {"hidden_norm.weight", {d}}};
  for (int layer = 0; layer < c.num_layers; ++layer) {
    entries.push_back({layer_name(layer, "input_layernorm.weight"), {d}});
    entries.push_back({layer_name(layer, "self_attn.q_proj.weight"), {q, d}});
    entries.push_back({layer_name(layer, "self_attn.k_proj.weight"), {kv, d}});
    entries.push_back({layer_name(layer, "self_attn.v_proj.weight"), {kv, d}});
    entries.push_back({layer_name(layer, "self_attn.o_proj.weight"), {d, q}});
    entries.push_back({layer_name(layer, "self_attn.q_norm.weight"), {hd}});
    entries.push_back({layer_name(layer, "self_attn.k_norm.weight"), {hd}});
    entries.push_back({layer_name(layer, "post_attention_layernorm.weight"), {d}});
    entries.push_back({layer_name(layer, "mlp.gate_proj.weight"), {ff, d}});
    entries.push_back({layer_name(layer, "mlp.up_proj.weight"), {ff, d}});
    entries.push_back({layer_name(layer, "mlp.down_proj.weight"), {d, ff}});
  }
  entries.push_back({"norm.weight", {d}});
  entries.push_back({"markov_head.markov_w1.weight", {V, r}});
  entries.push_back({"markov_head.markov_w2.weight", {V, r}});
  if (c.has_confidence) {
    entries.push_back({"confidence_head.proj.weight", {1, d + r}});
    entries.push_back({"confidence_head.proj.bias", {1}});
  }
  return entries;
}

Status check_draft_tensors(const io::Checkpoint& checkpoint, const DsparkConfig& config) {
  const std::vector<ManifestEntry> manifest = draft_manifest(config);
  for (const ManifestEntry& entry : manifest) {
    const io::TensorInfo* info = checkpoint.find(entry.name);
    if (info == nullptr) {
      return Status(ErrorCode::BadSafetensors,
                    "drafter checkpoint lacks " + entry.name + " " + shape_text(entry.shape));
    }
    if (info->shape != entry.shape) {
      return Status(ErrorCode::BadSafetensors, "drafter tensor " + entry.name + " has shape " +
                                                   shape_text(info->shape) + ", the config needs " +
                                                   shape_text(entry.shape));
    }
  }
  for (const io::TensorInfo& info : checkpoint.tensors()) {
    const std::string& name = info.name;
    if (name == "d2t" || name == "t2d") {
      return Status(ErrorCode::UnsupportedDraftShape, "drafter tensor " + name + " " + shape_text(info.shape) +
                                                          " maps a reduced draft vocabulary, which is not supported");
    }
    const bool expected =
        std::any_of(manifest.begin(), manifest.end(), [&](const ManifestEntry& e) { return e.name == name; });
    const bool target_copy =
        name == "embed_tokens.weight" || name == "lm_head.weight" || name == "model.embed_tokens.weight";
    const bool unused_confidence = !config.has_confidence && name.rfind("confidence_head.", 0) == 0;
    if (!expected && !target_copy && !unused_confidence) {
      return Status(ErrorCode::BadSafetensors,
                    "drafter checkpoint holds unexpected tensor " + name + " " + shape_text(info.shape));
    }
  }
  return ok_status();
}

Result<DsparkWeights> load_draft_weights(const io::Checkpoint& checkpoint, const DsparkConfig& c, int bits,
                                         InitSteps& steps) {
  LS_RETURN_IF_ERROR(check_draft_bits(bits));
  LS_RETURN_IF_ERROR(check_draft_tensors(checkpoint, c));
  const int64_t d = c.hidden_size, hd = c.head_dim, q = c.q_size(), kv = c.kv_size(), ff = c.ffn_size;
  DsparkWeights w;
  LS_RETURN_IF_ERROR(read_matrix(checkpoint, "fc.weight", d, c.tap_count() * d, bits, w.fc, steps));
  LS_RETURN_IF_ERROR(read_vector(checkpoint, "hidden_norm.weight", {d}, w.hidden_norm, steps));
  w.layers.resize(c.num_layers);
  for (int index = 0; index < c.num_layers; ++index) {
    DraftLayerWeights& layer = w.layers[index];
    auto name = [&](const char* suffix) { return layer_name(index, suffix); };
    LS_RETURN_IF_ERROR(read_vector(checkpoint, name("input_layernorm.weight"), {d}, layer.input_norm, steps));
    LS_RETURN_IF_ERROR(read_matrix(checkpoint, name("self_attn.q_proj.weight"), q, d, bits, layer.q_proj, steps));
    LS_RETURN_IF_ERROR(read_matrix(checkpoint, name("self_attn.k_proj.weight"), kv, d, bits, layer.k_proj, steps));
    LS_RETURN_IF_ERROR(read_matrix(checkpoint, name("self_attn.v_proj.weight"), kv, d, bits, layer.v_proj, steps));
    LS_RETURN_IF_ERROR(read_matrix(checkpoint, name("self_attn.o_proj.weight"), d, q, bits, layer.o_proj, steps));
    LS_RETURN_IF_ERROR(read_vector(checkpoint, name("self_attn.q_norm.weight"), {hd}, layer.q_norm, steps));
    LS_RETURN_IF_ERROR(read_vector(checkpoint, name("self_attn.k_norm.weight"), {hd}, layer.k_norm, steps));
    LS_RETURN_IF_ERROR(read_vector(checkpoint, name("post_attention_layernorm.weight"), {d}, layer.post_norm, steps));
    LS_RETURN_IF_ERROR(read_matrix(checkpoint, name("mlp.gate_proj.weight"), ff, d, bits, layer.gate_proj, steps));
    LS_RETURN_IF_ERROR(read_matrix(checkpoint, name("mlp.up_proj.weight"), ff, d, bits, layer.up_proj, steps));
    LS_RETURN_IF_ERROR(read_matrix(checkpoint, name("mlp.down_proj.weight"), d, ff, bits, layer.down_proj, steps));
  }
  LS_RETURN_IF_ERROR(read_vector(checkpoint, "norm.weight", {d}, w.final_norm, steps));
  const int64_t V = c.vocab_size, r = c.markov_rank;
  // W1 is a gather table: kept as stored (bf16, or fp32) in every mode.
  const std::string w1 = "markov_head.markov_w1.weight";
  w.markov_w1.rows = V;
  w.markov_w1.cols = r;
  if (tensor(checkpoint, w1).dtype == io::DType::BF16) {
    LS_RETURN_IF_ERROR(steps.allocate(w.markov_w1.b16, static_cast<size_t>(V * r), w1));
    LS_RETURN_IF_ERROR(checkpoint.read_bf16(w1, std::vector<int64_t>{V, r}, w.markov_w1.b16));
  } else {
    LS_RETURN_IF_ERROR(steps.allocate(w.markov_w1.f32, static_cast<size_t>(V * r), w1));
    LS_RETURN_IF_ERROR(checkpoint.read_f32(w1, std::vector<int64_t>{V, r}, w.markov_w1.f32));
  }
  LS_RETURN_IF_ERROR(read_matrix(checkpoint, "markov_head.markov_w2.weight", V, r, bits, w.markov_w2, steps));
  if (c.has_confidence) {
    LS_RETURN_IF_ERROR(read_vector(checkpoint, "confidence_head.proj.weight", {1, d + r}, w.confidence_weight, steps));
    std::vector<float> bias;
    LS_RETURN_IF_ERROR(read_vector(checkpoint, "confidence_head.proj.bias", {1}, bias, steps));
    w.confidence_bias = bias[0];  // its 4 bytes stay counted: bytes() includes the bias
  }
  return w;
}

}  // namespace ls::dspark
