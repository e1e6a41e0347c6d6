// The LFM2 model on a CUDA device behind the Target seam: ragged windows of many streams in one forward, a paged
// KV cache, device conv state with rollback, keyed draws on the device, taps and logits copied back at the end.
//
// Numerics are the CPU Bf16 mode's: bf16 weights and activations, fp32 accumulation, bf16 rounding at the same
// points (src/compute/ops.h). Every row's bits depend only on its own token, position and stream state, never on
// the other rows of the forward (batch invariance); the reduction orders differ from the CPU's, so GPU and CPU
// agree to bf16 tolerance, not bit for bit. embed()/head() for a drafter take host fp32: head() rounds its input
// rows to bf16 (the drafter's hidden rows are bf16 values already) and returns fp32 logits.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include "compute/cuda/kernels.h"
#include "model/lfm2/cuda/device_weights.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "model/load.h"
#include "model/target.h"

namespace ls::lfm2 {

class CudaTarget final : public Target {
 public:
  // Uploads Bf16-mode weights and sizes every pool (KV pages, conv slots, scratch for options.max_rows rows).
  static Result<std::unique_ptr<CudaTarget>> create(io::ModelConfig config, const Weights& weights,
                                                    const LoadOptions& options);
  ~CudaTarget() override;

  const TargetFacts& facts() const override { return facts_; }
  Status set_taps(std::span<const int> layers) override;
  Result<Verified> forward(std::span<const Window> windows) override;
  Status commit(StreamId stream, int kept) override;
  int64_t committed_length(StreamId stream) const override;
  void release(StreamId stream) override;
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override;
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override;
  const void* device_embedding() const override { return weights_.embedding.w.data(); }
  // On: forward() leaves every row's taps in its device buffer (Verified::device_taps) and copies none out.
  bool keep_taps_on_device(bool on) override;

  void set_exact_width(int width) { facts_.exact_width = width; }
  // Tests: when set, every MoE layer of every forward appends its chosen experts [rows, k] here (extra syncs).
  void set_expert_trace(std::vector<int32_t>* trace) { expert_trace_ = trace; }
  const io::ModelConfig& config() const { return config_; }
  int64_t weight_bytes() const { return weights_.bytes; }
  int free_pages() const { return static_cast<int>(free_pages_.size()); }
  cudaStream_t stream() const { return stream_; }
  // Benches: when on, every op of a forward is bracketed by CUDA events and its device time added to profile()
  // (milliseconds by op kind since the last reset).
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<std::pair<std::string, double>>& profile() const { return profile_; }
  void reset_profile() { profile_.clear(); }
  // Benches: the profile's GEMMs by role ("gemm qkv", "gemm down", ..) instead of one "gemm" kind.
  void set_profile_roles(bool on) { profile_roles_ = on; }
  // Steady-state forwards replay CUDA graphs captured per shape (rows, windows, drawn rows, commits, taps) from the
  // shape's second forward on; on by default. graph_count(): graphs held now.
  void set_graphs(bool on) {
    graphs_enabled_ = on;
    if (!on) clear_graphs();
  }
  int graph_count() const { return static_cast<int>(graphs_.size()); }
  // Kernel nodes of the graph captured last (benches: the kernel boundaries of a decode step); 0 before any.
  int last_graph_kernels() const { return last_graph_kernels_; }
  // Up to 16 rows: each residual add + RMSNorm runs in the prologue of the decode GEMM it feeds (the same bits; off by
  // default: the staged kernels it needs measured slower on the H200, batch B of session 4: decode 2.36 ms against
  // 1.28 with the norm launches); ffn false keeps the FFN's norm launch (and the streaming gate_up + SwiGLU kernel)
  // while the mixers' norms are fused. Tests and benches compare the modes.
  // The drawn rows' gather, the last residual add and the final norm in one launch where no tap of the last layer
  // wants the final residual (the same bits; the only launch there since H200 batch s10final). Tests only: false
  // runs the three launches (the tapped case's) as its reference. Process-wide, read at each forward's enqueue.
  static void set_final_norm_fused(bool on);
  static bool final_norm_fused();
  // A tapped layer's output written to the taps by the residual add + norm launch after it (the same bits) instead of
  // a copy node, which breaks the graph's programmatic chain (session 13; on by default since H200 batch s13A; false,
  // tests only, for the copies). Process-wide, read at each forward's enqueue; drop captured graphs after a change.
  static void set_taps_in_norm(bool on);
  static bool taps_in_norm();
  static void set_taps_in_norm_fault_for_test(bool on);  // the norm writes the next tap slot
  void set_decode_norm_fusion(bool on, bool ffn = true) {
    decode_norm_fusion_ = on;
    decode_norm_fusion_ffn_ = ffn;
    clear_graphs();
  }

