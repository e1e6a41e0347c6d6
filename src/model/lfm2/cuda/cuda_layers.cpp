// The CUDA target's layer loop: embed, per layer norm -> ShortConv or attention -> residual -> norm -> SwiGLU or
// MoE -> residual (each residual add fused with the norm after it), taps copied on the device; all launches on the
// target's stream, no host sync.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "model/lfm2/cuda/cuda_target.h"

#include "compute/cuda/row_gather_norm.h"
#include "model/lfm2/cuda/conv_rows.h"

namespace ls::lfm2 {

const char* CudaTarget::step_op_name(StepOp op) {
  static const char* const names[] = {"norm", "qk_norm", "attention", "conv", "mixer_in", "mixer_out",
                                      "gate_up", "down", "route", "experts", "combine"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(StepOp::Count));
  return names[static_cast<uint32_t>(op)];
}

namespace {
// the gather + last residual add + final norm in one launch: the only launch where no tap of the last layer wants h
// since H200 batch s10final (with the early ShortConv and attention 0.892-0.893 ms against 0.932-0.938 for the three
// old launches, three pairs); false (tests only) runs the add, gather and norm launches (the tapped case's) as its
// reference
std::atomic<bool> g_final_norm{true};
// a tapped layer's output written to the taps by the residual add + norm launch after it, not by a copy node (session
// 13): a copy node in the graph breaks the programmatic chain. The default since H200 batch s13A, confirmed in s13B
// (synth 1.2B, taps 2,5,8,11,14, gpu_bench --arms, three interleaved rounds: decode with taps 0.8945 ms against
// 0.9114, verify 8 / 16 rows 0.964 / 1.125 against 0.985 / 1.145); the env half went in session 14, false (tests only)
// keeps the copy nodes as the reference
std::atomic<bool> g_taps_in_norm{true};
std::atomic<bool> g_taps_in_norm_fault{false};  // tests: the norm writes the next tap slot (a planted fault)
}  // namespace

void CudaTarget::set_final_norm_fused(bool on) { g_final_norm = on; }

void CudaTarget::set_taps_in_norm(bool on) { g_taps_in_norm = on; }

bool CudaTarget::taps_in_norm() { return g_taps_in_norm.load(); }

void CudaTarget::set_taps_in_norm_fault_for_test(bool on) { g_taps_in_norm_fault = on; }

const char* CudaTarget::gemm_label(const char* role) const {
  if (!profile_roles_) return "gemm";
  static const std::string* const labels = new std::string[6]{"gemm qkv", "gemm attn_out", "gemm conv_in",
                                                              "gemm conv_out", "gemm gate_up", "gemm down"};
  static const char* const roles[6] = {"qkv", "attn_out", "conv_in", "conv_out", "gate_up", "down"};
  for (int i = 0; i < 6; ++i)
    if (std::string(roles[i]) == role) return labels[i].c_str();
  return "gemm";
}

bool CudaTarget::final_norm_fused() { return g_final_norm.load(); }

uint32_t CudaTarget::step_twice_from_env() {
  const char* env = std::getenv("LS_STEP_TWICE");
  if (env == nullptr) return 0;
  uint32_t mask = 0;
  std::string list = std::string(env) + ",";
  for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
    const std::string name = list.substr(at, comma - at);
    bool known = name.empty();
    for (uint32_t op = 0; op < static_cast<uint32_t>(StepOp::Count); ++op)
      if (name == step_op_name(static_cast<StepOp>(op))) {
        mask |= 1u << op;
        known = true;
      }
    if (!known) std::fprintf(stderr, "LS_STEP_TWICE: no op kind '%s' (ignored)\n", name.c_str());
  }
  return mask;
}

