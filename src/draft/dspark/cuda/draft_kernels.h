// The CUDA DSpark drafter's own kernels (launchers callable from host C++): block-pass ops and the fused Markov scan.
//
// Activations are bf16 on the device wherever the CPU Bf16 mode stores bf16-exact values, with the same rounding
// points (compute/ops.h); base and corrected logits are fp32. Every launcher enqueues on `stream` and returns the
// launch error as a Status.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "base/status.h"

namespace ls::dspark::cuda {

using bf16_t = __nv_bfloat16;

// The most block slots (drafts per pass) the device scan record holds.
inline constexpr int kMaxDeviceBlock = 32;
// The head sizes the block attention kernel is built for.
inline constexpr bool device_head_dim_supported(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

// One request of a block pass, as the device sees it: its stream's context cache and anchor position p.
struct DeviceBlockRequest {
  bf16_t* keys = nullptr;    // [layers, capacity, kv_size] this stream's context keys
  bf16_t* values = nullptr;  // [layers, capacity, kv_size]
  int64_t length = 0;        // p: context positions 0 .. p-1 are held; block rows go at p .. p+gamma-1
  int64_t capacity = 0;      // rows per layer
};

struct AttentionDims {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float scale = 0;
};

// out [rows, width] = table[tokens[row]] (bf16 rows of the shared embedding).
Status embed_tokens(const bf16_t* table, const int32_t* tokens, int64_t rows, int64_t width, bf16_t* out,
                    cudaStream_t stream);
// out [count] = bf16(in [count]) (round to nearest even).
Status round_to_bf16(const float* in, int64_t count, bf16_t* out, cudaStream_t stream);
// y [rows, width] = bf16(weight * bf16(x * inverse_rms)); sum of squares in double; y may alias x. `batched`
// (sessions 8 and 10): each lane's loads issued at once, its whole share of a row of up to 2048 (held for the
// output), 16 at a time for wider rows (the same bits as one at a time, the reference).
Status rms_norm(const bf16_t* x, int64_t rows, int64_t width, const float* weight, float eps, bf16_t* y,
                cudaStream_t stream, bool batched = false);
// Rotates x [rows, heads, head_dim] in place at positions[row] (or first_position + row when positions is null):
// fp32 cos/sin of position * inv_freq, interleaved pairs (2i, 2i+1) unless neox, one rounding.
Status rope_rotate(bf16_t* x, int64_t rows, int heads, int head_dim, const int32_t* positions, int64_t first_position,
                   const float* inv_freq, bool neox, cudaStream_t stream);
// x [count] = bf16(x + delta).
Status add_residual(bf16_t* x, const bf16_t* delta, int64_t count, cudaStream_t stream);
// out [count] = bf16(bf16(silu(gate)) * up); out may alias gate.
Status swiglu(const bf16_t* gate, const bf16_t* up, int64_t count, bf16_t* out, cudaStream_t stream);
// The fused block-pass steps (block_kernels.cu); each gives the bits of the unfused sequence it replaces.
struct QkvHeads {
  const bf16_t* qkv = nullptr;  // [rows, heads + 2 kv_heads, head_dim] the stacked q/k/v GEMM output
  int64_t rows = 0;             // requests x gamma
  int gamma = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  const float* q_norm = nullptr;  // [head_dim]
  const float* k_norm = nullptr;  // [head_dim]
  float eps = 0;
  const int32_t* positions = nullptr;  // [rows]
  const float* inv_freq = nullptr;     // [head_dim / 2]
  bool neox = false;
  const DeviceBlockRequest* requests = nullptr;  // keys/values go to rows p + slot of `layer`
  int layer = 0;
  bf16_t* queries = nullptr;  // [rows, heads, head_dim]
  bool programmatic = false;  // launched to overlap the previous kernel's tail (it waits before reading)
  bool batched = false;       // session 8: each lane's loads issued at once (norm_rope_head_batched, the same bits)
};
// q heads: rms_norm(q_norm) + rope_rotate -> queries; k heads: the same with k_norm -> the cache; v heads copied to
// the cache (= rms_norm, rope_rotate twice and scatter_block_kv).
Status qkv_heads(const QkvHeads& args, cudaStream_t stream);
// x = bf16(x + delta) when delta is non-null, then y = rms_norm(x) (= add_residual + rms_norm, a CTA per row).
// `programmatic` (here and below): launched to overlap the previous kernel's tail; the kernel waits for it before
// reading or writing anything (the same bits). `batched` (session 8): each thread's loads issued at once
// (residual_norm_row_batched, the same bits).
Status residual_norm(bf16_t* x, const bf16_t* delta, int64_t rows, int64_t width, const float* weight, float eps,
                     bf16_t* y, cudaStream_t stream, bool programmatic = false, bool batched = false);
// out [rows, width] = swiglu(gate_up[:, :width], gate_up[:, width:]) of the stacked gate/up output [rows, 2 width].
Status swiglu_stacked(const bf16_t* gate_up, int64_t rows, int64_t width, bf16_t* out, cudaStream_t stream,
                      bool programmatic = false);
// Copies each request's block K/V [gamma, kv_size] into its cache rows p .. p+gamma-1 of `layer`.
Status scatter_block_kv(const bf16_t* keys, const bf16_t* values, const DeviceBlockRequest* requests, int count,
                        int gamma, int kv_size, int layer, cudaStream_t stream);
// Bidirectional block attention: query row (request i, slot s) over keys 0 .. p_i+gamma-1 of layer `layer`
// (context, then the block): eager softmax with the CPU's bf16 roundings. q, out [count * gamma, heads, head_dim].
// The variants: Warp (a warp per block slot and head, lanes over keys; the one measured on the H200), Tile
// (attention_tile.cu: a CTA per request and KV head over shared-memory K/V tiles, sums in key order) and Split
// (attention_split.cu: Tile's CTA split over key chunks, so few requests still fill the device; needs scratch);
// Cooperative (attention_split.cu: Split's three launches as one cooperative launch, the same bits; needs
// scratch.barriers); Head (attention_head.cu, session 9: a CTA per request and query head over every key with Split's
// chunk arithmetic, so Split's bits, in one launch without scratch).
enum class BlockAttentionKernel { Warp, Tile, Split, Cooperative, Head, Row };
// The drafter's pick: Split where the tile shapes are supported, else Warp.
BlockAttentionKernel choose_block_attention(int count, int gamma, AttentionDims dims);
Status block_attention_warp(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                            AttentionDims dims, int layer, bf16_t* out, cudaStream_t stream);
// Tile takes gamma x (heads / kv_heads) <= 64 query rows per KV head at head_dim 32 or 64.
bool block_attention_tile_supported(int gamma, AttentionDims dims);
Status block_attention_tile(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                            AttentionDims dims, int layer, bf16_t* out, cudaStream_t stream);

// Split: grid (request, KV head, chunk); the chunk count depends on the request count only (a graph's grid stays
// valid as contexts grow); each chunk takes keys [c * L, (c+1) * L) of L = ceil(keys / chunks). Three launches:
// per-chunk row max and sum of exponentials; per-chunk probabilities (the eager softmax's roundings, the total
// combined from the chunks' sums in chunk order) times values; the chunks' partial outputs added in chunk order.
struct SplitAttentionScratch {
  float* stats = nullptr;     // [count, kv_heads, chunks, rows] (max, total) pairs
  float* partials = nullptr;  // [count, kv_heads, chunks, rows, head_dim]
  // [count, kv_heads] zero between launches: the values launch's last CTA of each (request, KV head) adds the
  // chunks' partials itself (two launches, the same bits); null: the third, combine launch (the drafter's choice:
  // batch B timed the ticketed one slower, 0.195 vs 0.171 ms of attention at 1 stream, context 512, eager: one CTA
  // per pair adds every chunk, where the combine launch spreads the outputs over the device).
  unsigned int* tickets = nullptr;
  // Key chunks per (request, KV head): 0 = split_attention_chunks(count, kv_heads); a pin takes at most that (the
  // scratch is sized for it).
  int chunks = 0;
  // The cooperative variant's [count * kv_heads] pair counters and a sticky broken flag after them, zero before the
  // first launch (each launch's last CTA of a pair resets its counter).
  unsigned int* barriers = nullptr;
  // The three launches each launched to overlap the previous kernel's tail (each waits before reading). The drafter
  // leaves it off: batch s7A timed it slower (block pass +16 us at 1 stream, +45 us at 4: the early CTAs of the next
  // sweep hold their shared memory while they wait).
  bool programmatic = false;
  // Session 8: the loads each thread makes in a row (queries, the other chunks' stats, the chunks' partials in the
  // combine) issued together before the arithmetic (16-byte query loads; stats and partials into registers), the
  // same arithmetic in the same order, so the same bits; false: the loop of single loads (the old path).
  bool batched_loads = false;
};
inline constexpr int kMaxSplitChunks = 32;  // split_attention_chunks' most
int split_attention_chunks(int count, int kv_heads);
// Floats of stats and of partials the split kernel needs for up to `requests` requests (any count <= requests).
int64_t split_attention_stat_floats(int requests, int gamma, AttentionDims dims);
int64_t split_attention_partial_floats(int requests, int gamma, AttentionDims dims);
Status block_attention_split(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                             AttentionDims dims, int layer, SplitAttentionScratch scratch, bf16_t* out,
                             cudaStream_t stream);
// Whether the one-launch split takes `count` requests here: the tile shapes fit and every CTA of the grid (count x
// kv_heads x chunks, `chunks` as SplitAttentionScratch::chunks) is resident at once on this device.
bool block_attention_cooperative_supported(int count, int gamma, AttentionDims dims, int chunks);
// Split in one cooperative launch: per chunk the stats, a barrier of the pair's chunk CTAs, the values, a second
// barrier, then each chunk CTA adds its share of the outputs over the chunks in chunk order. The three launches'
// bits. A barrier that times out (a device fault) leaves NaN outputs from then on, so the drafts fail by name.
Status block_attention_cooperative(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                                   AttentionDims dims, int layer, SplitAttentionScratch scratch, bf16_t* out,
                                   cudaStream_t stream);

// Head (session 9): grid (request, query head), one CTA over keys 0 .. p+gamma-1 with the chunks Split would use for
// `count` requests (`chunks` as SplitAttentionScratch::chunks): the scores once into shared memory (a window of
// whole chunks or whole tiles at a time; recomputed for the values when the keys take more than one window), each
// (row, chunk)'s stats by one thread, the rows' totals combined in chunk order, the values in key order with the
// chunks' partials added in chunk order. Split's bits (tested). Takes gamma <= 32 at head_dim 32 or 64.
bool block_attention_head_supported(int gamma, AttentionDims dims);
// The drafter's automatic attention takes Head from this many requests (block pass buckets) up (batch s9B).
inline constexpr int kHeadAttentionRequests = 16;
// `stage_keys`: K / V rows staged in shared memory per trip, 128 or 256 (session 10; the same bits).
Status block_attention_head(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                            AttentionDims dims, int layer, int chunks, bf16_t* out, cudaStream_t stream,
                            int stage_keys = 128);

// Row (session 12): grid (request, query head, block row), 256 threads, the chunks Split would use for `count`
// requests (`chunks` as above): every step a short one (a thread per key for the scores, per chunk for the stats, per
// (chunk, 4 dims) for the values, per dimension for the chunk-ordered sum). Split's bits (tested). Takes gamma <= 32
// at head_dim 32 or 64. `planted_first_chunk` (tests only) leaves the first chunk out of the sum. The first 160 keys'
// K / V rows are copied into shared memory first (whole-line copies; session 12's staged variant, the only one since
// session 13).
bool block_attention_row_supported(int gamma, AttentionDims dims);
Status block_attention_row(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                           AttentionDims dims, int layer, int chunks, bf16_t* out, cudaStream_t stream,
                           bool planted_first_chunk = false);
// Grouped row (session 19): the row kernel's arithmetic (so Split's bits) with `group_heads` (2, 3 or 4) query heads
// of one KV head in a CTA of group_heads x 256 threads, their K / V staged once (up to 512 keys at 3 or 4, 256 at 2;
// the row kernel: 160 per query head), V in its own copy group. Supported where the query heads a KV head divide by
// `group_heads` and the device's opt-in shared memory holds the CTA's (209 / 193 / 105 KB at 4 / 3 / 2, head_dim 64).
bool block_attention_row_group_supported(int gamma, AttentionDims dims, int group_heads);
Status block_attention_row_group(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                                 AttentionDims dims, int layer, int chunks, int group_heads, bf16_t* out,
                                 cudaStream_t stream, bool planted_first_chunk = false);

// ---- Weight prefetch into L2 (l2_prefetch.cu) ----

// Rows of a weight matrix to ask L2 for: of `rows` rows of `row_bytes` from `base`, every row r with r % 8 < eighths
// (an even share of each column tile a GEMM streams). Rows and base 16-byte aligned.
struct L2PrefetchSpan {
  const void* base = nullptr;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int eighths = 8;
};
inline constexpr int kMaxL2PrefetchSpans = 4;
// Issues the spans' prefetches (one small launch; it ends before the data arrives) and changes no memory.
// `planted_store` (tests only) flips a bit of the first row instead, so a bit test can see the branch misbehave.
Status prefetch_l2_spans(std::span<const L2PrefetchSpan> spans, bool planted_store, cudaStream_t stream);

// ---- Few-row GEMMs (skinny_gemm.cu) ----

// y [rows, n] = x [rows, k] W^T (W [n, k] bf16, fp32 accumulate) for rows <= 48 on the tensor cores, W streamed once
// (the drafter's GEMMs at one or two requests). Epilogues: bf16 or fp32 y with leading dimension ldy, or SwiGLU of the
// stacked gate/up W [2F, k]: y [rows, F] = swiglu(bf16(x gate^T), bf16(x up^T)) (the bits of the GEMM's bf16 output
// followed by swiglu_stacked). The K summation order differs from cuBLAS (not batch invariant; drafts only). (The
// residual + norm by the launch's last CTA lost in s6A and s15A, a serial tail the norm launch has not: removed.)
enum class SkinnyEpilogue { Bf16, F32, Swiglu };
struct SkinnyGemm {
  const bf16_t* x = nullptr;  // [rows, k]
  int rows = 0;
  int64_t k = 0;
  const bf16_t* w = nullptr;  // [n, k]
  int64_t n = 0;
  void* y = nullptr;  // [rows, ldy] bf16 or fp32
  int64_t ldy = 0;
  SkinnyEpilogue epilogue = SkinnyEpilogue::Bf16;
  bool planted_stale_piece = false;     // tests only: each warp's later pieces reuse its first piece's W loads
};
// Up to 16 rows (one request's block). (Session 7's two W tiles a CTA and 48-row x tiles were slower in both
// batches and are gone since session 8.)
inline constexpr int kSkinnyMaxRows = 16;
inline bool skinny_gemm_supported(int64_t rows, int64_t k) { return rows >= 1 && rows <= kSkinnyMaxRows && k % 8 == 0; }
// `programmatic`: launched to overlap the previous kernel's tail (its W loads go first; x is read after the wait).
Status skinny_gemm(const SkinnyGemm& args, bool programmatic, cudaStream_t stream);

// ---- Markov scan ----

// What the scan needs of one request (uploaded once per pass).
struct DeviceScanRequest {
  int32_t anchor = 0;
  int32_t depth = 0;
  int64_t anchor_position = 0;
  float temperature = 0;  // <= 0: greedy
  int32_t top_k = 0;
  float top_p = 1;
  float min_p = 0;
  uint64_t seed = 0;
  int32_t nan_logit_slot = -1;  // planted faults (test only), -1 = none
  int32_t inf_confidence_slot = -1;
  int32_t out_of_range_pick_slot = -1;
};

enum ScanStatus : int32_t {
  kScanOk = 0,
  kScanNonfiniteLogit = 1,
  kScanNonfiniteConfidence = 2,
  kScanPickOutOfRange = 3,
  kScanBarrierTimeout = 4,  // the persistent scan's grid barrier waited too long (a device fault, not the drafts')
};

// The scan's running state and outputs of one request; the whole array is the one copy back to the host.
struct DeviceScanRecord {
  int32_t previous = 0;     // the chain's last token (the anchor first)
  int32_t status = kScanOk;
  int32_t failed_slot = -1;
  int32_t failed_pick = 0;
  float running = 1.0f;     // product of confidences so far
  int32_t tokens[kMaxDeviceBlock];
  float chances[kMaxDeviceBlock];
};

// Fixed inputs of every scan step.
struct ScanShape {
  int64_t vocab = 0;
  int rank = 0;
  int hidden = 0;
  int gamma = 0;
  bool has_confidence = false;
};

// e [count, rank] = W1[previous] for requests still drafting at `slot` (zeros for the others).
Status markov_gather(const bf16_t* w1, const DeviceScanRequest* requests, const DeviceScanRecord* records, int count,
                     ScanShape shape, int slot, bf16_t* embeddings, cudaStream_t stream);
// A vocab chunk's greedy best (id -1: none) and whether it held a non-finite logit (the fused step's partials).
struct ScanPartial {
  double value = 0;
  int32_t id = -1;
  int32_t nonfinite = 0;
};
// One scan step for every request still drafting: l = markov [i, V] + U [i*gamma+slot, V] (written back into
// `markov`), the pick (greedy argmax or the keyed draw at position p+slot+1), the fp32 confidence
// sigmoid((w . [Hf ; e] + b) / T_slot), the failure flags; then tokens/chances/previous in the record.
struct ScanStepInputs {
  const DeviceScanRequest* requests = nullptr;
  DeviceScanRecord* records = nullptr;
  int count = 0;
  float* markov = nullptr;              // [count, V] W2 e on entry, corrected logits on exit
  const float* base_logits = nullptr;   // [count * gamma, V] U
  const bf16_t* final_hidden = nullptr;  // [count * gamma, hidden] Hf
  const bf16_t* embeddings = nullptr;    // [count, rank] e
  const float* confidence_weight = nullptr;  // [hidden + rank] or null
  float confidence_bias = 0;
  const float* confidence_temperatures = nullptr;  // [gamma] or null
  // The fused step only: the Markov tables, per-(request, vocab chunk) partial picks and one ticket counter per
  // group of requests (zero between steps: the last CTA of a group resets it).
  const bf16_t* w1 = nullptr;  // [V, rank]
  const bf16_t* w2 = nullptr;  // [V, rank]
  ScanPartial* partials = nullptr;  // [count, fused_scan_chunks(V)]
  unsigned int* tickets = nullptr;  // [fused_scan_groups(count)]
  bool keep_w2 = true;              // W2 loads with L2 evict-last priority
  bool programmatic = true;         // launch allowed to overlap the previous kernel's tail (sm_90)
  int planted_keyed_shift = 0;      // tests only: the keyed persistent scan draws at positions shifted by this
  bool planted_odd_words = false;  // tests only: the flagged combine leaves out the odd-numbered CTAs' words
  bool planted_broadcast_slots = false;  // tests only: the broadcast dot reads its held W2 chunks unswizzled
  // The persistent scan's confidence helpers (session 14; set by markov_scan_persistent): the grid's last CTAs.
  int confidence_helpers = 0;
  int handoff_backoff_ns = 0;  // the flagged handoff's sleep between polls (session 14, set_scan_handoff_backoff)
  bool planted_helper_anchor = false;  // tests only: the helpers take every slot's e from the anchor
};
Status markov_pick(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream);
// markov_pick in two launches (the same bits): grid (vocab chunk of kSplitPickIds ids, request) writes the corrected
// logits and each chunk's greedy best and non-finite flag into `partials`, then a CTA per request combines them
// and finishes the step. The one-CTA pick reads and writes a 256 KiB row on one SM; this spreads it.
inline constexpr int kSplitPickIds = 4096;
inline int64_t split_pick_chunks(int64_t vocab) { return (vocab + kSplitPickIds - 1) / kSplitPickIds; }
Status markov_pick_split(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream);

// The fused scan step (one launch, no GEMM): grid (vocab chunk of kFusedScanIds ids, group of requests: 1 for a
// single request, else kFusedScanGroup) computes l = W2 W1[previous] + U_slot for its chunk (fp32 dot, one W2 row read
// per group, every W2 load issued before the previous step is waited for), writes the corrected logits, flags
// non-finite ones and keeps the chunk's greedy best; the group's last CTA to finish (a ticket counter) combines the
// chunks' bests and finishes the step as markov_pick does (keyed draw over the whole row when sampled, confidence
// with e read from W1, record). Needs rank % 8 == 0 and rank <= kMaxFusedScanRank. The drafter takes it for a single
// request (the GEMM path is faster from a few requests up: e is read from shared memory per request).
inline constexpr int kMaxFusedScanRank = 256;
inline constexpr int kFusedScanIds = 64;    // vocab ids per chunk (CTA)
inline constexpr int kFusedScanGroup = 8;   // requests per CTA when there is more than one
inline bool fused_scan_supported(const ScanShape& shape) {
  return shape.rank > 0 && shape.rank % 8 == 0 && shape.rank <= kMaxFusedScanRank;
}
inline int64_t fused_scan_chunks(int64_t vocab) { return (vocab + kFusedScanIds - 1) / kFusedScanIds; }
inline int fused_scan_groups(int count) { return count <= 1 ? 1 : (count + kFusedScanGroup - 1) / kFusedScanGroup; }
Status markov_step_fused(const ScanStepInputs& inputs, ScanShape shape, int slot, cudaStream_t stream);
// The one-request fused step's W2 W1[previous] alone (its fp32 dot order), written raw into `markov` for
// markov_pick_split, which adds U as the fused step does: the fused step's logits and picks, with the keyed draw
// spread over SMs instead of one 256-thread CTA. `planted_base` (tests only) adds U here too (the pick then twice).
Status markov_product_fused(const ScanStepInputs& inputs, ScanShape shape, int slot, bool planted_base,
                            cudaStream_t stream);

// The persistent greedy scan (scan_persistent.cu): every slot of up to kPersistentScanGroup greedy requests in one
// cooperative launch (slots up to each request's depth, read on the device: one graph serves every depth). W2 is
// held on chip (registers + shared memory) for the whole scan; a grid barrier per slot; the confidences after the
// last slot (a CTA each; `markov` rows hold them); the logits, picks and chance bits of markov_step_fused. Needs `partials` [gamma, plan.group, plan.grid] and `barrier` [2] (counter and timed-out
// flag, zeroed by the launch sequence). Greedy requests only (the caller checks).
inline constexpr int kPersistentScanGroup = 8;
struct PersistentScanPlan {
  int grid = 0;         // CTAs (all resident); 0: not supported for this shape on this device
  int ids_per_cta = 0;  // vocab ids per CTA, a multiple of 32
  int held_rounds = 0;  // 32-row rounds of W2 a CTA holds in shared memory (the rest: registers, then L2)
  int group = 0;        // requests the kernel takes: 1, or kPersistentScanGroup
  size_t shared_bytes = 0;
  bool keyed = false;   // the keyed instances (markov_scan_persistent `keyed`) are resident at this plan too
  // The broadcast dot (session 14, one request: a thread per vocabulary row): planned, its W2 chunks held in shared
  // memory past each thread's registers, and its dynamic shared bytes.
  bool broadcast = false;
  int held_chunks = 0;
  size_t broadcast_bytes = 0;
  // Confidence helpers (session 14, one request, the flagged handoff): CTAs resident past `grid` (up to 4) that
  // compute each slot's confidence during the slot loop instead of the tail.
  int helpers = 0;
};
// The plan for `count` requests on the current device (grid 0 when the shape or the device cannot take it).
PersistentScanPlan persistent_scan_plan(const ScanShape& shape, int count);
// How a slot's CTA picks meet (the same bits either way): Counter (session 5) writes each partial, fences, adds to
// one counter that thread 0 of every CTA spins on, then reads all partials; Flags (session 8) writes each CTA's
// pick as one 64-bit word (arrived bit, non-finite bit, id, value) with no fence, and every thread of every CTA
// spins on its own CTAs' words (the words zeroed by a memset before the launch).
enum class PersistentHandoff { Counter, Flags };
// 64-bit words the Flags handoff uses in `partials` (which must hold them): [gamma][group][grid] picks, [grid]
// confidence arrivals, one timed-out word.
inline int64_t persistent_flag_words(const ScanShape& shape, const PersistentScanPlan& plan) {
  return (static_cast<int64_t>(shape.gamma) + 1) * plan.group * (plan.grid + plan.helpers) + 1;
}
// More requests than plan.group take one launch per group, one after the other. `launched`: the kernels enqueued
// (0 when it fails before any: the caller may then take another scan). `keyed` (session 11): requests with a
// temperature take the plain Gumbel max of their logits (draw_token's draw for rows without top-k, top-p or min-p:
// the caller checks that every request is greedy or such), the verified pick's bits. Session 14, where the plan has
// them, for one request (the same bits): `broadcast` the broadcast dot, `helpers` the confidence helpers (the
// flagged handoff with a confidence head only).
struct PersistentScanChoice {
  bool keyed = false;
  bool broadcast = false;
  bool helpers = false;
};
Status markov_scan_persistent(const ScanStepInputs& inputs, ScanShape shape, const PersistentScanPlan& plan,
                              PersistentHandoff handoff, unsigned int* barrier, cudaStream_t stream, int* launched,
                              PersistentScanChoice choice = {});

// Test hook: the device keyed draw of each row of logits [rows, vocab] (the scan's own pick code), for comparing
// with draw_token bit for bit. Greedy rows take the argmax.
Status draw_rows_on_device(const float* logits, int rows, int64_t vocab, const DeviceScanRequest* samplings,
                           const int64_t* positions, int32_t* picks, cudaStream_t stream);

}  // namespace ls::dspark::cuda
