// upload_weights: host Bf16-mode weights (mapped or owned) into device buffers, fusing gate|up and stacking experts.
#include "model/lfm2/cuda/device_weights.h"

#include <string>

#include "compute/ops.h"

namespace ls::lfm2::gpu {
namespace {

const bf16* bf16_values(const OwnedMatrix& m) { return m.view().b16; }

Status copy_rows(const OwnedMatrix& m, bf16* dst, const char* what) {
  const bf16* src = bf16_values(m);
  if (!src) return Status(ErrorCode::InvalidArgument, std::string(what) + ": the CUDA target needs bf16 weights");
  LS_CUDA_TRY(cudaMemcpy(dst, src, sizeof(bf16) * m.rows * m.cols, cudaMemcpyHostToDevice));
  return ok_status();
}

Status upload_floats(const std::vector<float>& values, cuda::DeviceBuffer<float>& out) {
  LS_RETURN_IF_ERROR(out.allocate(values.size()));
  if (!values.empty())
    LS_CUDA_TRY(cudaMemcpy(out.data(), values.data(), sizeof(float) * values.size(), cudaMemcpyHostToDevice));
  return ok_status();
}

// fp32 vectors holding bf16-exact values (norms) as bf16.
Status upload_as_bf16(const std::vector<float>& values, cuda::DeviceBuffer<bf16>& out) {
  std::vector<bf16> converted(values.size());
  for (size_t i = 0; i < values.size(); ++i) converted[i] = float_to_bf16(values[i]);
  LS_RETURN_IF_ERROR(out.allocate(converted.size()));
  if (!converted.empty())
    LS_CUDA_TRY(cudaMemcpy(out.data(), converted.data(), sizeof(bf16) * converted.size(), cudaMemcpyHostToDevice));
  return ok_status();
}

Status upload_matrix(const OwnedMatrix& m, DeviceMat& out, const char* what) {
  out.rows = m.rows;
  out.cols = m.cols;
  LS_RETURN_IF_ERROR(out.w.allocate(m.rows * m.cols));
  LS_RETURN_IF_ERROR(copy_rows(m, out.w.data(), what));
  return upload_floats(m.bias, out.bias);
}

// [a; b] stacked by rows: a [ra, cols] then b [rb, cols].
Status upload_stacked(const OwnedMatrix& a, const OwnedMatrix& b, DeviceMat& out, const char* what) {
  out.rows = a.rows + b.rows;
  out.cols = a.cols;
  LS_RETURN_IF_ERROR(out.w.allocate(out.rows * out.cols));
  LS_RETURN_IF_ERROR(copy_rows(a, out.w.data(), what));
  return copy_rows(b, out.w.data() + a.rows * a.cols, what);
}

int64_t bytes_of(const DeviceMat& m) { return static_cast<int64_t>(m.w.bytes() + m.bias.bytes()); }

}  // namespace

Result<DeviceWeights> upload_weights(const io::ModelConfig& config, const Weights& weights) {
  if (weights.mode != NumericMode::Bf16)
    return Status(ErrorCode::InvalidArgument, "the CUDA target runs bf16 weights only (fp32 mode was asked)");
  DeviceWeights out;
  LS_RETURN_IF_ERROR(upload_matrix(weights.embedding, out.embedding, "embedding"));
  if (weights.lm_head.rows > 0) LS_RETURN_IF_ERROR(upload_matrix(weights.lm_head, out.lm_head, "lm_head"));
  LS_RETURN_IF_ERROR(upload_as_bf16(weights.final_norm, out.final_norm));
  LS_RETURN_IF_ERROR(upload_floats(compute::make_rope_table(config.head_dim, config.rope_theta).inv_freq, out.inv_freq));
  out.bytes = bytes_of(out.embedding) + bytes_of(out.lm_head);
  out.layers.resize(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const LayerWeights& w = weights.layers[l];
    DeviceLayer& d = out.layers[l];
    d.kind = w.kind;
    d.moe = w.moe;
    LS_RETURN_IF_ERROR(upload_as_bf16(w.operator_norm, d.operator_norm));
    LS_RETURN_IF_ERROR(upload_as_bf16(w.ffn_norm, d.ffn_norm));
    if (w.kind == io::LayerKind::Conv) {
      LS_RETURN_IF_ERROR(upload_matrix(w.conv_in_proj, d.in_proj, "conv.in_proj"));
      LS_RETURN_IF_ERROR(upload_floats(w.conv_kernel, d.conv_kernel));
      LS_RETURN_IF_ERROR(upload_floats(w.conv_bias, d.conv_bias));
      LS_RETURN_IF_ERROR(upload_matrix(w.conv_out_proj, d.conv_out, "conv.out_proj"));
      out.bytes += bytes_of(d.in_proj) + bytes_of(d.conv_out);
    } else {
      LS_RETURN_IF_ERROR(upload_matrix(w.q_proj, d.q_proj, "q_proj"));
      LS_RETURN_IF_ERROR(upload_matrix(w.k_proj, d.k_proj, "k_proj"));
      LS_RETURN_IF_ERROR(upload_matrix(w.v_proj, d.v_proj, "v_proj"));
      LS_RETURN_IF_ERROR(upload_matrix(w.attn_out_proj, d.attn_out, "out_proj"));
      LS_RETURN_IF_ERROR(upload_as_bf16(w.q_norm, d.q_norm));
      LS_RETURN_IF_ERROR(upload_as_bf16(w.k_norm, d.k_norm));
      out.bytes += bytes_of(d.q_proj) + bytes_of(d.k_proj) + bytes_of(d.v_proj) + bytes_of(d.attn_out);
    }
    if (!w.moe) {
      LS_RETURN_IF_ERROR(upload_stacked(w.w1, w.w3, d.gate_up, "feed_forward.w1|w3"));
      LS_RETURN_IF_ERROR(upload_matrix(w.w2, d.down, "feed_forward.w2"));
      out.bytes += bytes_of(d.gate_up) + bytes_of(d.down);
      continue;
    }
    LS_RETURN_IF_ERROR(upload_matrix(w.router, d.router, "feed_forward.gate"));
    LS_RETURN_IF_ERROR(upload_floats(w.expert_bias, d.expert_bias));
    const int64_t E = static_cast<int64_t>(w.experts.size());
    const int64_t I = config.moe->expert_ffn_size, D = config.hidden_size;
    LS_RETURN_IF_ERROR(d.experts_gate_up.allocate(E * 2 * I * D));
    LS_RETURN_IF_ERROR(d.experts_down.allocate(E * D * I));
    for (int64_t e = 0; e < E; ++e) {
      const ExpertWeights& x = w.experts[e];
      LS_RETURN_IF_ERROR(copy_rows(x.w1, d.experts_gate_up.data() + e * 2 * I * D, "experts.w1"));
      LS_RETURN_IF_ERROR(copy_rows(x.w3, d.experts_gate_up.data() + e * 2 * I * D + I * D, "experts.w3"));
      LS_RETURN_IF_ERROR(copy_rows(x.w2, d.experts_down.data() + e * D * I, "experts.w2"));
    }
    out.bytes += bytes_of(d.router) + static_cast<int64_t>(d.experts_gate_up.bytes() + d.experts_down.bytes());
  }
  return out;
}

}  // namespace ls::lfm2::gpu