 private:
  struct StreamState {
    int slot = 0;
    int64_t committed = 0;
    int window_rows = 0;       // rows of the last forward awaiting commit (0 = none)
    int window_first_row = 0;  // where those rows sat in that forward (z_keep rows)
    std::vector<int32_t> pages;
  };
  // Byte offsets of one forward's metadata inside the staged upload.
  struct Meta {
    size_t tokens = 0, positions = 0, row_window = 0, windows = 0, pages = 0, drawn = 0, draws = 0, commits = 0;
    size_t bytes = 0;
  };

  CudaTarget() = default;
  Status allocate(const LoadOptions& options);
  Status check_windows(std::span<const Window> windows) const;
  // Everything a forward runs on the device after its metadata is staged: upload, commits, layers, draws, copies.
  Status enqueue_forward(int64_t rows, const Meta& meta, int commit_count, const std::vector<int>& fresh_slots,
                         const std::vector<int64_t>& drawn_rows, const std::vector<char>& wants, Verified& verified);
  void clear_graphs();
  // Queues the copies of the tapped rows of the windows that want taps to the pinned host buffer (after the forward).
  Status copy_taps(std::span<const Window> windows, Verified& verified);
  // The layer loop over the forward's rows (metadata already on the device); leaves h [rows, D] after the last layer.
  Status run_layers(int64_t rows, const Meta& meta);
  // The mixers read u_, or run their first GEMM on the output of `norm` (in its prologue) when it is set.
  Status mixer_conv(int layer, int64_t rows, const Meta& meta, const cuda::DecodeNorm* norm);
  Status mixer_attention(int layer, int64_t rows, const Meta& meta, const cuda::DecodeNorm* norm);
  Status ffn_dense(int layer, int64_t rows);
  // A mixer's last GEMM / the dense FFN's down GEMM (GemmEngine::gemm; the decode tails of session 7 are gone).
  Status gemm_out(const bf16* x, int64_t rows, const cuda::DeviceMatrix& w, bf16* y);
  // The residual add + ffn_norm (h += delta; u_ = RMSNorm(h)) and the MoE FFN; the norm inside route + plan where
  // it fits (the lean kernel, up to 16 rows), else its own launch first (the same bits).
  Status ffn_moe(int layer, int64_t rows, bf16* h, const bf16* delta);
  // Final norm + head + keyed draw of n drawn rows (indices into h at meta.drawn); logits of wanted rows to `verified`.
  Status draw(int64_t n, const Meta& meta, const std::vector<int64_t>& drawn_rows, const std::vector<char>& wants,
              Verified& verified);
  // Benches only (LS_STEP_TWICE, a comma list of step_op_name()s, read at load): the named op kinds are launched
  // twice, so the graphed step's growth is that kind's cost on the step's critical path. Every kind doubled is
  // idempotent (the same inputs and outputs; a residual add + norm is doubled by a second rms_norm of the new h).
  enum class StepOp : uint32_t { Norm, QkNorm, Attention, Conv, MixerIn, MixerOut, GateUp, Down, Route,
                                 Experts, Combine, Count };
  static const char* step_op_name(StepOp op);
  static uint32_t step_twice_from_env();
  bool doubled(StepOp op) const { return (step_twice_ >> static_cast<uint32_t>(op)) & 1u; }
  template <typename Launch>
  Status twice(StepOp op, const Launch& launch) {
    LS_RETURN_IF_ERROR(launch());
    return doubled(op) ? launch() : ok_status();
  }
  // Profiling: records an event closing the op kind `label` (no-op when off).
  Status mark(const char* label);
  const char* gemm_label(const char* role) const;  // "gemm", or "gemm <role>" under set_profile_roles
  Status collect_profile();
  template <typename T>
  T* device_at(size_t offset) const { return reinterpret_cast<T*>(meta_dev_.data() + offset); }
  void free_stream_pages(StreamState& state, int64_t keep_positions);