Status CudaTarget::run_layers(int64_t rows, const Meta& meta) {
  const io::ModelConfig& c = config_;
  const int D = c.hidden_size;
  const int64_t tap_count = static_cast<int64_t>(taps_.size());
  // Few rows (decode, short verify windows): each residual add + RMSNorm runs in the prologue of the GEMM it feeds
  // (gemm_decode_norm: the mixer's first GEMM, the dense FFN's gate_up), which writes the new residual to the other
  // of two buffers (every CTA of that GEMM still reads the old one). The final residual must land in h_ (draw reads
  // it), so the first buffer is picked by the parity of the swaps.
  const bool fuse = decode_norm_fusion_ && cuda::decode_norm_fits(rows, D);
  auto ffn_fused = [&](int layer) {
    const gpu::DeviceLayer& w = weights_.layers[layer];
    return fuse && decode_norm_fusion_ffn_ && !w.moe && cuda::decode_swiglu_fits(rows, w.gate_up.view());
  };
  int swaps = 0;
  for (int layer = 0; layer < c.num_layers && fuse; ++layer) swaps += (layer > 0 ? 1 : 0) + (ffn_fused(layer) ? 1 : 0);
  bf16* h = swaps % 2 == 0 ? h_.data() : h_alt_.data();
  bf16* h_other = swaps % 2 == 0 ? h_alt_.data() : h_.data();
  LS_RETURN_IF_ERROR(cuda::embed_rows(weights_.embedding.w.data(), c.vocab_size, D, device_at<int32_t>(meta.tokens),
                                      rows, h, stream_));
  LS_RETURN_IF_ERROR(mark("elementwise"));
  // The norm that feeds the next GEMM: run now (unfused, into u_) or by that GEMM (fused, reading h and delta).
  // tap: where the add's new h rows also go (a tapped layer's output; taps_in_norm()), else nullptr
  auto norm_now = [&](const bf16* delta, const bf16* weight, bf16* tap = nullptr) -> Status {
    if (delta)
      LS_RETURN_IF_ERROR(cuda::add_rms_norm(h, delta, rows, D, weight, c.norm_eps, u_.data(), stream_, tap,
                                            tap_count * D));
    if (!delta || doubled(StepOp::Norm)) return cuda::rms_norm(h, rows, D, weight, c.norm_eps, u_.data(), stream_);
    return ok_status();
  };
  auto norm_fused = [&](const bf16* delta, const bf16* weight) {
    cuda::DecodeNorm norm;
    norm.h = h;
    norm.delta = delta;
    norm.h_out = delta ? h_other : nullptr;
    norm.weight = weight;
    norm.eps = c.norm_eps;
    return norm;
  };
  auto swap_if = [&](const bf16* delta) {
    if (delta) std::swap(h, h_other);
  };
  // Taps of layer L: its output before the final norm, copied into [rows, taps, D] once the residual add after it has
  // run (at the start of layer L + 1, or the final add).
  auto copy_taps_of = [&](int layer) -> Status {
    if (tap_count == 0 || !tap_this_forward_) return ok_status();
    for (int64_t t = 0; t < tap_count; ++t)
      if (taps_[t] == layer)
        LS_CUDA_TRY(cudaMemcpy2DAsync(taps_dev_.data() + t * D, tap_count * D * sizeof(bf16), h, D * sizeof(bf16),
                                      D * sizeof(bf16), rows, cudaMemcpyDeviceToDevice, stream_));
    return mark("taps");
  };
  // The tap slot of `layer` written by the norm launch after it (taps_in_norm(): one slot wants it), else nullptr.
  auto tap_in_norm = [&](int layer) -> bf16* {
    if (tap_count == 0 || !tap_this_forward_ || !taps_in_norm() || layer < 0) return nullptr;
    if (std::count(taps_.begin(), taps_.end(), layer) != 1) return nullptr;
    const int64_t t = std::find(taps_.begin(), taps_.end(), layer) - taps_.begin();
    return taps_dev_.data() + (g_taps_in_norm_fault ? (t + 1) % tap_count : t) * D;
  };
  const bf16* pending_delta = nullptr;  // layer 0's operator_norm has no residual add before it
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const gpu::DeviceLayer& w = weights_.layers[layer];
    bf16* tap = nullptr;  // the previous layer's tap, when the norm below writes it
    // residual + operator_norm -> mixer
    if (fuse) {
      const cuda::DecodeNorm norm = norm_fused(pending_delta, w.operator_norm.data());
      if (w.kind == io::LayerKind::Conv)
        LS_RETURN_IF_ERROR(mixer_conv(layer, rows, meta, &norm));
      else
        LS_RETURN_IF_ERROR(mixer_attention(layer, rows, meta, &norm));
      swap_if(pending_delta);
    } else {
      tap = pending_delta ? tap_in_norm(layer - 1) : nullptr;
      LS_RETURN_IF_ERROR(norm_now(pending_delta, w.operator_norm.data(), tap));
      LS_RETURN_IF_ERROR(mark("elementwise"));
    }
    if (layer > 0 && tap == nullptr) LS_RETURN_IF_ERROR(copy_taps_of(layer - 1));
    if (!fuse) {
      if (w.kind == io::LayerKind::Conv)
        LS_RETURN_IF_ERROR(mixer_conv(layer, rows, meta, nullptr));
      else
        LS_RETURN_IF_ERROR(mixer_attention(layer, rows, meta, nullptr));
    }
    // residual + ffn_norm -> SwiGLU or MoE
    if (ffn_fused(layer)) {
      // gate_up GEMM + SwiGLU with the residual add + ffn_norm in its prologue (the same bits)
      const cuda::DecodeNorm norm = norm_fused(mix_.data(), w.ffn_norm.data());
      LS_RETURN_IF_ERROR(cuda::gemm_decode_norm_swiglu(gemm_, norm, rows, w.gate_up.view(), act_.data(), stream_));
      swap_if(mix_.data());
      LS_RETURN_IF_ERROR(mark(gemm_label("gate_up")));
      LS_RETURN_IF_ERROR(gemm_.gemm(act_.data(), rows, w.down.view(), mix_.data(), nullptr, stream_));
      LS_RETURN_IF_ERROR(mark(gemm_label("down")));
    } else if (w.moe) {
      LS_RETURN_IF_ERROR(ffn_moe(layer, rows, h, mix_.data()));
    } else {
      LS_RETURN_IF_ERROR(norm_now(mix_.data(), w.ffn_norm.data()));
      LS_RETURN_IF_ERROR(mark("elementwise"));
      LS_RETURN_IF_ERROR(ffn_dense(layer, rows));
    }
    pending_delta = mix_.data();
  }
  // The last residual add: in the draw's gather + final norm (final_delta_) where no tap of the last layer wants h,
  // else its own launch.
  final_delta_ = nullptr;
  if (c.num_layers > 0) {
    const bool last_tapped =
        tap_this_forward_ && std::find(taps_.begin(), taps_.end(), c.num_layers - 1) != taps_.end();
    if (final_norm_fused() && !last_tapped &&
        cuda::gather_rms_norm_fits(D, h, mix_.data(), weights_.final_norm.data(), head_normed_.data())) {
      final_delta_ = mix_.data();
    } else {
      LS_RETURN_IF_ERROR(cuda::add_residual(h, mix_.data(), rows * D, stream_));
      LS_RETURN_IF_ERROR(mark("elementwise"));
      LS_RETURN_IF_ERROR(copy_taps_of(c.num_layers - 1));
    }
  }
  LS_CHECK(h == h_.data(), "the final residual is in h_");
  return ok_status();
}

