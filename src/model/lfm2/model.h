// The LFM2 / LFM2-MoE forward on the CPU: one layer loop with named blocks over a pass of stacked rows.
//
// Glossary. A pass is a set of rows run through every layer together (GEMMs over all of them); a segment is a
// run of consecutive rows of one window inside a pass (a long window may span several passes). Per-stream state is
// the attention KV cache and, per conv layer, the history (the last K-1 gated inputs z = B*X before the window)
// plus the window's own z rows, kept so that a commit can roll the conv state back to any kept row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "compute/ops.h"
#include "io/model_config.h"
#include "model/lfm2/weights.h"

namespace ls::lfm2 {

// One attention layer's cache for one stream: fp32 in Fp32 mode, bf16 in Bf16 mode (its values are bf16-exact).
struct KvCache {
  std::vector<float> keys_f32, values_f32;  // [positions, kv_heads * hd] Fp32 mode
  std::vector<bf16> keys_b16, values_b16;   // [positions, kv_heads * hd] Bf16 mode
};

struct StreamState {
  int64_t committed = 0;     // positions held for good
  int64_t window_rows = 0;   // rows of the last forward awaiting commit (0 = none)
  std::vector<KvCache> kv;                       // per attention layer
  std::vector<std::vector<float>> conv_history;  // per conv layer [K-1, D] oldest first
  std::vector<std::vector<float>> window_z;      // per conv layer [window rows, D]
};

struct Segment {
  StreamState* stream = nullptr;
  int64_t first_position = 0;  // absolute position of the segment's first row
  int64_t rows_before = 0;     // rows of the same window run in earlier passes
  int64_t row_offset = 0;      // the segment's first row inside the pass
  int64_t rows = 0;
};

class Model {
 public:
  Model(io::ModelConfig config, Weights weights, int threads);

  const io::ModelConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  NumericMode mode() const { return weights_.mode; }
  ThreadPool& pool() const { return pool_; }

  // A fresh stream: empty KV cache, zero conv history.
  StreamState new_stream() const;
  // hidden [rows, D] = the pass's rows after the last layer (before the final norm); the KV of every row is
  // appended to its stream and its conv inputs kept. taps [rows, tap_layers, D] when tap_layers is not empty.
  void run_pass(std::span<const int32_t> tokens, std::span<const Segment> segments, std::span<const int> tap_layers,
                float* hidden, float* taps);
  // logits [rows, V] fp32 = head(final_norm(hidden [rows, D])).
  void logits(const float* hidden, int64_t rows, float* logits);
  // tokens [rows] = the greedy draw (argmax, ties to the lower id) of each row's logits, without writing them.
  void greedy_tokens(const float* hidden, int64_t rows, int32_t* tokens);
  // Keeps the first `kept` rows of the stream's window: KV truncated, conv history moved to after row kept-1.
  void commit(StreamState& stream, int64_t kept) const;
  // Tests: when set, every MoE layer of every pass appends its chosen experts [rows, k] (slot order) here.
  void set_expert_trace(std::vector<int32_t>* trace) { expert_trace_ = trace; }

 private:
  compute::OpContext ctx() const { return compute::OpContext{&pool_, weights_.mode}; }
  // h [rows, D] += ShortConv(u) for layer `layer` (conv slot `slot`).
  void short_conv_block(int layer, int slot, const float* u, std::span<const Segment> segments, float* h);
  // h [rows, D] += Attention(u) for layer `layer` (KV slot `slot`).
  void attention_block(int layer, int slot, const float* u, std::span<const Segment> segments, float* h);
  // h [rows, w.rows] += in [rows, w.cols] @ w^T, a residual add (fused into the GEMM's pool call for few rows).
  void project_add(const OwnedMatrix& w, const float* in, int64_t rows, float* h);
  // act_ [rows, F] = silu(w1 v) * w3 v.
  void ffn_act(const OwnedMatrix& w1, const OwnedMatrix& w3, const float* v, int64_t rows);
  // out [rows, D] = SwiGLU FFN of v.
  void ffn_block(const OwnedMatrix& w1, const OwnedMatrix& w3, const OwnedMatrix& w2, const float* v, int64_t rows,
                 float* out);
  // out [rows, D] = sparse MoE of v.
  void moe_block(int layer, const float* v, int64_t rows, float* out);

  io::ModelConfig config_;
  Weights weights_;
  compute::RopeTable rope_;
  std::vector<int> kv_slot_;    // per layer: index into keys/values, -1 for conv layers
  std::vector<int> conv_slot_;  // per layer: index into conv_history, -1 for attention layers
  int attention_layers_ = 0;
  int conv_layers_ = 0;
  mutable ThreadPool pool_;
  // Scratch reused across passes.
  std::vector<float> h_, u_, mix_, wide_, q_, k_, v_, attn_, gate_, up_, act_;
  std::vector<float> router_logits_, route_weights_, slots_, expert_in_, expert_out_;
  std::vector<int32_t> route_chosen_;
  std::vector<compute::ShortConvInput> conv_inputs_;  // per segment of the current conv layer
  std::vector<int32_t>* expert_trace_ = nullptr;
  std::vector<int64_t> positions_;
};

}  // namespace ls::lfm2
