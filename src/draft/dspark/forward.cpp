// The DSpark forward: context rows into the cache, and the bidirectional block pass through the draft layers.
#include "draft/dspark/forward.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "compute/cpu/draft_ops.h"
#include "compute/cpu/fused_ops.h"

namespace ls::dspark {
namespace {

constexpr int64_t kContextChunkRows = 64;  // taps projected per chunk, bounding absorb's temporaries

std::atomic<PassProfile*> g_profile{nullptr};

// Adds the wall time from construction to the next lap() (or destruction) to a profile field, when profiling.
class OpTimer {
 public:
  OpTimer() : profile_(g_profile.load(std::memory_order_relaxed)) {
    if (profile_) start_ = std::chrono::steady_clock::now();
  }
  // Adds the time since the last lap to `field` of the profile.
  void lap(double PassProfile::*field) {
    if (!profile_) return;
    const auto now = std::chrono::steady_clock::now();
    profile_->*field += std::chrono::duration<double, std::milli>(now - start_).count();
    start_ = now;
  }

 private:
  PassProfile* profile_;
  std::chrono::steady_clock::time_point start_;
};

bool neox(const DsparkConfig& config) { return config.rope_style == RopeStyle::NeoX; }

// ys[i] [rows, ws[i].rows] = u [rows, d] @ ws[i]^T: one pool dispatch for the whole group when no matrix is int8
// (matmul_group gives every column the bits of its own matmul).
void apply_matrices(const compute::OpContext& ops, const float* u, int64_t rows,
                    std::initializer_list<const DraftMatrix*> ws, std::initializer_list<float*> ys) {
  bool dense = true;
  for (const DraftMatrix* w : ws) dense = dense && !w->quantized();
  if (!dense) {
    auto y = ys.begin();
    for (const DraftMatrix* w : ws) apply_matrix(ops, u, rows, *w, *y++);
    return;
  }
  std::vector<compute::Matrix> views;
  for (const DraftMatrix* w : ws) views.push_back(w->dense.view());
  compute::matmul_group(ops, u, rows, views, std::vector<float*>(ys));
}

// h [rows, w.rows] += u [rows, w.cols] @ w^T as a residual add (y [rows, w.rows] scratch): fused into the GEMM's pool
// call for few rows when w is dense.
void project_add(const compute::OpContext& ops, const float* u, int64_t rows, const DraftMatrix& w, float* y,
                 float* h) {
  if (!w.quantized() && compute::matmul_add_residual(ops, u, rows, w.dense.view(), y, h)) return;
  apply_matrix(ops, u, rows, w, y);
  compute::add_residual(ops, h, y, rows * w.rows);
}

// gate [rows, ffn] = silu(gate_proj u) * up_proj u (up [rows, ffn] scratch): one pool call for few rows when dense.
void gated_ffn_input(const compute::OpContext& ops, const DraftLayerWeights& layer, const float* u, int64_t rows,
                     float* gate, float* up) {
  const bool dense = !layer.gate_proj.quantized() && !layer.up_proj.quantized();
  if (dense && compute::matmul_swiglu(ops, u, rows, layer.gate_proj.dense.view(), layer.up_proj.dense.view(), gate,
                                      up, gate))
    return;
  apply_matrices(ops, u, rows, {&layer.gate_proj, &layer.up_proj}, {gate, up});
  compute::swiglu(ops, gate, up, rows * layer.gate_proj.rows, gate);
}

// keys [rows, kv] = RoPE(k_norm(keys)) in place: the projected keys made ready for the cache.
void finish_keys(const ForwardContext& f, const DraftLayerWeights& layer, int64_t rows, const int64_t* positions,
                 float* keys) {
  const DsparkConfig& c = f.config;
  compute::rms_norm(f.ops, keys, rows * c.num_kv_heads, c.head_dim, layer.k_norm.data(), c.norm_eps, keys);
  compute::rope_rotate(f.ops, keys, rows, c.num_kv_heads, positions, f.rope, neox(c));
}

// K = RoPE(k_norm(k_proj u)) and V = v_proj u for `rows` rows of u [rows, d] at `positions`.
void project_keys_values(const ForwardContext& f, const DraftLayerWeights& layer, const float* u, int64_t rows,
                         const int64_t* positions, float* keys, float* values) {
  apply_matrices(f.ops, u, rows, {&layer.k_proj, &layer.v_proj}, {keys, values});
  finish_keys(f, layer, rows, positions, keys);
}

// logits [rows, V] = hidden [rows, d] @ E^T in fp32: the target's tied head, or the drafter's copy of E (int8 with
// bits 8; bf16 in the B-tile layout where the drafter runs on AMX).
Status head_logits(const ForwardContext& f, const Target& target, const float* hidden, int64_t rows, float* logits) {
  const int64_t d = f.config.hidden_size, V = f.config.vocab_size;
  if (f.weights.head.rows == 0)
    return target.head(std::span<const float>(hidden, static_cast<size_t>(rows * d)), static_cast<int>(rows),
                       std::span<float>(logits, static_cast<size_t>(rows * V)));
  const compute::OpContext fp32{f.ops.pool, compute::NumericMode::Fp32};
  apply_matrix(fp32, hidden, rows, f.weights.head, logits);
  return ok_status();
}

}  // namespace

void set_pass_profile(PassProfile* profile) { g_profile.store(profile); }
PassProfile* pass_profile() { return g_profile.load(std::memory_order_relaxed); }

Status reserve_block_scratch(BlockScratch& s, const DsparkConfig& c, int64_t rows, InitSteps* steps) {
  if (rows <= s.rows) return ok_status();
  const size_t n = static_cast<size_t>(rows);
  const struct {
    std::vector<float>* buffer;
    int64_t width;
    const char* name;
  } buffers[] = {{&s.hidden, c.hidden_size, "block hidden"},
                 {&s.normed, c.hidden_size, "block normed"},
                 {&s.queries, c.q_size(), "block queries"},
                 {&s.keys, c.kv_size(), "block keys"},
                 {&s.values, c.kv_size(), "block values"},
                 {&s.attended, c.q_size(), "block attention"},
                 {&s.projected, c.hidden_size, "block projection"},
                 {&s.gate, c.ffn_size, "block gate"},
                 {&s.up, c.ffn_size, "block up"},
                 {&s.final_hidden, c.hidden_size, "block final hidden"},
                 {&s.logits, c.vocab_size, "block logits"}};
  for (const auto& entry : buffers) {
    const size_t count = n * static_cast<size_t>(entry.width);
    if (steps != nullptr) {
      LS_RETURN_IF_ERROR(steps->allocate(*entry.buffer, count, entry.name));
      continue;
    }
    try {
      entry.buffer->resize(count);
    } catch (const std::bad_alloc&) {
      return Status(ErrorCode::OutOfMemory,
                    std::string("cannot grow drafter scratch ") + entry.name + " to " + std::to_string(rows) + " rows");
    }
  }
  s.rows = rows;
  return ok_status();
}

void project_context(const ForwardContext& f, const float* taps, int64_t rows, int64_t start, StreamContext& context) {
  const DsparkConfig& c = f.config;
  const int64_t d = c.hidden_size, in = c.tap_count() * d, kv = c.kv_size();
  const int64_t chunk = std::min(rows, kContextChunkRows);
  std::vector<float> features(static_cast<size_t>(chunk * in)), fused(static_cast<size_t>(chunk * d));
  std::vector<float> normed(static_cast<size_t>(chunk * d));
  std::vector<int64_t> positions(static_cast<size_t>(chunk));
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t count = std::min(chunk, rows - first);
    // F is taken in the model dtype, as the reference's taps.to(dtype).
    std::copy(taps + first * in, taps + (first + count) * in, features.begin());
    compute::store_activations(f.ops, std::span<float>(features.data(), static_cast<size_t>(count * in)));
    apply_matrix(f.ops, features.data(), count, f.weights.fc, fused.data());
    compute::rms_norm(f.ops, fused.data(), count, d, f.weights.hidden_norm.data(), c.norm_eps, normed.data());
    for (int64_t row = 0; row < count; ++row) positions[row] = start + first + row;
    for (int index = 0; index < c.num_layers; ++index) {
      float* keys = context.keys[index].data() + (start - context.skipped + first) * kv;
      float* values = context.values[index].data() + (start - context.skipped + first) * kv;
      project_keys_values(f, f.weights.layers[index], normed.data(), count, positions.data(), keys, values);
    }
  }
}