Status CudaTarget::ffn_dense(int layer, int64_t rows) {
  const gpu::DeviceLayer& w = weights_.layers[layer];
  const int64_t F = w.down.cols;
  if (cuda::decode_swiglu_fits(rows, w.gate_up.view())) {
    // few rows: gate_up GEMM + SwiGLU in one launch (the same bits)
    LS_RETURN_IF_ERROR(twice(StepOp::GateUp, [&] {
      return cuda::gemm_decode_swiglu(gemm_, u_.data(), rows, w.gate_up.view(), act_.data(), stream_);
    }));
    LS_RETURN_IF_ERROR(mark(gemm_label("gate_up")));
  } else {
    LS_RETURN_IF_ERROR(gemm_.gemm(u_.data(), rows, w.gate_up.view(), wide_.data(), nullptr, stream_));  // [rows, 2F]
    LS_RETURN_IF_ERROR(mark(gemm_label("gate_up")));
    LS_RETURN_IF_ERROR(
        cuda::swiglu(wide_.data(), wide_.data() + F, rows, static_cast<int>(F), 2 * F, act_.data(), stream_));
    LS_RETURN_IF_ERROR(mark("elementwise"));
  }
  LS_RETURN_IF_ERROR(twice(StepOp::Down, [&] { return gemm_out(act_.data(), rows, w.down.view(), mix_.data()); }));
  return mark(gemm_label("down"));
}

Status CudaTarget::gemm_out(const bf16* x, int64_t rows, const cuda::DeviceMatrix& w, bf16* y) {
  return gemm_.gemm(x, rows, w, y, nullptr, stream_);
}

