// The op interface every model is written against: row-wise, batch-invariant kernels over fp32 activation rows.
//
// Activations are fp32 arrays in both numeric modes. In Bf16 mode every op rounds its output to bf16 exactly where
// transformers rounds (reference/lfm2.md §2.9), so the stored values are bf16-exact floats; accumulation is fp32.
// Batch invariance: each op computes a row with the same arithmetic in the same order whatever the number of rows,
// the row's place in the batch or the thread count (threads split output columns / independent rows, never a sum).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/bf16.h"
#include "base/thread_pool.h"

namespace ls::compute {

enum class NumericMode { Fp32, Bf16 };

// Where ops run and how they round. `pool` null = the calling thread only.
struct OpContext {
  ThreadPool* pool = nullptr;
  NumericMode mode = NumericMode::Fp32;

  bool rounds_to_bf16() const { return mode == NumericMode::Bf16; }
  // The value as this mode stores an activation: rounded to bf16 in Bf16 mode, unchanged in Fp32 mode.
  float store(float value) const { return rounds_to_bf16() ? round_to_bf16(value) : value; }
};

// How Matrix::packed holds the weights: the AVX-512 kernels' 8-column panels, or the AMX B-tile layout
// (compute/cpu/matmul_amx.h), chosen by pack_for_cpu when it packs the matrix.
enum class PackedLayout : uint8_t { Panels, AmxTiles };

// A weight matrix W [rows, cols] (out features x in features), row-major, either fp32 or bf16; optional bias [rows].
struct Matrix {
  const float* f32 = nullptr;  // [rows, cols] fp32, or
  const bf16* b16 = nullptr;   // [rows, cols] bf16
  const float* bias = nullptr;  // [rows] or null
  int64_t rows = 0;
  int64_t cols = 0;
  // Optional copy of b16 in panels for the AVX-512 kernels (pack_for_cpu): [ceil(rows/8), ceil(cols/32), 8, 32],
  // zero-padded, 64-byte aligned, so that 8 columns stream as one contiguous run. Same values, same bits out.
  // Or, with packed_layout AmxTiles, the B-tile layout (matmul_amx.h), which the AMX kernel reads instead.
  const bf16* packed = nullptr;
  PackedLayout packed_layout = PackedLayout::Panels;
};

// Whether `w` is packed in the AMX B-tile layout (the AMX kernel reads it; the AVX-512 panels do not).
inline bool amx_tiles(const Matrix& w) { return w.packed != nullptr && w.packed_layout == PackedLayout::AmxTiles; }

// Columns per panel and values of K per panel step in Matrix::packed.
constexpr int64_t kPackedColumns = 8;
constexpr int64_t kPackedDepth = 32;

// A weight matrix that owns its storage (one of the two vectors is filled), or borrows bf16 values from a mapped
// checkpoint that outlives it (`mapped_b16`).
struct OwnedMatrix {
  std::vector<float> f32;  // [rows, cols]
  std::vector<bf16> b16;   // [rows, cols]
  const bf16* mapped_b16 = nullptr;  // [rows, cols] borrowed, or null
  std::vector<float> bias;  // [rows] or empty
  int64_t rows = 0;
  int64_t cols = 0;
  std::shared_ptr<const bf16> packed;  // Matrix::packed layout, or null
  PackedLayout packed_layout = PackedLayout::Panels;  // how `packed` is laid out (set with it by pack_for_cpu)