Status block_pass(const ForwardContext& f, const Target& target, std::span<StreamContext* const> contexts,
                  std::span<const int32_t> anchors, BlockScratch& s, int head_slots, std::span<const int> widths) {
  const DsparkConfig& c = f.config;
  const int gamma = c.block_size;
  const int64_t requests = static_cast<int64_t>(anchors.size());
  const int64_t d = c.hidden_size, q = c.q_size(), kv = c.kv_size();
  LS_CHECK(s.rows >= requests * gamma, "block scratch reserved for every row of the pass");
  LS_CHECK(widths.empty() || static_cast<int64_t>(widths.size()) == requests, "one block width per request");
  if (requests == 0) return ok_status();

  // Request i's rows are [first[i], first[i] + width(i)) of the layers' buffers (packed, so short blocks cost less).
  auto width = [&](int64_t i) { return widths.empty() ? gamma : std::clamp(widths[i], 1, gamma); };
  std::vector<int64_t> first(static_cast<size_t>(requests + 1), 0);
  for (int64_t i = 0; i < requests; ++i) first[i + 1] = first[i] + width(i);
  const int64_t rows = first[requests];
  // Block tokens [anchor, mask x (w-1)] per request and their absolute positions p_i + slot.
  std::vector<int32_t> tokens(static_cast<size_t>(rows), c.mask_token_id);
  std::vector<int64_t> positions(static_cast<size_t>(rows));
  for (int64_t i = 0; i < requests; ++i) {
    tokens[first[i]] = anchors[i];
    for (int slot = 0; slot < width(i); ++slot) positions[first[i] + slot] = contexts[i]->length + slot;
  }
  OpTimer timer;
  if (PassProfile* profile = pass_profile()) {
    ++profile->passes;
    profile->rows += rows;
  }
  // X0 = E[tokens] in the model dtype (the target's shared embedding).
  LS_RETURN_IF_ERROR(target.embed(tokens, std::span<float>(s.hidden.data(), static_cast<size_t>(rows * d))));
  compute::store_activations(f.ops, std::span<float>(s.hidden.data(), static_cast<size_t>(rows * d)));
  timer.lap(&PassProfile::embed);

  const compute::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                                      1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  // One request drafting fewer than its w slots: the last layer's queries, attention, o_proj and FFN run only over the
  // drafted slots (the block's K/V still come from every row); the other rows of Hf are never read (NaN below).
  const int64_t trimmed = requests == 1 && head_slots > 0 && head_slots < rows ? head_slots : rows;
  for (int index = 0; index < c.num_layers; ++index) {
    const DraftLayerWeights& layer = f.weights.layers[index];
    const int64_t live = index + 1 == c.num_layers ? trimmed : rows;  // rows whose outputs this layer needs
    // Attention block: u = input_layernorm(X); Q = RoPE(q_norm(q_proj u)); K, V as the context's.
    compute::rms_norm(f.ops, s.hidden.data(), rows, d, layer.input_norm.data(), c.norm_eps, s.normed.data());
    timer.lap(&PassProfile::norms);
    apply_matrices(f.ops, s.normed.data(), rows, {&layer.q_proj, &layer.k_proj, &layer.v_proj},
                   {s.queries.data(), s.keys.data(), s.values.data()});
    timer.lap(&PassProfile::qkv);
    compute::rms_norm(f.ops, s.queries.data(), rows * c.num_heads, c.head_dim, layer.q_norm.data(), c.norm_eps,
                      s.queries.data());
    compute::rope_rotate(f.ops, s.queries.data(), rows, c.num_heads, positions.data(), f.rope, neox(c));
    finish_keys(f, layer, rows, positions.data(), s.keys.data());
    timer.lap(&PassProfile::rope);
    for (int64_t i = 0; i < requests; ++i) {
      StreamContext& context = *contexts[i];
      const int64_t p = context.length - context.skipped;  // rows held (positions come from `positions`)
      const int64_t w = width(i);
      // The block's K/V go right after the context (scratch rows, never kept), so each query row attends over
      // keys 0 .. p+w-1: all context before the anchor and the whole (possibly short) block, with no causal mask.
      std::copy_n(s.keys.data() + first[i] * kv, w * kv, context.keys[index].data() + p * kv);
      std::copy_n(s.values.data() + first[i] * kv, w * kv, context.values[index].data() + p * kv);
      compute::attention_block(f.ops, s.queries.data() + first[i] * q, std::min<int64_t>(w, live), p + w,
                               context.keys[index].data(), context.values[index].data(), shape,
                               s.attended.data() + first[i] * q);
    }
    timer.lap(&PassProfile::attention);
    project_add(f.ops, s.attended.data(), live, layer.o_proj, s.projected.data(), s.hidden.data());
    timer.lap(&PassProfile::o_proj);
    // FFN block: X += down(silu(gate v) * up v), v = post_attention_layernorm(X).
    compute::rms_norm(f.ops, s.hidden.data(), live, d, layer.post_norm.data(), c.norm_eps, s.normed.data());
    timer.lap(&PassProfile::norms);
    gated_ffn_input(f.ops, layer, s.normed.data(), live, s.gate.data(), s.up.data());
    timer.lap(&PassProfile::ffn_in);
    project_add(f.ops, s.gate.data(), live, layer.down_proj, s.projected.data(), s.hidden.data());
    timer.lap(&PassProfile::ffn_down);
  }
  // Hf = norm(X) into each request's gamma rows (slots past its width, or past a lone request's trim, NaN).
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  compute::rms_norm(f.ops, s.hidden.data(), trimmed, d, f.weights.final_norm.data(), c.norm_eps, s.normed.data());
  for (int64_t i = requests - 1; i >= 0; --i) {
    const int64_t kept = std::min(first[i] + width(i), trimmed) - first[i];
    float* out = s.final_hidden.data() + i * gamma * d;
    std::copy_n(s.normed.data() + first[i] * d, kept * d, out);
    std::fill(out + kept * d, out + gamma * d, kNaN);
  }
  timer.lap(&PassProfile::norms);
  // U = Hf @ E^T through the target's tied head, fp32, for slots < min(head_slots, w) of each request.
  const int64_t V = c.vocab_size;
  auto head_rows = [&](int64_t i) {
    return std::min<int64_t>(head_slots > 0 ? std::min(head_slots, gamma) : gamma, width(i));
  };
  int64_t kept = 0;
  for (int64_t i = 0; i < requests; ++i) kept += head_rows(i);
  if (kept == requests * gamma) {
    const Status status = head_logits(f, target, s.final_hidden.data(), kept, s.logits.data());
    timer.lap(&PassProfile::head);
    return status;
  }
  // Packed into contiguous rows when several requests share the pass (a row's logits do not depend on which rows
  // share the head call), then put back in place; the rest NaN.
  std::vector<float> packed_hidden, packed_logits;
  const float* hidden = s.final_hidden.data();
  float* logits = s.logits.data();
  if (requests > 1) {
    packed_hidden.resize(static_cast<size_t>(kept * d));
    packed_logits.resize(static_cast<size_t>(kept * V));
    for (int64_t i = 0, row = 0; i < requests; row += head_rows(i), ++i)
      std::copy_n(s.final_hidden.data() + i * gamma * d, head_rows(i) * d, packed_hidden.data() + row * d);
    hidden = packed_hidden.data();
    logits = packed_logits.data();
  }
  LS_RETURN_IF_ERROR(head_logits(f, target, hidden, kept, logits));
  timer.lap(&PassProfile::head);
  for (int64_t i = 0, row = 0; i < requests; row += head_rows(i), ++i) {
    float* out = s.logits.data() + i * gamma * V;
    if (requests > 1) std::copy_n(packed_logits.data() + row * V, head_rows(i) * V, out);
    std::fill(out + head_rows(i) * V, out + gamma * V, kNaN);
  }
  return ok_status();
}