Status CudaTarget::mixer_conv(int layer, int64_t rows, const Meta& meta, const cuda::DecodeNorm* norm) {
  const gpu::DeviceLayer& w = weights_.layers[layer];
  const int D = config_.hidden_size;
  const int slot = conv_slot_[layer];
  gpu::ConvArgs args;
  args.bcx = wide_.data();  // [rows, 3D]
  args.rows = rows;
  args.width = D;
  args.kernel = config_.conv_kernel;
  args.conv_layers = conv_layers_;
  args.conv_slot = slot;
  args.history = conv_history_.data();
  args.conv_weight = w.conv_kernel.data();
  args.conv_bias = w.conv_bias.size() > 0 ? w.conv_bias.data() : nullptr;
  bf16* z = z_keep_.data() + static_cast<int64_t>(slot) * max_rows_ * D;
  const int32_t* row_window = device_at<int32_t>(meta.row_window);
  const gpu::WindowInfo* windows = device_at<gpu::WindowInfo>(meta.windows);
  if (norm) {  // in_proj of the norm's output, the norm in the GEMM's prologue
    const cuda::DeviceMatrix in_proj = w.in_proj.view();
    bf16* const out = wide_.data();
    LS_RETURN_IF_ERROR(cuda::gemm_decode_norm(gemm_, *norm, rows, {&in_proj, 1}, {&out, 1}, stream_));
  } else {
    LS_RETURN_IF_ERROR(twice(StepOp::MixerIn, [&] {
      return gemm_.gemm(u_.data(), rows, w.in_proj.view(), wide_.data(), nullptr, stream_);
    }));
  }
  LS_RETURN_IF_ERROR(mark(gemm_label("conv_in")));
  LS_RETURN_IF_ERROR(twice(StepOp::Conv, [&] {
    // prefill: 8 channels and 8 rows a thread (the same bits; since batch s12A)
    if (gpu::conv_rows_takes(args)) return gpu::conv_rows(args, row_window, windows, z, act_.data(), stream_);
    return gpu::short_conv(args, row_window, windows, z, act_.data(), stream_);
  }));
  LS_RETURN_IF_ERROR(mark("short conv"));
  LS_RETURN_IF_ERROR(
      twice(StepOp::MixerOut, [&] { return gemm_out(act_.data(), rows, w.conv_out.view(), mix_.data()); }));
  return mark(gemm_label("conv_out"));
}

