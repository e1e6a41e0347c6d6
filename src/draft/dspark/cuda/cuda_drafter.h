// The DSpark drafter on the CUDA device: bf16 weights (and int8 copies with --drafter-bits 8) and per-stream context
// K/V on the device, one batched block pass per draft() call, the Markov scan, one copy of the results back.
#pragma once

#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/kernels.h"
#include "draft/drafter.h"
#include "draft/dspark/config.h"
#include "draft/dspark/cuda/absorb_pass.h"
#include "draft/dspark/cuda/device_memory.h"
#include "draft/dspark/cuda/device_state.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/graph_keys.h"
#include "draft/dspark/cuda/int8_weights.h"
#include "draft/dspark/cuda/tuned_gemm.h"
#include "draft/dspark/weights.h"
#include "draft/load.h"

namespace ls::dspark::cuda {

// Whether the drafter's RoPE rotates NeoX halves (else LiquidAI's interleaved pairs).
inline bool neox(const DsparkConfig& config) { return config.rope_style == RopeStyle::NeoX; }

class CudaDsparkDrafter final : public Drafter {
 public:
  // Uploads loaded weights (each buffer a counted init step), reserves scratch for max_streams, warms up.
  // `embedding` is the target's device embedding [V, d] bf16, shared, never copied.
  static Result<std::unique_ptr<CudaDsparkDrafter>> create(const DsparkConfig& config, const DsparkWeights& weights,
                                                           const bf16_t* embedding, const DrafterOptions& options,
                                                           InitSteps& steps);
  ~CudaDsparkDrafter() override;

