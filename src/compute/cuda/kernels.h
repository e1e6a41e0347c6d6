// The stateless CUDA ops (bf16 activations, fp32 accumulation) and the batch-invariant bf16 GEMM; plain C++ header.
//
// Every function takes device pointers and a stream, launches asynchronously and returns the launch's Status.
// Each op computes one row with the same arithmetic in the same order whatever the number of rows launched or the
// row's place among them, and rounds to bf16 exactly where the CPU ops round in Bf16 mode (src/compute/ops.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "base/bf16.h"
#include "base/status.h"
#include "compute/cuda/cuda_util.h"
#include "compute/cuda/features.h"

namespace ls::cuda {

// A bf16 weight matrix on the device: W [rows = N out features, cols = K in features] row-major, bias [rows] fp32
// or null. K must be a multiple of 8 (16-byte rows) and w 16-byte aligned.
struct DeviceMatrix {
  const bf16* w = nullptr;     // [rows, cols] bf16
  const float* bias = nullptr;  // [rows] fp32 or null
  int64_t rows = 0;
  int64_t cols = 0;
};

// The bf16 tensor-core GEMM (mma.sync m16n8k16, fp32 accumulators). Every output follows one canonical order that
// depends on K alone (K <= 2048: one accumulator fed with ascending 16-wide K steps; above: 1024-wide slices of that
// kind added in slice order), for every m and every kernel configuration, so a row's bits never depend on m.
class GemmEngine {
 public:
  GemmEngine();  // this device's features (cuda_features())
  // An engine choosing under `features` (e.g. portable_features(): never a wgmma, TMA or split configuration).
  explicit GemmEngine(const CudaFeatures& features);
  // y [m, N] = x [m, K] @ W^T (+ bias); exactly one of y_b16 (rounded once) / y_f32 is non-null.
  // x must be 16-byte aligned with rows of K elements.
  Status gemm(const bf16* x, int64_t m, const DeviceMatrix& w, bf16* y_b16, float* y_f32, cudaStream_t stream) const;
  // The tile configuration the engine picks for (m, N): a name for benches and logs.
  const char* tile_name(int64_t m, int64_t n, int64_t k) const;
  // Test-only fault: when set, launches with m > 16 walk K (each slice's tiles) in descending order (breaks
  // invariance on purpose).
  void set_fault_reverse_k_for_test(bool on) { fault_reverse_k_ = on; }
  // Test/bench only: run kernel configuration `tile` (0 .. tile_count()-1) wherever it computes the canonical order
  // for (m, K), else the automatic choice; -1 = automatic.
  void pin_tile_for_test(int tile) { pinned_tile_ = tile; }
  static int tile_count();