  io::ModelConfig config_;
  gpu::DeviceWeights weights_;
  TargetFacts facts_;
  cudaStream_t stream_ = nullptr;
  cuda::GemmEngine gemm_;
  std::vector<int> taps_;
  bool taps_on_device_ = false;
  bool tap_this_forward_ = false;  // some window of the forward being enqueued wants taps (else no tap copies)
  int device_ = 0;
  std::vector<int> kv_slot_, conv_slot_;
  int attention_layers_ = 0, conv_layers_ = 0;
  int64_t max_rows_ = 0;
  int head_group_ = 0;
  int max_streams_ = 0;
  gpu::KvShape kv_shape_;
  int kv_pages_ = 0;

  std::unordered_map<StreamId, StreamState> streams_;
  std::vector<int32_t> free_pages_;  // a stack
  std::vector<int> free_slots_;
  std::vector<gpu::ConvCommit> pending_commits_;
  std::vector<int32_t>* expert_trace_ = nullptr;
  bool profiling_ = false;
  bool profile_roles_ = false;
  std::vector<std::pair<cudaEvent_t, const char*>> marks_;  // this forward's events
  std::vector<cudaEvent_t> spare_events_;
  std::vector<std::pair<std::string, double>> profile_;
  using GraphKey = std::tuple<int64_t, int64_t, int64_t, int, int64_t>;
  static constexpr size_t kMaxGraphs = 256;
  bool graphs_enabled_ = true;
  bool decode_norm_fusion_ = false;
  bool decode_norm_fusion_ffn_ = true;
  int last_graph_kernels_ = 0;
  uint32_t step_twice_ = step_twice_from_env();
  const bf16* final_delta_ = nullptr;  // set by run_layers: the last residual add left to the draw's final norm
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::map<GraphKey, int> sightings_;

  // Device pools.
  cuda::DeviceBuffer<bf16> kv_pool_;       // [attention layers, 2, pages, page_size, kv_width]
  cuda::DeviceBuffer<bf16> conv_history_;  // [slots, conv layers, K-1, D]
  cuda::DeviceBuffer<unsigned char> meta_dev_;
  unsigned char* meta_host_ = nullptr;     // pinned staging of the same size
  size_t meta_capacity_ = 0;
  cuda::DeviceBuffer<bf16> h_alt_;  // [16, D]: the residual's second buffer for fused decode norms
  cuda::DeviceBuffer<bf16> h_, u_, mix_, wide_, act_, q_raw_, k_raw_, q_, k_, v_, attn_, z_keep_;
  cuda::DeviceBuffer<float> attn_states_;  // split attention's chunk states (forwards of up to 64 rows)
  cuda::DeviceBuffer<bf16> router_logits_, expert_in_, expert_gate_up_, expert_act_, expert_out_, slots_;
  cuda::DeviceBuffer<int32_t> chosen_, expert_offsets_, expert_order_, moe_tickets_;
  cuda::DeviceBuffer<float> route_weights_;
  cuda::DeviceBuffer<bf16> head_in_, head_normed_;
  cuda::DeviceBuffer<float> logits_, head_f32_;
  cuda::DeviceBuffer<int32_t> draws_dev_, embed_tokens_;
  cuda::DrawScratch draw_scratch_;
  cuda::DeviceBuffer<bf16> taps_dev_;      // [rows, taps, D]
  bf16* taps_host_ = nullptr;              // pinned [max_rows, taps, D]
  int32_t* draws_host_ = nullptr;          // pinned [max_rows]
};

}  // namespace ls::lfm2