Status CudaTarget::mixer_attention(int layer, int64_t rows, const Meta& meta, const cuda::DecodeNorm* norm) {
  const gpu::DeviceLayer& w = weights_.layers[layer];
  const io::ModelConfig& c = config_;
  const int H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
  const cuda::DeviceMatrix qkv[3] = {w.q_proj.view(), w.k_proj.view(), w.v_proj.view()};
  bf16* const qkv_out[3] = {q_raw_.data(), k_raw_.data(), v_.data()};
  if (norm) {  // q, k and v in one launch, the norm in its prologue (the same bits)
    LS_RETURN_IF_ERROR(cuda::gemm_decode_norm(gemm_, *norm, rows, qkv, qkv_out, stream_));
  } else if (cuda::decode_group_fits(rows, qkv)) {  // few rows: q, k and v in one launch (the same bits)
    LS_RETURN_IF_ERROR(
        twice(StepOp::MixerIn, [&] { return cuda::gemm_decode_group(gemm_, u_.data(), rows, qkv, qkv_out, stream_); }));
  } else {
    for (int i = 0; i < 3; ++i) LS_RETURN_IF_ERROR(gemm_.gemm(u_.data(), rows, qkv[i], qkv_out[i], nullptr, stream_));
  }
  LS_RETURN_IF_ERROR(mark(gemm_label("qkv")));
  // per-head q/k RMSNorm then RoPE, one launch
  cuda::QkNormRope qk;
  qk.q_raw = q_raw_.data();
  qk.k_raw = k_raw_.data();
  qk.q_weight = w.q_norm.data();
  qk.k_weight = w.k_norm.data();
  qk.q = q_.data();
  qk.k = k_.data();
  qk.rows = rows;
  qk.q_heads = H;
  qk.k_heads = KV;
  qk.head_dim = hd;
  qk.eps = c.norm_eps;
  qk.positions = device_at<int64_t>(meta.positions);
  qk.inv_freq = weights_.inv_freq.data();
  const int64_t layer_elements = int64_t{kv_pages_} * kv_shape_.page_size * KV * hd;
  bf16* base = kv_pool_.data() + int64_t{kv_slot_[layer]} * 2 * layer_elements;
  const gpu::KvLayer kv{base, base + layer_elements};
  const int32_t* row_window = device_at<int32_t>(meta.row_window);
  const gpu::WindowInfo* windows = device_at<gpu::WindowInfo>(meta.windows);
  const int32_t* pages = device_at<int32_t>(meta.pages);
  // one launch: q, and k and v straight into the pages (qk_norm_rope + write_kv's bits; H200 batch s10A, synth 1.2B
  // decode step, interleaved: 0.988 / 0.986 / 0.984 ms against 1.006 / 1.001 / 1.003 with the two launches)
  LS_RETURN_IF_ERROR(twice(StepOp::QkNorm, [&] {
    return gpu::qk_norm_rope_kv(qk, v_.data(), row_window, windows, pages, kv_shape_, kv, stream_);
  }));
  LS_RETURN_IF_ERROR(mark("elementwise"));
  const gpu::AttentionScratch scratch{attn_states_.data(), static_cast<int64_t>(attn_states_.size())};
  LS_RETURN_IF_ERROR(twice(StepOp::Attention, [&] {
    return gpu::attention(q_.data(), rows, row_window, windows, pages, kv_shape_, kv, attn_.data(), stream_, scratch);
  }));
  LS_RETURN_IF_ERROR(mark("attention"));
  LS_RETURN_IF_ERROR(
      twice(StepOp::MixerOut, [&] { return gemm_out(attn_.data(), rows, w.attn_out.view(), mix_.data()); }));
  return mark(gemm_label("attn_out"));
}

