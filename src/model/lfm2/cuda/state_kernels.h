// The CUDA target's stateful kernels: paged KV writes, attention over ragged windows, ShortConv with kept inputs,
// conv-state commit, and the MoE expert plan / grouped expert GEMM. Plain C++ header; every call launches async.
//
// Batch invariance: each kernel computes a row with arithmetic that depends only on that row's inputs and its
// stream's state (attention walks keys by absolute position: fixed blocks inside fixed chunks, chunk states folded
// in chunk order whether one CTA walks them all or each chunk has its own CTA).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/bf16.h"
#include "base/status.h"
#include "compute/cuda/kernels.h"

namespace ls::lfm2::gpu {

// One window of a forward, as the kernels see it (device array [windows]).
struct WindowInfo {
  int32_t first_row = 0;   // the window's row 0 inside the forward
  int32_t rows = 0;
  int64_t committed = 0;   // absolute position of row 0
  int32_t slot = 0;        // conv-state slot of the stream
  int32_t page_begin = 0;  // offset of the stream's page list inside the forward's page list
};

// Where the paged KV cache of one attention layer lives: keys/values [pages, page_size, kv_width] bf16.
struct KvLayer {
  bf16* keys = nullptr;
  bf16* values = nullptr;
};

struct KvShape {
  int page_size = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // <= 128
  float scale = 0;
};

// Writes the rows' k, v [rows, kv_width] into their streams' pages at their positions.
Status write_kv(const bf16* k, const bf16* v, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                const int32_t* pages, const KvShape& shape, KvLayer layer, cudaStream_t stream);

// q/k norm + RoPE with the KV write in the same launch (step10): q to args.q (cuda::qk_norm_rope's bits), each
// row's normed k heads and its v row (v [rows, kv_width]) straight into the stream's pages at write_kv's places;
// args.k is not written. head_dim 64 / 128 / 256 (qk_norm_rope's lane-local RoPE), else the two launches.
// fault_next_slot_for_test: a planted fault, keys one slot late. The target's attention layers run it (since H200
// batch s10A: the 1.2B decode step 17 us faster than qk_norm_rope then write_kv).
Status qk_norm_rope_kv(const cuda::QkNormRope& args, const bf16* v, const int32_t* row_window,
                       const WindowInfo* windows, const int32_t* pages, const KvShape& shape, KvLayer layer,
                       cudaStream_t stream, bool fault_next_slot_for_test = false);

// out [rows, heads*hd] = causal GQA attention of q [rows, heads*hd] over each row's stream keys 0 .. its position
// (CPU Bf16 rounding: dot, scaled score and p rounded to bf16; fp32 softmax and accumulation).
// Launches the kernel chosen by set_attention_kernel: Tiles by default, Rows for shapes the tiles do not take.
// Scratch for split attention (the tile kernel's per-chunk states), allocated at load; none = never split.
struct AttentionScratch {
  float* states = nullptr;
  int64_t floats = 0;
};
Status attention(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                 const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream,
                 const AttentionScratch& scratch = {});

// Keys per chunk of the tile kernel (absolute positions [128 c, 128 c + 128)): every row's softmax state is built
// per chunk and the chunk states are folded in chunk order (M = max; L = L a + l b; O = O a + o b with
// a = exp(M_old - M), b = exp(m - M); out = O / L), by the walking CTA or by the combine after a split launch.
constexpr int kAttentionChunkKeys = 128;
// Benches: the splits attention() asks of the tile kernel (0 = automatic, 1 = never split; the same bits).
void set_attention_splits_for_bench(int splits);
// Floats of scratch that let forwards of up to `rows` rows split keys into up to `chunks` chunks.
int64_t attention_scratch_floats(const KvShape& shape, int64_t rows, int64_t chunks);

// The attention kernels. Rows: one CTA per (row, head), scalar fp32, three passes with the CPU's roundings (dot,
// scaled score, p = exp / total rounded to bf16). Tiles: tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate), a
// CTA per (tile of rows, KV head) serving the GQA group's heads, each key block (64 keys; 32 at head_dim 128) staged
// once; online softmax over blocks 0, 1, .. by absolute position for every row (score rounded like the CPU;
// p = exp(s - running max) rounded to bf16; per block O = O * alpha + P V; out = O / sum of p). A block that is
// fully masked for a row leaves its state bit-identical, so a row's bits never depend on its tile.
enum class AttentionKernel { Rows, Tiles };
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();
// The tile kernel launched programmatically, each CTA's first two key blocks staged (their keys of earlier forwards)
// before the wait for the kernel before (the same bits), for forwards of up to 256 rows: the only launch there since
// H200 batch s10final. Tests only: false runs the plain instance (the prefill's) at every row count, as its reference.
void set_attention_tiles_early(bool on);
bool attention_tiles_early();
// Whether the tile kernel takes this shape (head_dim 16/32/64/128, at most 64 query heads per KV head).
bool attention_tiles_supported(const KvShape& shape);

// Launch knobs of the tile kernel for tests and benches: rows per CTA (0 = automatic), CTAs per (row tile, KV head)
// along the chunks (0 = automatic from the rows and the scratch, 1 = never split; windows of one chunk or of more
// chunks than the scratch holds are never split), and planted faults the invariance tests must catch: the first two
// key blocks walked in swapped order by CTAs of more than one row; chunk edges one key block early in CTAs that
// walk every chunk (the unsplit path).
struct AttentionTiling {
  int tile_rows = 0;
  bool fault_swap_first_blocks = false;
  int splits = 0;
  bool fault_early_chunk_edges = false;
};
Status attention_rows(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                      const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream);
Status attention_tiles(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                       const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream,
                       const AttentionTiling& tiling = {}, const AttentionScratch& scratch = {});

// ShortConv of every window: bcx [rows, 3D] (B | C | X). history [slots, conv_layers, K-1, D] bf16 (layer
// `conv_slot`), conv_weight [D, K] fp32, conv_bias [D] fp32 or null. Writes z [rows, D] (the gated inputs, kept for
// commit) and y [rows, D] = C * conv(z).
struct ConvArgs {
  const bf16* bcx = nullptr;
  int64_t rows = 0;
  int width = 0;
  int kernel = 0;
  int conv_layers = 0;
  int conv_slot = 0;
  const bf16* history = nullptr;
  const float* conv_weight = nullptr;
  const float* conv_bias = nullptr;
  bool fault_reversed_taps_for_test = false;  // planted fault (the early kernel only): the taps' weights reversed
};
Status short_conv(const ConvArgs& args, const int32_t* row_window, const WindowInfo* windows, bf16* z, bf16* y,
                  cudaStream_t stream);
// short_conv launched programmatically with the window records, conv weights, bias and history taps loaded before
// its wait (the same bits; kernel 2..4): the only launch since H200 batch s10final. Tests only: false runs the plain
// kernel (the one other kernel sizes take) as its reference.
void set_short_conv_early(bool on);
bool short_conv_early();

// One kept window: the conv history of `slot` becomes the last K-1 of [history, z rows first_row .. +kept-1].
struct ConvCommit {
  int32_t slot = 0;
  int32_t first_row = 0;
  int32_t kept = 0;
};
// z [conv_layers, z_rows, D] bf16 (the forward's kept inputs, layer-major with z_rows rows per layer).
Status commit_conv(const ConvCommit* commits, int count, const bf16* z, int64_t z_rows, int width, int kernel,
                   int conv_layers, bf16* history, cudaStream_t stream);

// dst [n, width] = src rows index[i] (bf16).
Status gather_rows(const bf16* src, const int32_t* index, int64_t n, int width, int index_divisor, bf16* dst,
                   cudaStream_t stream);

// The expert plan of `slot_count` = rows * k choices: offsets [experts + 1] and order [slot_count] (slot indices
// grouped by expert, ascending slot index within an expert).
Status plan_experts(const int32_t* chosen, int64_t slot_count, int experts, int32_t* offsets, int32_t* order,
                    cudaStream_t stream);

// Grouped expert GEMM: for each expert e, y [p, N] = x [p, K] @ W_e^T for the planned rows p in
// [offsets[e], offsets[e+1]) (offsets read on the device: no host sync); W [experts, N, K] bf16; y rounded to bf16
// once. max_rows_per_expert bounds the launch (rows of the forward). Each output's sum order is fixed whatever the
// rows, so a row gets the same bits in a 1-row decode, a verify window and a prefill:
// - tensor-core kernels (Rows16, Rows16Narrow, Rows64, Rows128): one fp32 accumulator fed with mma.sync m16n8k16
//   steps over K in ascending order (64-wide K tiles, tail zero-filled), the same chain in every tile shape;
// - scalar kernel: lane l sums k = 256c + 8l + j in order, then a fixed butterfly.
// K must be a multiple of 8 (InvalidArgument otherwise).
Status expert_gemm(const bf16* x, const int32_t* offsets, int experts, int64_t max_rows_per_expert, const bf16* w,
                   int64_t n, int64_t k, bf16* y, cudaStream_t stream);

// The routed experts of a MoE layer after the plan: out [slots, D] (grouped by expert, as expert_gemm's y) =
// swiglu(x[order[p] / top_k] @ Wgu_e^T) @ Wd_e^T. Few rows: the streamed kernels, gate|up with the gather in its row
// loads and SwiGLU in registers (act [slots, I]), then down, launched programmatically with its weight tiles staged
// before it waits for gate|up; otherwise gather_rows, expert_gemm, cuda::swiglu, expert_gemm (through `gathered`
// [slots, D] and `gate_up` [slots, 2I]). Every path gives the same bits (ExpertFfnPath).
struct ExpertFfn {
  const bf16* x = nullptr;  // [rows, D] the layer's normed rows
  int64_t rows = 0;
  int top_k = 0;
  const int32_t* offsets = nullptr;  // the plan: [experts + 1]
  const int32_t* order = nullptr;    // [rows * top_k]
  int experts = 0;
  const bf16* w_gate_up = nullptr;   // [experts, 2I, D]
  const bf16* w_down = nullptr;      // [experts, D, I]
  int64_t hidden = 0, inter = 0;     // D, I
  bf16* gathered = nullptr;          // [slots, D] scratch of the four-launch path
  bf16* gate_up = nullptr;           // [slots, 2I] scratch of the four-launch path
  bf16* act = nullptr;               // [slots, I]
  bf16* out = nullptr;               // [slots, D]
  // Optional, the combine in the streamed down launch (expert_ffn_combines): y [rows, D] = combine_experts(out, ...)
  // written by the last warp done with each 16-column group; tickets [expert_combine_tickets(D)] zero before (as
  // allocated zeroed) and left zero after.
  const float* weights = nullptr;    // [rows * top_k] route weights in slot order
  bf16* y = nullptr;                 // [rows, D]
  int32_t* tickets = nullptr;
};
Status expert_ffn(const ExpertFfn& ffn, cudaStream_t stream);
// Whether expert_ffn writes ffn.y itself (y, weights and tickets set on Streamed, at most 1024 slots; or y and
// weights set on StreamedLeanCombine where its combine fits); otherwise the caller combines.
bool expert_ffn_combines(const ExpertFfn& ffn);
// Ticket counters the combine in the down launch needs for hidden size D.
int64_t expert_combine_tickets(int64_t hidden);

// How expert_ffn runs its experts (every path gives the same bits). Automatic: StreamedLeanCombine up to 32 rows
// where both GEMMs would be on the tensor-core kernels (K >= 256; since moe7, was Streamed), four launches otherwise
// (gather, gate|up expert_gemm, SwiGLU, down expert_gemm). Streamed: the decode expert kernels (expert_stream.cu:
// each warp streams one (expert row chunk of 8, column group) item through its own cp.async pipeline, down items of
// 16 columns); StreamedLean: Streamed's items with the per-tile address arithmetic out of the K loop
// (expert_lean.cu); StreamedLeanCombine: lean, and where one row chunk a warp covers the forward (1 row at top-4)
// one down CTA per column group that also combines into y (weights and y set; no tickets). The others are pins for
// tests and benches (any row count).
enum class ExpertFfnPath { Automatic, FourLaunches, Streamed, StreamedLean, StreamedLeanCombine };
// What expert_ffn runs for this many rows (the pin, else the automatic pick; a tensor-core pick for both K assumed).
ExpertFfnPath chosen_expert_ffn_path(int64_t rows);
const char* expert_ffn_path_name(ExpertFfnPath path);
// Process-wide pin (Automatic = none); tests and benches only.
void pin_expert_ffn_path_for_test(ExpertFfnPath path);

// The expert GEMM kernels. Automatic picks by the forward's rows; the others are pins for tests and benches.
enum class ExpertKernel { Automatic, Scalar, Rows16, Rows64, Rows128, Rows16Narrow };
// What expert_gemm runs for this launch (the pin, else the automatic pick).
ExpertKernel chosen_expert_kernel(int64_t max_rows_per_expert, int experts);
const char* expert_kernel_name(ExpertKernel kernel);
// Process-wide pin (Automatic = none); tests and benches only.
void pin_expert_kernel_for_test(ExpertKernel kernel);
// Test-only fault: the tensor-core kernels walk K tiles backwards when the launch allows more than one row per expert.
void set_expert_fault_for_test(bool on);

// Routing (cuda::route_experts' bits: chosen [rows, k], weights [rows, k]) and the plan of its rows * k choices
// (plan_experts' offsets and order) in one launch of one CTA, launched programmatically; 1..64 rows, 1..256 experts.
// With x set, the router GEMM runs first in the same launch (the GemmEngine's bits; hidden <= 2048).
struct RoutePlan {
  bf16* logits = nullptr;        // [rows, experts] bf16: the router GEMM's output, or written here first (x set)
  const bf16* x = nullptr;       // [rows, hidden] or null: the normed rows the router reads
  const bf16* router = nullptr;  // [experts, hidden] under x
  const float* router_bias = nullptr;  // [experts] or null
  int64_t hidden = 0;
  int64_t rows = 0;
  int experts = 0, k = 0;
  bool normalize = false;
  float scaling = 1.0f;
  const float* expert_bias = nullptr;  // [experts] or null
  int32_t* chosen = nullptr;           // [rows, k]
  float* weights = nullptr;            // [rows, k]
  int32_t* offsets = nullptr;          // [experts + 1]
  int32_t* order = nullptr;            // [rows * k]
  bool preload_router = false;         // set by route_and_plan: the whole router staged before the wait (same bits)
  // Optional, the lean kernel only (route_norm_fits): the residual add + RMSNorm that makes x, first in the launch
  // with cuda::add_rms_norm's bits: norm_h [rows, hidden] becomes round(norm_h + norm_delta) in place and x =
  // RMSNorm(norm_h) * norm_weight is written to norm_out (set x = norm_out) and read by the router from shared memory.
  bf16* norm_h = nullptr;
  const bf16* norm_delta = nullptr;
  const bf16* norm_weight = nullptr;
  float norm_eps = 0.0f;
  bf16* norm_out = nullptr;
  bool norm_fault_for_test = false;  // planted fault: x = round(weight * h * inverse_rms) with one rounding, not two
};
bool route_and_plan_fits(int64_t rows, int experts, int k);
bool router_in_route_fits(int64_t hidden);
// Whether the router in route_and_plan can be staged whole in shared memory before its programmatic wait (up to 16
// rows; router and x rows within the launch's 192 KB); and the switch for it (on by default since H200 batch s6A: the
// 8B decode step 1.778 ms preloaded vs 1.840 ms streamed; off selects session 5's streamed router).
bool router_preload_fits(int64_t rows, int experts, int64_t hidden);
void set_moe_router_preload(bool on);
bool moe_router_preload();
Status route_and_plan(const RoutePlan& plan, cudaStream_t stream);
// The lean route + plan (expert_route.cu; the same outputs and bits): the preloaded router, then the logits, choices
// and weights kept in shared memory, each row's top k by one warp in one pass (each expert's rank), the plan by one
// warp without block syncs; x set, 1..16 rows, 1..256 experts, within the block's shared memory.
// set_moe_route_lean (on by default since batch s8A; off selects the old kernel) makes route_and_plan run it where
// it fits.
bool route_lean_fits(int64_t rows, int experts, int k, int64_t hidden);
Status route_and_plan_lean(const RoutePlan& plan, cudaStream_t stream);
void set_moe_route_lean(bool on);
bool moe_route_lean();
// The lean kernel's shared-memory opt-in (once; also done by route_lean_fits).
void route_lean_setup();
// The MoE layer's residual add + ffn RMSNorm inside the lean route + plan (RoutePlan::norm_*), one launch and one
// boundary fewer a MoE layer; the same bits. Where it fits: the lean kernel's rows, experts and k, hidden a multiple
// of 8 within the block's shared memory with the norm weight, every norm pointer 16-byte aligned. The target uses it
// wherever it fits (since H200 batch s10A: ~2 us a MoE layer faster than the norm launch).
bool route_norm_fits(const RoutePlan& plan);
// route_and_plan's shared-memory opt-in for the router in the launch (once, before any capture).
void route_plan_setup();

// y [rows, width] = scatter_weighted then cuda::sum_slots of the experts' out [slots, width] (plan order), in one
// launch (the same bits); at most 1024 slots.
bool combine_experts_fits(int64_t rows, int k);
Status combine_experts(const bf16* out, const int32_t* offsets, int experts, const int32_t* order,
                       const float* weights, int64_t rows, int k, int width, bf16* y, cudaStream_t stream);

// How the target's MoE layers route and combine (the same bits at every level), a switch for tests and benches:
// 0: router GEMM, route_experts, plan_experts, scatter_weighted, sum_slots; 1: router GEMM, route_and_plan,
// combine_experts where they fit; 2 (default): also the router GEMM inside route_and_plan where it fits (H200 batch A,
// 8B decode step: 2.434 ms at 2 vs 2.509 at 1 and 2.530 at 0, two-launch experts); 3: also the combine inside the
// streamed down launch where expert_ffn_combines.
void set_moe_fused_launches(int level);
int moe_fused_launches();

// slots [order[p]] = round(out [p] * weights [order[p]]) for p < slot_count (rows of width D).
Status scatter_weighted(const bf16* out, const int32_t* order, const float* weights, int64_t slot_count, int width,
                        bf16* slots, cudaStream_t stream);

}  // namespace ls::lfm2::gpu