 private:
  int sm_count_ = 132;
  bool clusters_ = false;  // thread-block clusters (sm_90+): the split configurations may run
  bool wgmma_ = false;     // sm_90a code on a 9.0 device: the wgmma and TMA configurations may run
  int shared_optin_ = 0;   // the device's opt-in shared memory per block: larger tiles give way to smaller ones
  bool fault_reverse_k_ = false;
  int pinned_tile_ = -1;
};

// Bench only (A/B): the engines' picks for 17..64 rows take the verify tiles (on) where the streamed windows do not
// (set_decode_rows), or the picks before them (off, the default: split / 64-row tiles). Same bits either way; drop
// captured graphs after a change.
void set_verify_tiles(bool on);
// Bench only (A/B): which verify windows of 17..64 rows take the streaming decode kernel (32 / 64 x rows a tile: one
// weight stream, up to four m16 mma sets on each fragment; K of at most 8 slices). 32 (the default, from the H200's
// timings): GEMMs with sliced K or one-slice N < 8192 up to 32 rows, the q / k / v launch up to 32;
// 64: every GEMM it takes and the fused gate_up + SwiGLU too, up to 64 rows; 16: none (the older picks). Same bits
// either way; drop captured graphs after a change.
void set_decode_rows(int max_rows);

// The decode kernel's configurations (m <= 16), for benches and tests: variants 0 .. decode_variant_count()-1, each
// computing the canonical order (so every variant gives the bits of GemmEngine::gemm); y = x [m, K] @ W^T (+ bias).
int decode_variant_count();
const char* decode_variant_name(int variant);
Status gemm_decode_variant(int variant, const bf16* x, int64_t m, const DeviceMatrix& w, bf16* y_b16, float* y_f32,
                           cudaStream_t stream);
// Benches and tests (gpu_bench --decode-staged): the engine's narrow one-slice decode GEMMs (N < 8192, K <= 2048)
// and the grouped q / k / v launch take staged configuration `config` (0 .. decode_staged_config_count()-1; variants
// decode_variant_count() - decode_staged_config_count() on) at every width up to 16 rows; -1 puts the automatic
// picks back (the default), -2 the streaming picks only (the path before the staged picks). The bits are the same
// either way; drop captured graphs after a change.
void set_decode_staged_pick(int config);
// Bench only (A/B): one-slice decode GEMMs of N <= max_n (< 8192; max_n < 0: N = -max_n only) at m <= 8 take decode
// variant `variant` (any of decode_variant_count(), staged ones included) unless a staged pick is pinned; -1 puts the
// automatic narrow pick back (the default), -2 none (set_decode_staged_pick(-2), the old path, drops it too).
// Same bits; drop captured graphs after a change.
void set_decode_narrow_pick(int variant, int64_t max_n);
// Bench only (A/B): the streaming decode launches (variants 1..6, the fused SwiGLU and q / k / v launches) ask L2
// for their weights before waiting on the kernel before them (sm_90; off by default). Same bits either way.
void set_decode_l2_prefetch(bool on);
int decode_staged_config_count();

// The weight-streaming pipeline decode GEMM (sm_90; docs/cuda.md "Decode GEMM as a weight pipeline"): a producer
// warp streams W (and x) rows with cp.async.bulk into a ring of mbarrier stages, consumer warps run each output's
// chain in the canonical order, so the bits are GemmEngine::gemm's. set_decode_pipeline(true) routes the engine's
// decode GEMMs (m <= 16), gemm_decode_swiglu and gemm_decode_group there wherever it fits (K a multiple of 64);
// false (the default) keeps the streaming kernels. pinned_config >= 0 pins a configuration where it fits (bench),
// ring_kb > 0 sets the rings' bytes per CTA (default 128 KB). Same bits; drop captured graphs after a change.
void set_decode_pipeline(bool on, int pinned_config = -1, int ring_kb = 0);
bool decode_pipeline_on();
// Bench: K tiles of 64 per stage row (one row copy) of the pipeline (4, 8; anything else: 16, the default). Same bits.
void set_decode_pipe_chunk(int tiles);
// The pipeline's weight copies (session 9; LS_DECODE_TMA sets it for a process): 0 row copies, 1 one TMA tensor box
// [8 or 16 rows, chunk K tiles] a stage (3D boxes), for every pipeline launch; -1 (the
// default): one-row launches of the shape classes in set_decode_pipe_tma_classes (kDecodeTma* bits; default wide |
// sliced, LS_DECODE_TMA_CLASSES sets it for a process) take the pipeline with 3D boxes while the automatic picks are
// on (set_decode_pipe_narrow), the rest row copies. Same bits always; drop captured graphs after a change.
constexpr int kDecodeTmaNarrow = 1;  // one slice, N <= 4096 (o_proj, out_proj, q / k / v)
constexpr int kDecodeTmaWide = 2;    // one slice, N > 4096 (in_proj)
constexpr int kDecodeTmaSwiglu = 4;  // the fused gate_up + SwiGLU
constexpr int kDecodeTmaSliced = 8;  // K > 2048 (down)
void set_decode_pipe_tma(int mode);
int decode_pipe_tma();
void set_decode_pipe_tma_classes(int classes);
int decode_pipe_tma_classes();
// The automatic picks (on by default since batch s8B; LS_DECODE_PIPE=0 turns them off): decode GEMMs of 1..16 rows
// of one slice and N <= 4096 and the q / k / v launch of 1..16 rows take the pipeline even with
// set_decode_pipeline(false), and by class (set_decode_pipe_tma_classes) one-row wide / sliced ones and wide ones of
// 2..16 rows (session 10). Same bits; drop captured graphs after a change.
void set_decode_pipe_narrow(bool on);
bool decode_pipe_narrow_on();
// Tests (session 10; LS_DECODE_PIPE_X is gone after s11A): x is copied once per CTA into shared memory (mode 1:
// wherever it fits; -1, the default: with row copies, and with tensor boxes above two rows, where it fits; 0: never,
// each stage brings its unit's x rows). Same bits; drop captured graphs after a change.
void set_decode_pipe_x(int mode);
int decode_pipe_x();
// Tests: whether the engine's decode GEMM of m rows of W (swiglu: gemm_decode_swiglu's W) runs on the pipeline under
// the switches as set now, and (x_once) whether that launch copies x once.
bool decode_pipe_routes(int64_t m, const DeviceMatrix& w, bool swiglu, bool* x_once = nullptr);
// Pipeline launches of 2..32 rows on about SMs / spread CTAs (more columns, fewer x copies a CTA; session 13; 2 by
// default since batch s13A, 1 = one CTA an SM as at one row; tests only since session 14). Same bits; drop captured
// graphs after a change.
void set_decode_pipe_spread(int spread);
int decode_pipe_spread();
// Verify windows of 17..32 rows on the pipeline: one-slice, non-SwiGLU GEMMs and the q / k / v launch, x copied once,
// two m16 tiles on each weight fragment (session 13; on by default since batch s13A; off, tests only since session
// 14: the streamed windows and tiles). Same bits; drop captured graphs after a change.
void set_decode_pipe_rows32(bool on);
bool decode_pipe_rows32();
// Tests: gemm_decode_pipe's launches that copy x once walk each unit's K tiles backwards (a planted K-order fault).
void set_decode_pipe_fault_for_test(bool on);
// Whether gemm_decode_pipe takes configuration `config` for m rows of W (shape, K, shared memory).
bool decode_pipe_fits(int config, int64_t m, const DeviceMatrix& w);
int decode_pipe_config_count();
const char* decode_pipe_config_name(int config);
// y = x [m, K] @ W^T (+ bias) on pipeline configuration `config` (-1: automatic); the last two configurations are
// the fused gate_up + SwiGLU (W = gate_up [2F, K], y_b16 = act [m, F]). Refuses by number what it does not take.
Status gemm_decode_pipe(const GemmEngine& engine, int config, const bf16* x, int64_t m, const DeviceMatrix& w,
                        bf16* y_b16, float* y_f32, cudaStream_t stream);

// act [m, F] = swiglu(gate, up) of (x [m, K] @ gate_up^T) for gate_up [2F, K] (gate rows, then up rows; optional
// bias [2F]): the bits of GemmEngine::gemm (bf16 out) then swiglu, in one launch. Only where decode_swiglu_fits
// (1..16 rows, 64 after set_decode_rows(64); K <= 2048 a multiple of 8, an even N); `engine` must exist (its
// constructor sets shared-memory limits).
bool decode_swiglu_fits(int64_t m, const DeviceMatrix& gate_up);
Status gemm_decode_swiglu(const GemmEngine& engine, const bf16* x, int64_t m, const DeviceMatrix& gate_up, bf16* act,
                          cudaStream_t stream);

// ys[i] [m, N_i] = x [m, K] @ ws[i]^T (+ bias), bf16 out, for up to 4 matrices of one K in one launch (q / k / v):
// the bits of one GemmEngine::gemm each. Only where decode_group_fits (1..32 rows; 16 / 64 after set_decode_rows; K
// <= 2048 a multiple of 8).
bool decode_group_fits(int64_t m, std::span<const DeviceMatrix> ws);
Status gemm_decode_group(const GemmEngine& engine, const bf16* x, int64_t m, std::span<const DeviceMatrix> ws,
                         std::span<bf16* const> ys, cudaStream_t stream);

// The residual add + RMSNorm that feeds a decode GEMM, done in the GEMM's own prologue (staged kernel, 1..16 rows,
// K <= 2048 a multiple of 8): h_out = round(h + delta) when delta is set, x = RMSNorm(h_out, or h without delta) *
// weight, then the GEMM of x: add_rms_norm's (rms_norm's) bits and the GEMM's, without the norm launch.
struct DecodeNorm {
  const bf16* h = nullptr;       // [m, K]
  const bf16* delta = nullptr;   // [m, K] or null
  bf16* h_out = nullptr;         // [m, K] round(h + delta): set exactly with delta, aliasing neither h nor delta
  const bf16* weight = nullptr;  // [K]
  float eps = 0;
};
bool decode_norm_fits(int64_t m, int64_t k);
// ys[i] [m, N_i] = x @ ws[i]^T (+ bias), x from the norm prologue, up to 4 matrices of one K (q / k / v).
Status gemm_decode_norm(const GemmEngine& engine, const DecodeNorm& norm, int64_t m, std::span<const DeviceMatrix> ws,
                        std::span<bf16* const> ys, cudaStream_t stream);
// act [m, F] = swiglu of (x @ gate_up^T) for gate_up [2F, K], x from the norm prologue (gemm_decode_swiglu's bits).
Status gemm_decode_norm_swiglu(const GemmEngine& engine, const DecodeNorm& norm, int64_t m,
                               const DeviceMatrix& gate_up, bf16* act, cudaStream_t stream);
// Bench only: the staged configurations (as set_decode_staged_pick numbers them) the norm launches take: any for
// gemm_decode_norm (default 0), 2 or 3 (16 columns a warp) for gemm_decode_norm_swiglu (default 2), or 4: the
// streaming SwiGLU kernel with the norm staged once per CTA (weights streamed, not staged). Same bits.
void set_decode_norm_configs(int group_config, int swiglu_config);

// y [rows, width] = RMSNorm(x) * weight (CPU Bf16 rounding: round(w * round(x * inv_rms))); also per head.
Status rms_norm(const bf16* x, int64_t rows, int width, const bf16* weight, float eps, bf16* y, cudaStream_t stream);

// h [count] = round(h + delta).
Status add_residual(bf16* h, const bf16* delta, int64_t count, cudaStream_t stream);

// h = round(h + delta) [rows, width], then y = RMSNorm(h) * weight: add_residual + rms_norm in one launch, same bits
// (a CTA per row; rows it cannot take, e.g. width not a multiple of 8, run the two launches). tap: the new h rows
// also go to tap [rows, tap_pitch] (a drafter's taps; in the same launch, no copy node in the graph).
Status add_rms_norm(bf16* h, const bf16* delta, int64_t rows, int width, const bf16* weight, float eps, bf16* y,
                    cudaStream_t stream, bf16* tap = nullptr, int64_t tap_pitch = 0);

// Per-head q/k RMSNorm then NeoX RoPE in one launch (rms_norm + rope_neox's bits): q = rope(norm(q_raw)) [rows,
// q_heads*hd], k = rope(norm(k_raw)) [rows, k_heads*hd], all dense bf16. A warp per head for head_dim 64 / 128 / 256;
// other head sizes run the four unfused launches.
struct QkNormRope {
  const bf16* q_raw = nullptr;
  const bf16* k_raw = nullptr;
  const bf16* q_weight = nullptr;  // [hd]
  const bf16* k_weight = nullptr;  // [hd]
  bf16* q = nullptr;
  bf16* k = nullptr;
  int64_t rows = 0;
  int q_heads = 0;
  int k_heads = 0;
  int head_dim = 0;
  float eps = 0;
  const int64_t* positions = nullptr;  // [rows]
  const float* inv_freq = nullptr;     // [hd / 2]
};
Status qk_norm_rope(const QkNormRope& args, cudaStream_t stream);

// out [rows, width] = round(round(silu(gate)) * up); gate/up rows start every in_stride elements (may be the two
// halves of one [rows, 2*width] buffer: up = gate + width, in_stride = 2*width). out rows are dense.
Status swiglu(const bf16* gate, const bf16* up, int64_t rows, int width, int64_t in_stride, bf16* out,
              cudaStream_t stream);
// swiglu's kernel (session 12): Table (the default since batch s12A: 8 outputs a thread, 16-byte loads and stores,
// silu looked up in a table of every bf16 gate's silu, computed once per device by the same arithmetic; filled on
// the first call outside a capture, Vector until then; where width, in_stride and the pointers allow), Rows (an
// output a thread: every other shape), Vector (Table's kernel computing silu). Tests pick one to compare them; the
// same bits always; TablePlantedOneOff (tests only): the table's entry for g = 1.0 one bf16 ulp off.
enum class SwigluKernel : int { Rows = 0, Vector = 1, Table = 2, TablePlantedOneOff = 3 };
void set_swiglu_kernel(SwigluKernel kernel);
SwigluKernel swiglu_kernel_mode();

// out [n, hidden] = table [vocab, hidden] rows tokens[i]; an id outside [0, vocab) writes a NaN row.
Status embed_rows(const bf16* table, int64_t vocab, int hidden, const int32_t* tokens, int64_t n, bf16* out,
                  cudaStream_t stream);

// NeoX RoPE in place on x [rows, heads, head_dim] (row r at x + r * row_stride), positions [rows], inv_freq
// [head_dim / 2] fp32 (the CPU RopeTable values); cos/sin rounded to bf16 and each product rounded as the CPU does.
Status rope_neox(bf16* x, int64_t rows, int heads, int head_dim, int64_t row_stride, const int64_t* positions,
                 const float* inv_freq, cudaStream_t stream);

// Sigmoid top-k routing as CPU route_experts in Bf16 mode: router_logits [rows, experts] bf16, expert_bias
// [experts] fp32 or null; chosen [rows, k] (descending biased score, ties to the lower id), weights [rows, k] fp32
// (bf16-exact values). experts <= 1024.
Status route_experts(const bf16* router_logits, int64_t rows, int experts, int k, bool normalize, float scaling,
                     const float* expert_bias, int32_t* chosen, float* weights, cudaStream_t stream);

// out [rows, width] = round(sum over slots in slot order of slots [rows, k, width]) (fp32 sum).
Status sum_slots(const bf16* slots, int64_t rows, int k, int64_t width, bf16* out, cudaStream_t stream);

// Conversions: out [n] fp32 = exact values of in [n] bf16, and out [n] bf16 = round-to-nearest-even of in [n].
Status bf16_to_f32(const bf16* in, int64_t n, float* out, cudaStream_t stream);
Status f32_to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t stream);