namespace {

std::atomic<int>& short_block_state() {  // -1 off, else the extra slots
  static std::atomic<int> state{[] {
    ShortBlock block;
    if (!parse_short_block(std::getenv("LS_DRAFTER_SHORT_BLOCK"), block)) {
      std::fprintf(stderr, "LS_DRAFTER_SHORT_BLOCK: expected off, depth or depth+N; short blocks stay off\n");
    }
    return block.on ? block.extra : -1;
  }()};
  return state;
}

}  // namespace

bool parse_short_block(const char* text, ShortBlock& block) {
  block = ShortBlock{};
  if (text == nullptr) return true;
  const std::string value(text);
  if (value.empty() || value == "off" || value == "0") return true;
  if (value == "depth") {
    block.on = true;
    return true;
  }
  if (value.rfind("depth+", 0) != 0 || value.size() == 6 || value.size() > 8) return false;
  int extra = 0;
  for (char digit : value.substr(6)) {
    if (digit < '0' || digit > '9') return false;
    extra = extra * 10 + (digit - '0');
  }
  block = ShortBlock{true, extra};
  return true;
}

ShortBlock short_block() {
  const int state = short_block_state().load(std::memory_order_relaxed);
  return state < 0 ? ShortBlock{} : ShortBlock{true, state};
}

void set_short_block(ShortBlock block) {
  short_block_state().store(block.on ? std::max(0, block.extra) : -1, std::memory_order_relaxed);
}

int block_width(int depth, int gamma) {
  const ShortBlock block = short_block();
  return block.on ? std::clamp(depth + block.extra, 1, gamma) : gamma;
}

}  // namespace ls::dspark