  Matrix view() const {
    const bf16* bf16_values = mapped_b16 ? mapped_b16 : (b16.empty() ? nullptr : b16.data());
    return Matrix{f32.empty() ? nullptr : f32.data(), bf16_values, bias.empty() ? nullptr : bias.data(), rows, cols,
                  packed.get(), packed_layout};
  }
};

// Adds the panel copy (Matrix::packed) of a bf16 matrix when this CPU's AVX-512 kernels read it; returns whether it
// did (false for fp32 matrices and CPUs without AVX-512). matmul() gives the same bits with or without it.
bool pack_for_cpu(OwnedMatrix& matrix);
// Packs every bf16 matrix of `matrices` into one huge-page arena, each panel set right after the previous one in the
// order given (in forward order, a decode step's GEMVs then stream one contiguous run with no partial huge pages
// between matrices); returns how many it packed (0 without AVX-512). Each matrix's `packed` shares the arena.
int pack_for_cpu(std::span<OwnedMatrix* const> matrices);

// Rounds every value to bf16 in Bf16 mode; no-op in Fp32 mode.
void store_activations(const OpContext& ctx, std::span<float> values);

// y [rows, w.rows] = x [rows, w.cols] @ W^T (+ bias); fp32 accumulation in one fixed order over K for every row.
void matmul(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, float* y);

// matmul() of each ws[i] into ys[i] [rows, ws[i].rows] for matrices that share the input x (so K): e.g. q/k/v or
// w1/w3. The same bits as separate calls; few-row calls go to the pool once for the whole group (fewer handoffs, one
// contiguous stream when the matrices were packed side by side). At most 4 matrices.
void matmul_group(const OpContext& ctx, const float* x, int64_t rows, std::span<const Matrix> ws,
                  std::span<float* const> ys);

// best [rows] = for each row, the column of the largest value of matmul()'s output y [rows, w.rows], as a greedy draw
// reads it (NaN never wins, ties go to the lower column, 0 when every value is NaN), without writing y: the head +
// argmax of greedy rows that need no logits. Exactly the argmax of the same call's matmul() output.
void matmul_argmax(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, int32_t* best);

// The name of the GEMM inner kernel chosen at runtime for this CPU ("avx2-fma" or "portable").
const char* matmul_kernel_name();

// y [rows, width] = RMSNorm(x [rows, width]) * weight [width] (transformers' two roundings in Bf16 mode).
void rms_norm(const OpContext& ctx, const float* x, int64_t rows, int64_t width, const float* weight, float eps,
              float* y);

// h [count] = h + delta, rounded as a residual add.
void add_residual(const OpContext& ctx, float* h, const float* delta, int64_t count);

// out [count] = silu(gate) * up, with a rounding after silu and after the product in Bf16 mode.
void swiglu(const OpContext& ctx, const float* gate, const float* up, int64_t count, float* out);

// out [tokens, table.cols] = rows of the embedding table [vocab, hidden] as fp32 (exact for bf16 tables).
void embed_rows(const OpContext& ctx, const Matrix& table, std::span<const int32_t> tokens, float* out);

// RoPE frequencies for one head size: inv_freq [head_dim / 2] exactly as transformers holds them.
struct RopeTable {
  int head_dim = 0;
  std::vector<float> inv_freq;  // [head_dim / 2]
};
// The hard-coded torch-CPU table for (64, 1e6) (reference/lfm2.md §2.5), else 1 / theta^(2i/hd) computed in fp32.
RopeTable make_rope_table(int head_dim, double theta);

// NeoX (half-split) rotation of x [rows, heads, head_dim] in place; row r sits at absolute position positions[r].
void rope_neox(const OpContext& ctx, float* x, int64_t rows, int heads, const int64_t* positions,
               const RopeTable& table);

// GQA attention of one stream's rows over its key/value cache (keys at positions 0 .. first_position + r for row r).
struct AttentionShape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float scale = 0;  // 1 / sqrt(head_dim)
};
// q [rows, heads, hd] (row r at position first_position + r), keys/values [positions, kv_heads, hd] holding at least
// first_position + rows positions; out [rows, heads * hd]. Keys are summed in absolute position order.
void attention(const OpContext& ctx, const float* q, int64_t rows, int64_t first_position, const float* keys,
               const float* values, const AttentionShape& shape, float* out);
// The same over a bf16 cache (Bf16 mode keeps K/V as bf16: lossless, half the memory); same bits as an fp32 cache
// holding the same values.
void attention(const OpContext& ctx, const float* q, int64_t rows, int64_t first_position, const bf16* keys,
               const bf16* values, const AttentionShape& shape, float* out);
// Bidirectional block attention: every row of q [rows, heads, hd] attends over the same keys/values 0 .. key_count-1
// (no causal mask); row r's bits equal attention() of that row alone at first_position key_count - 1.
void attention_block(const OpContext& ctx, const float* q, int64_t rows, int64_t key_count, const float* keys,
                     const float* values, const AttentionShape& shape, float* out);

// The double-gated depthwise causal short conv of one stream's rows.
// bcx [rows, 3*width] = in_proj output (B | C | X); history [kernel-1, width] = the gated inputs z = B*X before row 0
// (oldest first; zeros for a fresh stream); conv_weight [width, kernel], conv_bias [width] or null.
// Writes z [rows, width] (the gated inputs, kept for rollback) and y [rows, width] = C * conv(z).
// `z_before` [rows_before, width] are gated inputs of earlier rows of the same window (rows computed in an earlier
// pass); row r's taps reach back through z_before and then history.
struct ShortConvInput {
  const float* bcx = nullptr;
  int64_t rows = 0;
  int width = 0;
  int kernel = 0;
  const float* history = nullptr;   // [kernel-1, width]
  const float* z_before = nullptr;  // [rows_before, width]
  int64_t rows_before = 0;
  const float* conv_weight = nullptr;  // [width, kernel]
  const float* conv_bias = nullptr;    // [width] or null
};
void short_conv(const OpContext& ctx, const ShortConvInput& input, float* z, float* y);

// Sigmoid top-k routing (lfm2_moe): scores = sigmoid(logits) (stored), chosen = top-k of scores + bias (fp32, ties
// to the lower expert id, slot order = descending biased score), weights = chosen unbiased scores, normalised.
struct RouterOptions {
  int experts = 0;
  int experts_per_token = 0;
  bool normalize = true;          // norm_topk_prob
  float routed_scaling = 1.0f;    // routed_scaling_factor
  const float* expert_bias = nullptr;  // [experts] fp32 or null
};
// router_logits [rows, experts] (already stored); chosen [rows, k] expert ids; weights [rows, k].
void route_experts(const OpContext& ctx, const float* router_logits, int64_t rows, const RouterOptions& options,
                   int32_t* chosen, float* weights);

// out [rows, width] = sum over slots of slots [rows, k, width] in slot order, fp32, one rounding.
void sum_slots(const OpContext& ctx, const float* slots, int64_t rows, int k, int64_t width, float* out);

}  // namespace ls::compute