  const DraftFacts& facts() const override { return facts_; }
  Status absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) override;
  // Many streams' rows straight from a CUDA target's taps on this device: one fc GEMM and one K / V GEMM per layer
  // for every chunk of rows, then each stream's rows copied into its context (device to device).
  Status absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) override;
  std::vector<Draft> draft(std::span<const DraftRequest> requests) override;
  void release(StreamId stream) override;
  // Skips to `position`: later rows go right after the rows held (keys rotated at their own positions).
  Status restart(StreamId stream, int64_t position) override;
  // Waits for an absorb_device() still running on the drafter's stream (it returns without waiting), or runs one
  // left for the next pass (set_absorb_in_pass) and waits for it.
  Status settle() override;

  const DsparkConfig& config() const { return config_; }
  // Positions the stream's context holds (0 for an unknown stream).
  int64_t context_length(StreamId stream) const;
  size_t open_streams() const { return streams_.size(); }
  int64_t nonfinite_drafts() const { return nonfinite_drafts_; }
  // The last draft() call's block outputs copied to the host, rows in request order (i * block_size + slot):
  // Hf [rows, d] and U [rows, V] fp32.
  Result<std::vector<float>> last_final_hidden() const;
  Result<std::vector<float>> last_base_logits() const;
  // Device time of the last draft() call's block pass and Markov scan, in ms.
  double last_block_ms() const { return last_block_ms_; }
  double last_scan_ms() const { return last_scan_ms_; }
  // CUDA graphs for the block pass (per request count) and the scan (per request count and depth): captured on a
  // shape's second sighting, replayed after (on by default; off runs every launch eagerly, the same bits, and
  // keeps the captured graphs).
  void set_graphs(bool on) { graphs_on_ = on; }
  bool graphs_on() const { return graphs_on_; }
  // Graph replays so far, and shapes whose capture failed (those run eagerly from then on).
  int64_t graph_replays() const { return graph_replays_; }
  // Request counts rounded up to request_bucket() with padding requests (on by default; off runs the exact count,
  // the old path, for the bench A/B). Drops the captured graphs.
  void set_request_buckets(bool on) {
    request_buckets_ = on;
    graphs_.clear();
  }
  bool request_buckets() const { return request_buckets_; }
  // The GEMM scan's pick in two launches (markov_pick_split: vocab chunks over many SMs, then a CTA per request) or
  // one CTA per request (markov_pick). The same bits either way. On by default since batch s6A: depth 9 scan 0.220
  // / 0.231 / 0.241 / 0.420 ms at 4 / 8 / 16 / 64 streams against 0.396 / 0.427 / 0.440 / 0.524.
  void set_split_pick(bool on) {
    split_pick_ = on;
    graphs_.clear();
  }
  bool split_pick() const { return split_pick_; }
  // The split attention's key chunks per (request, KV head): 0 = automatic (split_attention_chunks), else at most
  // that (bench A/B at short contexts).
  void set_attention_chunks(int chunks) {
    attention_chunks_ = chunks;
    graphs_.clear();
    if (!cooperative_attention_fits_.empty()) fit_cooperative_attention();  // fewer chunks: more counts fit at once
  }
  // Captures the block pass and the scan (every depth) of every request bucket the scratch holds and absorb_device()'s
  // chunk of every row bucket, without running them (at load, and again when the scratch grows): graphs that exist
  // are kept. Returns how many block / scan graphs it captured.
  int capture_bucket_graphs();
  // Graphs captured by the last capture_bucket_graphs() / absorb bucket capture and the host ms they took.
  int bucket_graphs_captured() const { return bucket_graphs_captured_; }
  double bucket_capture_ms() const { return bucket_capture_ms_; }
  int absorb_graphs_captured() const { return absorb_graphs_captured_; }
  double absorb_capture_ms() const { return absorb_capture_ms_; }
  // Requests the last draft() pass ran (its count rounded up to its bucket; padding included).
  int last_pass_requests() const { return last_pass_requests_; }
  int64_t graph_failures() const { return graph_failures_; }
  // Pins the block attention variant (bench/test; nullopt = the automatic choice: Head from kHeadAttentionRequests
  // requests up (session 9) and, with set_short_context_head on, below that while the longest request holds at
  // most short_context_keys(count) keys (session 10), else Cooperative where its grid is resident at once, else
  // Split; Split pinned is the old path) and the scan's step (true:
  // markov_step_fused where supported, false: gather + cuBLAS W2 GEMM + markov_pick; nullopt: automatic).
  // (Each drops the captured graphs, which hold the launches of the old choice.)
  void set_attention_kernel(std::optional<BlockAttentionKernel> kernel) {
    attention_pin_ = kernel;
    graphs_.clear();
  }
  // The head attention below kHeadAttentionRequests requests at short contexts (above; on by default since batch
  // s10B's rounds at 4 streams: block pass 0.4685 -> 0.4537 ms at context 128, with 256-key stages 0.4339;
  // LS_DRAFTER_SHORT_HEAD=0 at load or false here is the old choice).
  void set_short_context_head(bool on) {
    short_context_head_ = on;
    graphs_.clear();
  }
  bool short_context_head() const { return short_context_head_; }
  // K / V rows the head attention stages per trip: 256 (the default since batch s10B: a block of 9 over up to 247
  // context rows in one trip each; 16 streams 0.6520 -> 0.6276 ms, 4 streams with the short head 0.4537 -> 0.4339)
  // or 128 (session 9; LS_DRAFTER_HEAD_STAGE=128 at load). The same bits.
  void set_head_stage_keys(int keys) {
    head_stage_keys_ = keys;
    graphs_.clear();
  }
  int head_stage_keys() const { return head_stage_keys_; }
  // The row attention (attention_row.cu: a CTA per query head and block row, every step short) for passes of at
  // most `most_requests` requests (0: never) whose longest holds at most kRowKeysPerRequest keys a request, in place
  // of the split / head choice there (session 12; the same bits). 1 by default since batch s12A's interleaved
  // rounds (1 stream, depth 9: block pass 0.420 -> 0.356 ms at context 128, 0.429 -> 0.414 at 512; at 4 streams it
  // lost, 0.410 -> 0.493); LS_DRAFTER_ROW_ATTENTION=N at load (0: the old choice).
  void set_row_attention(int most_requests) {
    row_attention_requests_ = most_requests;
    graphs_.clear();
  }
  int row_attention() const { return row_attention_requests_; }
  // Session 19: the row attention's query heads of one KV head N a CTA (block_attention_row_group, N 2-4, K / V staged
  // once; the same bits), 0 the row kernel (also where N does not divide the heads of a KV head). 4 since batch b2
  // (draft() 5-6 us shorter); LS_DRAFTER_ROW_GROUP=N at load. `planted_first_chunk` (tests only).
  void set_row_group(int heads, bool planted_first_chunk = false) {
    row_group_planted_ = planted_first_chunk;
    set_and_drop_graphs(row_group_heads_, heads);
    // Asked once now, outside any capture (the device's shared memory, the kernel's attribute).
    const AttentionDims dims{config_.num_heads, config_.num_kv_heads, config_.head_dim, 0.0f};
    if (heads > 1) (void)block_attention_row_group_supported(config_.block_size, dims, heads);
  }
  int row_group() const { return row_group_heads_; }
  // A single sampled request's fused scan as the fused step's product alone then markov_pick_split (the same
  // logits and picks; the keyed draw over vocab chunks instead of the step's last 256-thread CTA, which took
  // 0.18-0.32 ms a step in batch s10B). On by default since batch s11A's interleaved rounds (1 stream, depth 9,
  // top-p 0.9: draft() 3.45 -> 1.21 ms, scan 2.95 -> 0.74; T 0.6: 2.75 -> 0.96, lanes 1.00 -> 1.97x);
  // LS_DRAFTER_SAMPLED_SPLIT=0 at load or false here is the old step. `planted_base` (tests only) adds U twice.
  void set_sampled_split(bool on, bool planted_base = false) {
    sampled_split_ = on;
    sampled_split_planted_ = planted_base;
    graphs_.clear();
  }
  bool sampled_split() const { return sampled_split_; }
  // Sampled requests whose draw is the plain Gumbel max (plain_gumbel_draw), alone or with greedy ones, in the
  // persistent scan with their keyed draw inside (markov_scan_persistent `keyed`; the verified pick's bits) instead
  // of the step scans, wherever the greedy requests of that count would take it. On by default since batch s11A
  // (1 stream, T 0.6, depth 9: scan 0.187 ms against the split's 0.508 and the fused step's 2.293, greedy 0.134;
  // lanes sampled 1 stream 2.26x against the split's 1.97x); LS_DRAFTER_KEYED_SCAN=0 at load or false here is
  // the step scans. `planted_shift` (tests only) draws at positions shifted by it.
  void set_keyed_scan(bool on, int planted_shift = 0) {
    keyed_scan_ = on;
    keyed_scan_planted_ = planted_shift;
    graphs_.clear();
  }
  bool keyed_scan_on() const { return keyed_scan_; }
  // Whether a scan of `count` requests of the current pass takes the keyed persistent scan.
  bool keyed_scan(int count) const;
  void set_fused_scan(std::optional<bool> on) {
    fused_scan_pin_ = on;
    graphs_.clear();
  }
  // The fused scan step's W2 loads with L2 evict-last priority, and the scan steps' and skinny GEMMs' launches
  // overlapping the previous kernel's tail (programmatic dependent launch); both on by default (bench A/B pins).
  void set_launch_tuning(bool keep_w2, bool programmatic) {
    scan_keep_w2_ = keep_w2;
    programmatic_ = programmatic;
    graphs_.clear();
  }
  // Every GEMM of up to 16 rows through skinny_gemm (tensor cores, W streamed once, SwiGLU in the gate/up epilogue,
  // o_proj and down_proj then the norm launch) or none (session 4's batch B timed a whole skinny pass at 0.904 ms
  // against 0.533 at 1 stream). (Session 4's batch A ran a build whose x loads ptxas had hoisted above the
  // programmatic wait: drafts differed between identical streams.)
  void set_skinny_gemms(bool on) { set_skinny_parts(on ? kSkinnyPlain | kSkinnySwiglu | kSkinnyThenNorm : 0); }
  // Which GEMMs of up to 16 rows take skinny_gemm (bench A/B, session 6): kSkinnyPlain the plain ones (q/k/v, head U),
  // kSkinnySwiglu gate/up with the SwiGLU epilogue, kSkinnyThenNorm o/down as a plain skinny GEMM then the
  // residual_norm launch; 0 = cuBLAS everywhere. (Bit 4, o/down with the norm in the launch's last CTA, lost in s6A
  // and s15A and is gone since session 15.) The default,
  // kSkinnyThenNorm, by batch s6A at 1 stream (graphed block pass 0.480 ms against cuBLAS's 0.492; gate/up + SwiGLU
  // skinny 0.504).
  // (Session 7's kSkinnyWide, two W tiles a CTA, and kSkinnyTall, up to 48 rows, lost both batches: removed.)
  static constexpr int kSkinnyPlain = 1, kSkinnySwiglu = 2, kSkinnyThenNorm = 8;
  static constexpr int kDefaultSkinnyParts = kSkinnyThenNorm;
  void set_skinny_parts(int parts) {
    skinny_parts_ = parts;
    graphs_.clear();
  }
  int skinny_parts() const { return skinny_parts_; }
  // Session 16: the block pass and the scan as one graph where the scan's graph serves every depth (the persistent
  // and keyed scans): one launch a draft() instead of two, no timer events between them (last_block_ms() is then
  // both, last_scan_ms() 0); the same launches, so the same bits. On by default since batch b2 of session 19 (1-5 us
  // ahead in three batches); LS_DRAFTER_ONE_GRAPH=0 at load. `planted_no_scan` (tests only) leaves the scan out.
  void set_one_graph(bool on, bool planted_no_scan = false) {
    one_graph_planted_ = planted_no_scan;
    set_and_drop_graphs(one_graph_, on);
  }
  bool one_graph() const { return one_graph_; }
  // Session 19: an absorb_device() of at most kAbsorbPassRows rows leaves its device work to the next draft() of one
  // request, which runs it as a branch of its own block pass graph (a gather kernel, the GEMMs on a second cuBLAS
  // handle, joined before layer 0's attention: an internal edge) with its sources in the pass's upload; any other call
  // runs it first as before. The same bits. On since batch b2 (lanes: drafter 0.579 -> 0.544-0.567 ms a round, the
  // absorb call 0.025 -> 0.0005); LS_DRAFTER_ABSORB_IN_PASS=0 at load. `planted_no_gather` (tests only).
  void set_absorb_in_pass(bool on, bool planted_no_gather = false) {
    absorb_pass_planted_ = planted_no_gather;
    set_and_drop_graphs(absorb_in_pass_, on);
  }
  bool absorb_in_pass() const { return absorb_in_pass_; }
  // Whether an absorb is waiting for the next pass (tests).
  bool absorb_pending() const { return absorb_pass_.waiting(); }
  // The block pass's fused steps (stacked q/k/v and gate/up GEMMs, qkv_heads, residual_norm, swiglu_stacked; on by
  // default) or the unfused sequence (the reference the fused one is tested against).
  // The project's GemmEngine for GEMMs of up to 16 rows instead of cuBLAS (bench/test pin; off by default).
  void set_engine_gemms(bool on) {
    engine_gemms_ = on;
    graphs_.clear();
  }
  // GEMMs through cublasLt with each shape's algorithm picked by timing its heuristic candidates at the shape's
  // first (eager) sighting (tuned_gemm.h; deterministic reductions only), else cuBLAS's default (off by default).
  void set_tuned_gemms(bool on) {
    tuned_gemms_ = on;
    graphs_.clear();
  }
  size_t tuned_gemm_shapes() const { return tuned_.shapes(); }
  // Summed device us of the tuned picks and of cublasLt's first candidate, over the shapes tuned (bench).
  std::pair<double, double> tuned_gemm_us() const { return {tuned_.tuned_us(), tuned_.default_us()}; }
  // absorb_device()'s projections fused (one GEMM for every layer's K and V, one heads launch: 4 launches a chunk)
  // or per layer (k GEMM, norm, RoPE, v GEMM, scatter: 2 + 5 x layers launches); on by default.
  void set_fused_absorb(bool on) { set_and_drop_graphs(fused_absorb_, on); }
  void set_fused_block(bool on) { set_and_drop_graphs(fused_block_, on); }
  // Whether a scan of `count` requests takes the fused step: the pin, else a single request (where supported).
  bool fused_scan(int count) const;
  // The persistent greedy scan (one cooperative launch for every slot, W2 on chip; scan_persistent.cu) for scans of
  // greedy requests (one launch per kPersistentScanGroup requests): pinned on or off, or automatic (nullopt: a single
  // request).
  // Its graph serves every depth (key (count, -1)).
  void set_persistent_scan(std::optional<bool> on) {
    persistent_scan_pin_ = on;
    graphs_.clear();
  }
  // Each thread's loads issued at once in the split attention (SplitAttentionScratch::batched_loads), the residual
  // norms (residual_norm_row_batched), the q/k heads (norm_rope_head_batched) and the absorb's hidden norm and key
  // heads (session 8, the same bits), or one at a time (the old path). On by default since batch s8A: graphed block
  // pass 0.428 vs 0.482 ms at 1 stream, 0.525 vs 0.574 at 4; lanes 1 stream drafter 0.618 vs 0.700 ms a round.
  void set_batched_loads(bool on) {
    batched_loads_ = on;
    graphs_.clear();
  }
  bool batched_loads() const { return batched_loads_; }
  // How the persistent scan's CTAs meet each slot (the same bits): Flags (session 8; the default since batch s8A:
  // scan at depth 9 0.135 vs 0.142 ms at 1 stream) or Counter (the old path). Session 13's warp handoff (warp 0
  // alone waiting for the words) lost in batch s13A (scan 0.1619 vs 0.1347 ms) and was removed.
  void set_persistent_handoff(PersistentHandoff handoff) {
    persistent_handoff_ = handoff;
    graphs_.clear();
  }
  PersistentHandoff persistent_handoff() const { return persistent_handoff_; }
  // Session 14, one request, the same bits: the persistent scan's broadcast dot (a thread per vocabulary row,
  // scan_broadcast.cuh) and its confidence helpers (up to 4 CTAs past the grid score each slot during the loop, the
  // flagged handoff only); on since batch s14A0 (scan 0.1321 -> 0.1088 -> 0.1066 ms); =0 / false the old paths.
  void set_scan_broadcast(bool on) { set_and_drop_graphs(scan_broadcast_, on); }
  bool scan_broadcast() const { return scan_broadcast_; }
  void set_scan_confidence_helpers(bool on) { set_and_drop_graphs(scan_confidence_helpers_, on); }
  bool scan_confidence_helpers() const { return scan_confidence_helpers_; }
  // The flagged handoff's sleep between polls, ns (session 14; 100 since batch s14A: scan 0.1089 -> 0.1052 ms; 0 =
  // spin, LS_DRAFTER_SCAN_BACKOFF_NS at load); the same bits.
  void set_scan_handoff_backoff(int ns) { set_and_drop_graphs(scan_backoff_ns_, ns); }
  int scan_handoff_backoff() const { return scan_backoff_ns_; }
  // Tests only: the flagged combine leaves out the odd-numbered CTAs' words (it must draft other tokens).
  void set_scan_planted_drop(bool on) {
    scan_planted_drop_ = on;
    graphs_.clear();
  }
  // Whether a scan of `count` requests, all greedy or not, takes the persistent kernel.
  bool persistent_scan(int count, bool all_greedy) const;
  // Weight prefetch into L2 while each layer's attention runs (session 10; 40 MiB by default since batches s10A /
  // s10B, passes of one request only: block pass 0.4267 -> 0.4189 ms): a side-stream launch asks L2 for up to `bytes` of the GEMM weights that follow the attention (o_proj,
  // then an even share of gate_up's rows, then of down_proj's), so they stream while DRAM would sit idle. 0 = off.
  // The same bits either way. `planted_store` (tests only) makes the launch flip a weight bit instead of one
  // prefetch, so the bit test can be seen to turn red. LS_DRAFTER_L2_PREFETCH_MB sets the bytes at load.
  // Session 20 (--drafter-bits 8): GEMMs of at most `rows` rows on the int8 copies (int8_gemm; fc, q/k/v, o, gate/up,
  // down, the absorb's K/V, the head U), wider ones on the bf16 weights; 0 = bf16 everywhere; bits 0: no copies.
  // LS_DRAFTER_INT8_ROWS at load. `planted_scale` (tests): every int8 column on its neighbour's scale.
  void set_int8_rows(int rows, bool planted_scale = false) {
    int8_planted_ = planted_scale;
    set_and_drop_graphs(int8_rows_, rows);
  }
  int int8_rows() const { return int8_rows_; }
  // The narrow matrices' int8 GEMMs (one W tile a warp automatically: o, down, q/k/v, fc) with K over CTAs: 0 off,
  // 1 or 2 DrafterInt8::kSplits[0 / 1] (LS_DRAFTER_INT8_SPLIT=N at load; rounds ":ksN").
  void set_int8_splits(int kind) { set_and_drop_graphs(int8_splits_, kind); }
  int int8_splits() const { return int8_splits_; }
  // Every int8 GEMM's x loads cached in L1 as well (Int8GemmShape::x_l1; LS_DRAFTER_INT8_X_L1, rounds ":xl1").
  void set_int8_x_l1(bool on) { set_and_drop_graphs(int8_x_l1_, on); }
  bool int8_x_l1() const { return int8_x_l1_; }
  const DrafterInt8& int8_weights() const { return int8_; }
  int64_t int8_gemms_enqueued() const { return int8_gemms_; }  // int8_gemm launches enqueued or captured (tests)
  void set_l2_prefetch(int64_t bytes, bool planted_store = false) {
    l2_prefetch_bytes_ = bytes;
    l2_prefetch_planted_ = planted_store;
    graphs_.clear();
  }
  int64_t l2_prefetch() const { return l2_prefetch_bytes_; }
  // Bench: device time per launch label of each draft() call while on (passes then run eagerly).
  void set_profile(bool on) { profile_.set_on(on); }
  std::vector<std::pair<std::string, double>> last_profile() const { return profile_.totals(); }
  // Test hook: fills every activation and logit buffer with NaN bytes (0xff), so a value a pass fails to write
  // cannot pass for a result.
  Status poison_scratch_for_test();

 private:
  CudaDsparkDrafter(const DsparkConfig& config, const bf16_t* embedding, const DrafterOptions& options);
  // A pin that changes what the graphs captured: set it and drop them.
  template <typename T>
  void set_and_drop_graphs(T& pin, T value) {
    pin = value;
    graphs_.clear();
  }
  // --drafter-bits 8: the int8 copies (int8_weights.h), quantized on the device from the uploaded bf16 weights.
  Status quantize_weights(InitSteps& steps);
  Status reserve_context(DeviceStreamContext& context, int64_t rows);
  Status reserve_scratch(int64_t requests, InitSteps* steps);
  Status project_context(const float* taps, int64_t rows, int64_t start, DeviceStreamContext& context);
  // absorb_device()'s projections of one chunk of `filled` rows (features, positions and row pointers in place):
  // C = hidden_norm(fc F), then per layer K = RoPE(k_norm(k_proj C)) and V = v_proj C into each row's context.
  Status absorb_chunk(int64_t filled);
  // absorb_chunk reading the rows' context pointers and positions from `row_pointers` / `positions`.
  Status absorb_chunk_from(int64_t filled, bf16_t* const* row_pointers, const int32_t* positions);
  // absorb_device()'s device work for checked pieces (their contexts reserved): copies, uploads, chunk graphs.
  Status enqueue_absorb(std::span<const TapRows> rows, const DeviceTaps& taps);
  // The absorb inside the pass (cuda_absorb.cpp): whether one may wait; running a waiting one now (before anything
  // that moves or reads its contexts); its part of the pass's inputs (returns the rows' bucket) and its bytes; its
  // launches on the side branch (block_pass joins it); the branch's stream and cuBLAS handle (outside any capture).
  bool absorb_pass_takes(std::span<const TapRows> rows, const DeviceTaps& taps, int64_t total_rows) const;
  Status flush_pending_absorb();
  int stage_absorb_pass(uint8_t* part) const;
  size_t absorb_pass_input_bytes() const;
  Status fork_absorb_branch(int bucket);
  Status ready_absorb_branch();
  Status block_pass(int count);
  // What the graphs hold (cuda_graphs.cpp): the block pass's (the absorb branch of `absorb_bucket` rows when > 0, the
  // pass), the scan's, and both as one graph.
  Status block_graph(int count, int absorb_bucket);
  Status scan_graph(int count, int depth);
  Status one_graph_body(int count, int absorb_bucket, int depth);
  // The inputs' upload of a pass of `padded` requests (up to the end of its records) and the records' copy back.
  size_t upload_bytes(int padded) const;
  Status upload_inputs(int padded);
  Status download_records(int count);
  Status block_pass_unfused(int count);
  BlockAttentionKernel attention_kernel(int count) const;
  // The block pass's graph key part for `count` requests: kLongContextBlockKey where the attention then differs
  // by context (long_context), else 0.
  int block_pass_key(int count, bool long_context) const {
    const bool differs = count <= row_attention_requests_ || (short_context_head_ && count < kHeadAttentionRequests);
    return long_context && differs ? kLongContextBlockKey : 0;
  }
  // The keys per pass up to which its attention is the short-context one (row, or head below 16 requests).
  int64_t context_bound(int count) const {
    return count <= row_attention_requests_ ? kRowKeysPerRequest * count : short_context_keys(count);
  }
  // Block attention of `layer` by attention_kernel(count): queries -> attended.
  Status attend(int count, const AttentionDims& dims, int layer);
  // Forks layer `layer`'s weight prefetch (set_l2_prefetch; a pass of one request only) onto the side branch; true
  // when it forked.
  Result<bool> prefetch_layer_weights(int count, int layer);

  // Profiling: closes the span of the launches enqueued since the last mark under `label`.
  void mark(const char* label) { profile_.mark(label, stream_.get()); }
  ScanShape scan_shape() const;
  Status markov_scan(int count, int max_depth);
  Status warm_up();
  // Runs `enqueue`'s launches for the graph shape `key`: eagerly, or captured (second sighting) and replayed.
  template <typename Enqueue>
  Status run_shape(std::pair<int, int> key, Enqueue&& enqueue);
  // Captures `enqueue`'s launches as the graph of `key` now (nothing runs); true when a new graph was made.
  template <typename Enqueue>
  bool capture_shape(std::pair<int, int> key, Enqueue&& enqueue);
  // absorb_device()'s chunk graphs for every row bucket up to the chunk (at load, after its scratch).
  void capture_absorb_graphs();
  // absorb_device()'s scratch (K/V, positions, row pointers, the fused K/V, the padding sink), reserved at load.
  Status reserve_device_absorb(InitSteps* steps);
  // y [rows, w.rows] = x [rows, w.cols] @ W^T, bf16 in, fp32 accumulate, y bf16 or fp32 with leading dimension ldy.
  // `skinny`: false keeps cuBLAS for a short K (the scan's W2 product, K = rank: skinny_gemm was slower there).
  Status gemm(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t w_rows, int64_t w_cols, void* y, bool y_f32,
              int64_t ldy, bool skinny = true);
  // y [rows, ff] = swiglu of x [rows, d] times the stacked gate/up W [2 ff, d]: the skinny GEMM's epilogue, or the GEMM
  // into `stacked` [rows, 2 ff] then swiglu_stacked.
  Status gemm_swiglu(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t ff, int64_t d, bf16_t* stacked,
                     bf16_t* y);
  // projected [rows, d] = x [rows, k] W^T (W [d, k]), then hidden += projected and normed = rms_norm(hidden) with
  // `weight`: the GEMM (skinny or cuBLAS) then residual_norm.
  Status gemm_residual_norm(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t d, int64_t k, bf16_t* projected,
                            bf16_t* hidden, const float* weight, bf16_t* normed);

  DsparkConfig config_;
  DrafterOptions options_;
  const bf16_t* embedding_ = nullptr;  // [V, d] the target's, borrowed
  DraftFacts facts_;
  DeviceStream stream_;
  TrackedBuffer<uint8_t> cublas_workspace_;  // set on the handle so its GEMMs can be captured into a graph
  CublasHandle cublas_;
  DeviceTimer block_timer_, scan_timer_;
  DeviceDraftWeights weights_;
  DeviceBlockScratch scratch_;
  DeviceAbsorbScratch absorb_;
  bool absorb_in_flight_ = false;  // an absorb_device() returned without waiting for its work (see settle())
  PinnedBytes absorb_staging_;     // absorb_device()'s uploads (row pointers, positions), one slot per chunk
  std::map<StreamId, std::unique_ptr<DeviceStreamContext>> streams_;
  std::vector<DeviceScanRecord> records_;  // host copy of the last scan
  PinnedBytes staging_;                     // host side of the inputs upload and the records copy back
  int64_t last_rows_ = 0;
  int64_t nonfinite_drafts_ = 0;
  double last_block_ms_ = 0;
  double last_scan_ms_ = 0;
  // Graph cache: key (request count, 0) for the block pass, (request count, depth) for the scan, (request count,
  // kPersistentScanKey) for the persistent scan, (rows, kAbsorbGraphKey) for absorb_device()'s chunk projections.
  struct GraphShape {
    int sightings = 0;
    bool failed = false;
    GraphExec exec;
  };
  bool graphs_on_ = true;
  std::optional<BlockAttentionKernel> attention_pin_;
  std::optional<bool> fused_scan_pin_;
  std::optional<bool> persistent_scan_pin_;
  PersistentHandoff persistent_handoff_ = PersistentHandoff::Flags;  // since batch s8A (below)
  bool batched_loads_ = true;                                         // since batch s8A (below)
  bool scan_planted_drop_ = false;
  bool scan_broadcast_ = true, scan_confidence_helpers_ = true;  // since batch s14A0 (above)
  int scan_backoff_ns_ = 100;  // since batch s14A (above)
  PersistentScanPlan scan_plans_[2];  // the persistent scan for one request, and for a group
  bool scan_all_greedy_ = false;      // the current draft() call's requests are all greedy
  bool scan_all_plain_ = false;       // ... all greedy or sampled without cuts (plain_gumbel_draw)
  bool keyed_scan_ = true;  // since batch s11A
  int keyed_scan_planted_ = 0;
  bool scan_keep_w2_ = true;
  bool programmatic_ = true;
  bool one_graph_ = true;  // session 16; on since batch b2 of session 19 (above)
  bool absorb_in_pass_ = true;  // since batch b2 of session 19 (above)
  bool absorb_pass_planted_ = false;
  AbsorbPass absorb_pass_;  // the waiting absorb and its branch (set_absorb_in_pass)
  // Where gemm(), absorb_chunk's kernels and their cuBLAS calls go: the drafter's stream, or the absorb branch.
  cudaStream_t launch_stream_override_ = nullptr;
  cublasHandle_t cublas_override_ = nullptr;
  cudaStream_t launch_stream() const { return launch_stream_override_ ? launch_stream_override_ : stream_.get(); }
  bool one_graph_planted_ = false;
  // Whether a pass whose scan has graph key `scan_key` runs as one graph with its block pass (set_one_graph).
  bool one_graph_pass(int scan_key) const {
    return one_graph_ && (scan_key == kPersistentScanKey || scan_key == kKeyedScanKey);
  }
  int skinny_parts_ = kDefaultSkinnyParts;
  DrafterInt8 int8_;      // empty with bits 0
  int int8_rows_ = 16;    // set_int8_rows
  bool int8_planted_ = false;
  int64_t int8_gemms_ = 0;
  int int8_splits_ = 0;
  bool int8_x_l1_ = false;
  // An int8 launch of `args` (its shape: automatic, or the split one on a narrow matrix), counted.
  Status launch_int8(Int8Gemm& args, cudaStream_t stream);
  // The int8 copy of w [w_rows, w_cols] when a GEMM of `rows` rows takes it (set_int8_rows), else null.
  const Int8Weights* int8_for(const bf16_t* w, int64_t rows, int64_t w_rows, int64_t w_cols) const {
    return rows <= int8_rows_ && int8_gemm_supported(rows, w_cols) ? int8_.find(w, w_rows, w_cols) : nullptr;
  }
  bool engine_gemms_ = false;
  bool tuned_gemms_ = false;
  TunedGemms tuned_;
  ls::cuda::GemmEngine engine_;
  bool fused_block_ = true;
  bool short_context_head_ = true;  // since batch s10B
  int head_stage_keys_ = 256;  // since batch s10B
  int row_attention_requests_ = 1;  // since batch s12A
  int row_group_heads_ = 4;         // since batch b2 of session 19 (set_row_group)
  bool row_group_planted_ = false;
  bool sampled_split_ = true;  // since batch s11A
  bool sampled_split_planted_ = false;
  bool long_context_ = false;  // the current pass's longest request holds more than context_bound(count)
  bool fused_absorb_ = true;
  int64_t l2_prefetch_bytes_ = int64_t{40} << 20;  // since batch s10B
  bool l2_prefetch_planted_ = false;
  SideBranch prefetch_branch_;  // the L2 prefetch's side stream
  EventLog profile_;
  std::map<std::pair<int, int>, GraphShape> graphs_;
  int64_t graph_replays_ = 0;
  int64_t graph_failures_ = 0;
  bool request_buckets_ = true;
  bool split_pick_ = true;
  int attention_chunks_ = 0;
  std::vector<bool> cooperative_attention_fits_;  // [count] the one-launch attention's grid is resident at once
  void fit_cooperative_attention();              // fills cooperative_attention_fits_ for the chunks in use
  int bucket_graphs_captured_ = 0;
  double bucket_capture_ms_ = 0;
  int absorb_graphs_captured_ = 0;
  double absorb_capture_ms_ = 0;
  int last_pass_requests_ = 0;
};

}  // namespace ls::dspark::cuda

#include "draft/dspark/cuda/cuda_drafter_shapes.h"  // run_shape / capture_shape
