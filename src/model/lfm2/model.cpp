// The LFM2 layer loop (reference/lfm2.md §0, §2): embed, per layer operator_norm -> ShortConv or attention ->
// residual -> ffn_norm -> SwiGLU or MoE -> residual; then embedding_norm (the final norm) and the tied head.
#include "model/lfm2/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "base/check.h"
#include "compute/cpu/fused_ops.h"
#include "model/lfm2/op_split.h"

namespace ls::lfm2 {

using compute::OpContext;

namespace {

// Packs every bf16 matrix into the CPU kernels' panels, all in one arena in the order a forward reads them (layer by
// layer, q/k/v and w1/w3 side by side, the head last), so a decode step streams one contiguous run. A matrix borrowed
// from the checkpoint mapping then gives its pages back (they refault from the file if a fallback kernel or the
// embedding gather reads them), so the resident weights stay about one copy.
void pack_weights(Weights& weights) {
  std::vector<OwnedMatrix*> order;
  for (LayerWeights& layer : weights.layers) {
    for (OwnedMatrix* m : {&layer.conv_in_proj, &layer.conv_out_proj, &layer.q_proj, &layer.k_proj, &layer.v_proj,
                           &layer.attn_out_proj, &layer.w1, &layer.w3, &layer.w2, &layer.router})
      order.push_back(m);
    for (ExpertWeights& expert : layer.experts)
      for (OwnedMatrix* m : {&expert.w1, &expert.w3, &expert.w2}) order.push_back(m);
  }
  order.push_back(weights.lm_head.rows > 0 ? &weights.lm_head : &weights.embedding);
  compute::pack_for_cpu(order);
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (const OwnedMatrix* matrix : order) {
    if (!matrix->packed || !matrix->mapped_b16) continue;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(matrix->mapped_b16) + page - 1) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(matrix->mapped_b16 + matrix->rows * matrix->cols) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

}  // namespace

Model::Model(io::ModelConfig config, Weights weights, int threads)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      rope_(compute::make_rope_table(config_.head_dim, config_.rope_theta)),
      pool_(threads) {
  pack_weights(weights_);
  for (io::LayerKind kind : config_.layer_kinds) {
    const bool attention = kind == io::LayerKind::Attention;
    kv_slot_.push_back(attention ? attention_layers_++ : -1);
    conv_slot_.push_back(attention ? -1 : conv_layers_++);
  }
}

StreamState Model::new_stream() const {
  StreamState stream;
  stream.kv.resize(attention_layers_);
  const size_t history = static_cast<size_t>(config_.conv_kernel - 1) * config_.hidden_size;
  stream.conv_history.assign(conv_layers_, std::vector<float>(history, 0.0f));
  stream.window_z.resize(conv_layers_);
  return stream;
}

void Model::run_pass(std::span<const int32_t> tokens, std::span<const Segment> segments,
                     std::span<const int> tap_layers, float* hidden, float* taps) {
  const int64_t rows = static_cast<int64_t>(tokens.size()), D = config_.hidden_size;
  const float eps = config_.norm_eps;
  positions_.resize(rows);
  for (const Segment& segment : segments)
    for (int64_t r = 0; r < segment.rows; ++r) positions_[segment.row_offset + r] = segment.first_position + r;
  u_.resize(rows * D);
  mix_.resize(rows * D);

  float* h = hidden;  // [rows, D] the residual stream
  op_split_forward(rows);
  {
    OpTimer timer(OpKind::Embed);
    compute::embed_rows(ctx(), weights_.embedding.view(), tokens, h);
  }
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    // operator_norm -> mixer (ShortConv or attention) -> residual
    {
      OpTimer timer(OpKind::Norm);
      compute::rms_norm(ctx(), h, rows, D, w.operator_norm.data(), eps, u_.data());
    }
    if (w.kind == io::LayerKind::Conv)
      short_conv_block(layer, conv_slot_[layer], u_.data(), segments, h);
    else
      attention_block(layer, kv_slot_[layer], u_.data(), segments, h);
    // ffn_norm -> SwiGLU or MoE -> residual
    {
      OpTimer timer(OpKind::Norm);
      compute::rms_norm(ctx(), h, rows, D, w.ffn_norm.data(), eps, u_.data());
    }
    if (w.moe) {
      moe_block(layer, u_.data(), rows, mix_.data());
      compute::add_residual(ctx(), h, mix_.data(), rows * D);
    } else {
      {
        OpTimer timer(OpKind::GateUp);
        ffn_act(w.w1, w.w3, u_.data(), rows);
      }
      project_add(w.w2, act_.data(), rows, h);
    }
    // taps: this layer's output, before the final norm
    const int64_t tap_count = static_cast<int64_t>(tap_layers.size());
    for (int64_t t = 0; t < tap_count; ++t)
      if (tap_layers[t] == layer)
        for (int64_t r = 0; r < rows; ++r) std::memcpy(taps + (r * tap_count + t) * D, h + r * D, sizeof(float) * D);
  }
}

void Model::project_add(const OwnedMatrix& w, const float* in, int64_t rows, float* h) {
  OpTimer timer(OpKind::ProjectAdd);
  mix_.resize(rows * w.rows);
  if (compute::matmul_add_residual(ctx(), in, rows, w.view(), mix_.data(), h)) return;
  compute::matmul(ctx(), in, rows, w.view(), mix_.data());
  compute::add_residual(ctx(), h, mix_.data(), rows * w.rows);
}

void Model::short_conv_block(int layer, int slot, const float* u, std::span<const Segment> segments, float* h) {
  const LayerWeights& w = weights_.layers[layer];
  const int64_t D = config_.hidden_size;
  const int64_t rows = static_cast<int64_t>(positions_.size());
  wide_.resize(rows * 3 * D);  // [rows, 3D] B | C | x
  act_.resize(rows * D);       // [rows, D] y = C * conv(B * x)
  conv_inputs_.clear();
  for (const Segment& segment : segments) {
    std::vector<float>& z = segment.stream->window_z[slot];  // [window rows, D]
    z.resize((segment.rows_before + segment.rows) * D);
    compute::ShortConvInput input;
    input.bcx = wide_.data() + segment.row_offset * 3 * D;
    input.rows = segment.rows;
    input.width = static_cast<int>(D);
    input.kernel = config_.conv_kernel;
    input.history = segment.stream->conv_history[slot].data();
    input.z_before = z.data();
    input.rows_before = segment.rows_before;
    input.conv_weight = w.conv_kernel.data();
    input.conv_bias = w.conv_bias.empty() ? nullptr : w.conv_bias.data();
    conv_inputs_.push_back(input);
  }
  // Each segment's z rows of this window and its y rows in act_.
  auto z_out = [&](size_t i) { return segments[i].stream->window_z[slot].data() + segments[i].rows_before * D; };
  auto y_out = [&](size_t i) { return act_.data() + segments[i].row_offset * D; };
  std::optional<OpTimer> timer(std::in_place, OpKind::ConvIn);
  const bool fused = compute::matmul_conv_in(ctx(), u, rows, w.conv_in_proj.view(), wide_.data(),
                                             [&](int64_t begin, int64_t end) {
    const compute::OpContext here{nullptr, mode()};
    for (size_t i = 0; i < conv_inputs_.size(); ++i)
      compute::short_conv_range(here, conv_inputs_[i], begin, end, z_out(i), y_out(i));
  });
  if (!fused) {
    compute::matmul(ctx(), u, rows, w.conv_in_proj.view(), wide_.data());
    for (size_t i = 0; i < conv_inputs_.size(); ++i) compute::short_conv(ctx(), conv_inputs_[i], z_out(i), y_out(i));
  }
  timer.reset();
  project_add(w.conv_out_proj, act_.data(), rows, h);
}

void Model::attention_block(int layer, int slot, const float* u, std::span<const Segment> segments, float* h) {
  const LayerWeights& w = weights_.layers[layer];
  const int H = config_.num_heads, KV = config_.num_kv_heads, hd = config_.head_dim;
  const int64_t rows = static_cast<int64_t>(positions_.size());
  const int64_t q_width = int64_t{H} * hd, kv_width = int64_t{KV} * hd;
  q_.resize(rows * q_width);   // [rows, H, hd]
  k_.resize(rows * kv_width);  // [rows, KV, hd]
  v_.resize(rows * kv_width);  // [rows, KV, hd]
  attn_.resize(rows * q_width);
  // q, k, v in one pool call (packed side by side: one stream)
  const compute::Matrix qkv[] = {w.q_proj.view(), w.k_proj.view(), w.v_proj.view()};
  float* const qkv_out[] = {q_.data(), k_.data(), v_.data()};
  {
    OpTimer timer(OpKind::Qkv);
    compute::matmul_group(ctx(), u, rows, qkv, qkv_out);
  }
  std::optional<OpTimer> timer(std::in_place, OpKind::QkRope);
  // per-head q/k RMSNorm before RoPE
  compute::rms_norm(ctx(), q_.data(), rows * H, hd, w.q_norm.data(), config_.norm_eps, q_.data());
  compute::rms_norm(ctx(), k_.data(), rows * KV, hd, w.k_norm.data(), config_.norm_eps, k_.data());
  compute::rope_neox(ctx(), q_.data(), rows, H, positions_.data(), rope_);
  compute::rope_neox(ctx(), k_.data(), rows, KV, positions_.data(), rope_);
  timer.reset();
  const compute::AttentionShape shape{H, KV, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  for (const Segment& segment : segments) {
    KvCache& cache = segment.stream->kv[slot];
    const float* q = q_.data() + segment.row_offset * q_width;
    float* out = attn_.data() + segment.row_offset * q_width;
    const int64_t begin = segment.row_offset * kv_width, end = (segment.row_offset + segment.rows) * kv_width;
    timer.emplace(OpKind::KvAppend);
    if (mode() == NumericMode::Bf16) {
      LS_CHECK(static_cast<int64_t>(cache.keys_b16.size()) == segment.first_position * kv_width,
               "the KV cache must end where the segment starts");
      for (int64_t i = begin; i < end; ++i) {
        cache.keys_b16.push_back(float_to_bf16(k_[i]));  // exact: k and v are bf16 values
        cache.values_b16.push_back(float_to_bf16(v_[i]));
      }
      timer.emplace(OpKind::Attention);
      compute::attention(ctx(), q, segment.rows, segment.first_position, cache.keys_b16.data(),
                         cache.values_b16.data(), shape, out);
    } else {
      LS_CHECK(static_cast<int64_t>(cache.keys_f32.size()) == segment.first_position * kv_width,
               "the KV cache must end where the segment starts");
      cache.keys_f32.insert(cache.keys_f32.end(), k_.begin() + begin, k_.begin() + end);
      cache.values_f32.insert(cache.values_f32.end(), v_.begin() + begin, v_.begin() + end);
      timer.emplace(OpKind::Attention);
      compute::attention(ctx(), q, segment.rows, segment.first_position, cache.keys_f32.data(),
                         cache.values_f32.data(), shape, out);
    }
  }
  timer.reset();
  project_add(w.attn_out_proj, attn_.data(), rows, h);
}

void Model::ffn_act(const OwnedMatrix& w1, const OwnedMatrix& w3, const float* v, int64_t rows) {
  const int64_t F = w1.rows;
  gate_.resize(rows * F);  // [rows, F] w1 v
  up_.resize(rows * F);    // [rows, F] w3 v
  act_.resize(rows * F);   // [rows, F] silu(w1 v) * w3 v
  if (compute::matmul_swiglu(ctx(), v, rows, w1.view(), w3.view(), gate_.data(), up_.data(), act_.data())) return;
  // gate and up in one pool call (packed side by side: one stream)
  const compute::Matrix gate_up[] = {w1.view(), w3.view()};
  float* const gate_up_out[] = {gate_.data(), up_.data()};
  compute::matmul_group(ctx(), v, rows, gate_up, gate_up_out);
  compute::swiglu(ctx(), gate_.data(), up_.data(), rows * F, act_.data());
}

void Model::ffn_block(const OwnedMatrix& w1, const OwnedMatrix& w3, const OwnedMatrix& w2, const float* v,
                      int64_t rows, float* out) {
  ffn_act(w1, w3, v, rows);
  compute::matmul(ctx(), act_.data(), rows, w2.view(), out);
}

void Model::moe_block(int layer, const float* v, int64_t rows, float* out) {
  const LayerWeights& w = weights_.layers[layer];
  const io::MoeConfig& moe = *config_.moe;
  const int E = moe.num_experts, k = moe.experts_per_token;
  const int64_t D = config_.hidden_size;
  router_logits_.resize(rows * E);  // [rows, E]
  route_chosen_.resize(rows * k);   // [rows, k] expert ids in slot order
  route_weights_.resize(rows * k);  // [rows, k]
  slots_.resize(rows * k * D);      // [rows, k, D] weighted expert outputs
  compute::matmul(ctx(), v, rows, w.router.view(), router_logits_.data());
  const compute::RouterOptions options{E, k, moe.norm_topk_prob, moe.routed_scaling_factor,
                                       w.expert_bias.empty() ? nullptr : w.expert_bias.data()};
  compute::route_experts(ctx(), router_logits_.data(), rows, options, route_chosen_.data(), route_weights_.data());
  if (expert_trace_) expert_trace_->insert(expert_trace_->end(), route_chosen_.begin(), route_chosen_.end());
  std::vector<int64_t> picks;  // (row * k + slot) routed to the current expert, in row order
  for (int e = 0; e < E; ++e) {
    picks.clear();
    for (int64_t i = 0; i < rows * k; ++i)
      if (route_chosen_[i] == e) picks.push_back(i);
    if (picks.empty()) continue;
    const int64_t n = static_cast<int64_t>(picks.size());
    expert_in_.resize(n * D);  // [n, D] the routed rows of v
    expert_out_.resize(n * D);
    for (int64_t p = 0; p < n; ++p) std::memcpy(expert_in_.data() + p * D, v + (picks[p] / k) * D, sizeof(float) * D);
    const ExpertWeights& expert = w.experts[e];
    ffn_block(expert.w1, expert.w3, expert.w2, expert_in_.data(), n, expert_out_.data());
    const OpContext c = ctx();
    for (int64_t p = 0; p < n; ++p) {
      const float weight = route_weights_[picks[p]];
      float* slot = slots_.data() + picks[p] * D;
      for (int64_t d = 0; d < D; ++d) slot[d] = c.store(expert_out_[p * D + d] * weight);
    }
  }
  compute::sum_slots(ctx(), slots_.data(), rows, k, D, out);
}

void Model::logits(const float* hidden, int64_t rows, float* logits) {
  OpTimer timer(OpKind::Head);
  const int64_t D = config_.hidden_size;
  u_.resize(rows * D);
  compute::rms_norm(ctx(), hidden, rows, D, weights_.final_norm.data(), config_.norm_eps, u_.data());
  // The head accumulates in fp32 and keeps fp32 logits in both modes (sampling reads fp32).
  compute::matmul(OpContext{&pool_, NumericMode::Fp32}, u_.data(), rows, weights_.head().view(), logits);
}

void Model::greedy_tokens(const float* hidden, int64_t rows, int32_t* tokens) {
  OpTimer timer(OpKind::Head);
  const int64_t D = config_.hidden_size;
  u_.resize(rows * D);
  compute::rms_norm(ctx(), hidden, rows, D, weights_.final_norm.data(), config_.norm_eps, u_.data());
  compute::matmul_argmax(OpContext{&pool_, NumericMode::Fp32}, u_.data(), rows, weights_.head().view(), tokens);
}

void Model::commit(StreamState& stream, int64_t kept) const {
  LS_CHECK(kept >= 1 && kept <= stream.window_rows, "commit keeps 1 .. window rows (callers validate)");
  const int64_t D = config_.hidden_size, history_rows = config_.conv_kernel - 1;
  std::vector<float> next(history_rows * D);
  for (size_t slot = 0; slot < stream.conv_history.size(); ++slot) {
    std::vector<float>& history = stream.conv_history[slot];
    const std::vector<float>& z = stream.window_z[slot];
    // The new history is the last K-1 of [history, z_0 .. z_{kept-1}].
    for (int64_t i = 0; i < history_rows; ++i) {
      const int64_t source = kept - history_rows + i;
      const float* row = source >= 0 ? z.data() + source * D : history.data() + (history_rows + source) * D;
      std::memcpy(next.data() + i * D, row, sizeof(float) * D);
    }
    history = next;
    stream.window_z[slot].clear();
  }
  const int64_t kv_width = int64_t{config_.num_kv_heads} * config_.head_dim;
  const size_t kept_values = static_cast<size_t>((stream.committed + kept) * kv_width);
  auto truncate = [kept_values](auto& values) {
    if (values.size() > kept_values) values.resize(kept_values);
  };
  for (KvCache& cache : stream.kv) {
    truncate(cache.keys_f32);
    truncate(cache.values_f32);
    truncate(cache.keys_b16);
    truncate(cache.values_b16);
  }
  stream.committed += kept;
  stream.window_rows = 0;
}

}  // namespace ls::lfm2