// One row's draw (compute::draw_token's Sampling plus the absolute position); temperature <= 0 means greedy.
struct RowDraw {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int64_t position = 0;
};

// Device scratch for draw_rows, sized for up to `rows` x `vocab` (grows on demand; call outside graph capture): the
// split draw's per-row tickets (zeroed here, left at zero by every draw) and its chunk partials. One stream at a time.
class DrawScratch {
 public:
  Status reserve(int64_t rows, int vocab);
  void* data() const { return buffer_.data(); }
  size_t bytes() const { return buffer_.bytes(); }
  int64_t rows() const { return rows_; }
  // The bytes the tickets of `rows` rows take (the partials follow them).
  static size_t ticket_bytes(int64_t rows);
  static size_t bytes_needed(int64_t rows, int vocab);

 private:
  DeviceBuffer<unsigned char> buffer_;
  int64_t rows_ = 0;
};

// The draw's kernel (each draws draw_token's tokens): Legacy (sessions 1-7, one CTA a row, one-by-one sums), Bounded
// (session 8, one CTA a row, the radix walk with bounded tree sums), Split (session 10, the default since batch
// s10B: a row spread over CTAs of 4096 ids, the verified draw; a launch whose scratch does not hold its rows takes
// Bounded). LS_SAMPLER ("legacy", "bounded", "split") sets it for a process; the planted faults (tests only) only
// through set_sampler_kernel. Drop captured graphs after a change.
enum class SamplerKernel : int {
  Legacy = 0,
  Bounded = 1,
  BoundedBandPlantedZero = 2,  // the bound band zero: tree sums decide near ties alone
  BoundedCutPlantedLate = 3,   // the top-p cut one candidate late
  Split = 4,
  SplitBandPlantedZero = 5,    // the verified check's band zero: float sums decide near ties alone
};
void set_sampler_kernel(SamplerKernel kernel);
SamplerKernel sampler_kernel();
// LS_SAMPLER's reading of `value`: "legacy", "bounded", "split"; anything else (null, a planted name) the default.
SamplerKernel sampler_kernel_named(const char* value);

// out_tokens [rows] = compute::draw_token(logits row, draws[row]) for logits [rows, vocab] fp32; draws [rows] is
// a DEVICE array. Greedy rows: argmax, ties to the lower id, NaN never wins. scratch must be reserved for (rows,
// vocab).
Status draw_rows(const float* logits, int64_t rows, int vocab, const RowDraw* draws, int32_t* out_tokens,
                 const DrawScratch& scratch, cudaStream_t stream);

}  // namespace ls::cuda