Status CudaTarget::ffn_moe(int layer, int64_t rows, bf16* h, const bf16* delta) {
  const gpu::DeviceLayer& w = weights_.layers[layer];
  const io::MoeConfig& moe = *config_.moe;
  const int E = moe.num_experts, k = moe.experts_per_token, D = config_.hidden_size;
  const int64_t I = moe.expert_ffn_size, S = rows * k;
  // Few rows: routing + plan in one launch (level 2: the router GEMM too), and the combine in one launch below (the
  // same bits).
  const int level = expert_trace_ ? 0 : gpu::moe_fused_launches();
  const bool fused = level >= 1 && gpu::route_and_plan_fits(rows, E, k) && gpu::combine_experts_fits(rows, k);
  // (the router inside up to 16 rows: one CTA streams it, 8 warps of (8 rows, 8 experts) items)
  const bool router_inside = fused && level >= 2 && rows <= 16 && gpu::router_in_route_fits(D);
  gpu::RoutePlan plan;
  // the residual add + ffn norm inside the lean route + plan where it fits (the same bits; H200 batch s10A, synth 8B
  // cut to 8 layers, interleaved: 0.615 / 0.614 / 0.612 ms against 0.627 / 0.623 / 0.628 with the norm launch)
  if (router_inside && gpu::moe_route_lean()) {
    plan.norm_h = h;
    plan.norm_delta = delta;
    plan.norm_weight = w.ffn_norm.data();
    plan.norm_eps = config_.norm_eps;
    plan.norm_out = u_.data();
    plan.rows = rows;
    plan.experts = E;
    plan.k = k;
    plan.hidden = D;
    if (!gpu::route_norm_fits(plan)) plan.norm_h = nullptr;
  }
  if (!plan.norm_h) {
    LS_RETURN_IF_ERROR(cuda::add_rms_norm(h, delta, rows, D, w.ffn_norm.data(), config_.norm_eps, u_.data(), stream_));
    if (doubled(StepOp::Norm))
      LS_RETURN_IF_ERROR(cuda::rms_norm(h, rows, D, w.ffn_norm.data(), config_.norm_eps, u_.data(), stream_));
    LS_RETURN_IF_ERROR(mark("elementwise"));
  }
  if (!router_inside) {
    LS_RETURN_IF_ERROR(gemm_.gemm(u_.data(), rows, w.router.view(), router_logits_.data(), nullptr, stream_));
    LS_RETURN_IF_ERROR(mark("gemm"));
  }
  if (fused) {
    plan.logits = router_logits_.data();
    if (router_inside) {
      plan.x = u_.data();
      plan.router = w.router.view().w;
      plan.router_bias = w.router.view().bias;
      plan.hidden = D;
    }
    plan.rows = rows;
    plan.experts = E;
    plan.k = k;
    plan.normalize = moe.norm_topk_prob;
    plan.scaling = moe.routed_scaling_factor;
    plan.expert_bias = w.expert_bias.size() > 0 ? w.expert_bias.data() : nullptr;
    plan.chosen = chosen_.data();
    plan.weights = route_weights_.data();
    plan.offsets = expert_offsets_.data();
    plan.order = expert_order_.data();
    // (doubled, the norm inside runs once: it updates h in place)
    LS_RETURN_IF_ERROR(gpu::route_and_plan(plan, stream_));
    if (doubled(StepOp::Route) && !plan.norm_h) LS_RETURN_IF_ERROR(gpu::route_and_plan(plan, stream_));
  } else {
    LS_RETURN_IF_ERROR(cuda::route_experts(router_logits_.data(), rows, E, k, moe.norm_topk_prob,
                                           moe.routed_scaling_factor,
                                           w.expert_bias.size() > 0 ? w.expert_bias.data() : nullptr, chosen_.data(),
                                           route_weights_.data(), stream_));
    LS_RETURN_IF_ERROR(mark("moe route + plan"));
    if (expert_trace_) {
      std::vector<int32_t> chosen(S);
      LS_CUDA_TRY(
          cudaMemcpyAsync(chosen.data(), chosen_.data(), S * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
      LS_CUDA_TRY(cudaStreamSynchronize(stream_));
      expert_trace_->insert(expert_trace_->end(), chosen.begin(), chosen.end());
    }
    // Group the (row, slot) choices by expert, run each expert on its rows, weigh back into slot order, sum.
    LS_RETURN_IF_ERROR(gpu::plan_experts(chosen_.data(), S, E, expert_offsets_.data(), expert_order_.data(), stream_));
  }
  LS_RETURN_IF_ERROR(mark("moe route + plan"));
  gpu::ExpertFfn ffn;  // gather + gate|up + SwiGLU + down (two streamed launches at up to 32 rows)
  ffn.x = u_.data();
  ffn.rows = rows;
  ffn.top_k = k;
  ffn.offsets = expert_offsets_.data();
  ffn.order = expert_order_.data();
  ffn.experts = E;
  ffn.w_gate_up = w.experts_gate_up.data();
  ffn.w_down = w.experts_down.data();
  ffn.hidden = D;
  ffn.inter = I;
  ffn.gathered = expert_in_.data();
  ffn.gate_up = expert_gate_up_.data();
  ffn.act = expert_act_.data();
  ffn.out = expert_out_.data();  // [S, D]
  if (fused) {  // the combine inside the down launch where the path does it (expert_ffn_combines; the same bits):
    ffn.weights = route_weights_.data();  // the lean combining path's at any level, the ticketed one's at level 3
    ffn.y = mix_.data();
    if (level >= 3) ffn.tickets = moe_tickets_.data();
  }
  const bool combined = gpu::expert_ffn_combines(ffn);
  LS_RETURN_IF_ERROR(twice(StepOp::Experts, [&] { return gpu::expert_ffn(ffn, stream_); }));
  LS_RETURN_IF_ERROR(mark("expert gemm"));
  if (combined) {
    // written by the down launch
  } else if (fused) {
    LS_RETURN_IF_ERROR(twice(StepOp::Combine, [&] {
      return gpu::combine_experts(expert_out_.data(), expert_offsets_.data(), E, expert_order_.data(),
                                  route_weights_.data(), rows, k, D, mix_.data(), stream_);
    }));
  } else {
    LS_RETURN_IF_ERROR(gpu::scatter_weighted(expert_out_.data(), expert_order_.data(), route_weights_.data(), S, D,
                                             slots_.data(), stream_));
    LS_RETURN_IF_ERROR(cuda::sum_slots(slots_.data(), rows, k, D, mix_.data(), stream_));
  }
  return mark("moe combine");
}

}  // namespace ls::lfm2
