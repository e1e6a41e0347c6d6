// The DSpark drafter's forward (reference/dspark.md §2.3-2.7): context projection into the cache, and the block pass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "compute/ops.h"
#include "draft/dspark/config.h"
#include "draft/dspark/context_cache.h"
#include "draft/dspark/weights.h"
#include "model/target.h"

namespace ls::dspark {

// What every forward step reads: config, weights, how ops run and round, the draft's fp32 RoPE table.
struct ForwardContext {
  const DsparkConfig& config;
  const DsparkWeights& weights;
  const compute::OpContext& ops;
  const compute::RopeTable& rope;
};

// Activations of one block pass over `rows` = requests x block_size rows; sized once, reused every pass.
struct BlockScratch {
  int64_t rows = 0;                 // rows the buffers hold
  std::vector<float> hidden;        // [rows, d] residual stream X
  std::vector<float> normed;        // [rows, d]
  std::vector<float> queries;       // [rows, heads * hd]
  std::vector<float> keys;          // [rows, kv_heads * hd]
  std::vector<float> values;        // [rows, kv_heads * hd]
  std::vector<float> attended;      // [rows, heads * hd]
  std::vector<float> projected;     // [rows, d]
  std::vector<float> gate;          // [rows, ffn]
  std::vector<float> up;            // [rows, ffn]
  std::vector<float> final_hidden;  // [rows, d] Hf (post final norm)
  std::vector<float> logits;        // [rows, V] fp32 base logits U
};

// Sizes every buffer for `rows` rows; OutOfMemory names the buffer. `steps` (may be null) counts each allocation.
Status reserve_block_scratch(BlockScratch& scratch, const DsparkConfig& config, int64_t rows, InitSteps* steps);

// Projects taps [rows, taps * d] of positions start .. start+rows-1 into every layer's K/V at those cache rows:
// C = hidden_norm(fc(F)); K = RoPE(k_norm(k_proj C)), V = v_proj C. The cache must have capacity for them.
void project_context(const ForwardContext& f, const float* taps, int64_t rows, int64_t start, StreamContext& context);

// One block pass for `anchors.size()` requests at once. Request i's block [anchor, mask x (w_i-1)] sits at
// positions p_i .. p_i+w_i-1 and attends to its context (exactly positions 0 .. p_i-1, contexts[i]->length == p_i,
// capacity >= p_i + gamma) and its whole block; w_i = widths[i] (1 .. gamma), or gamma when `widths` is empty (the
// trained block). Writes Hf into scratch rows [i*gamma, i*gamma+w_i) and U = head(Hf) into the first
// min(head_slots, w_i) rows of each request (head_slots 1 .. gamma; 0 = all): the other rows of both are NaN (no scan
// reads a slot at or past its depth, so a pass needs the head only up to the deepest request). A single request
// with head_slots < w also gets Hf only for those slots (the last layer skips the rest; NaN there).
Status block_pass(const ForwardContext& f, const Target& target, std::span<StreamContext* const> contexts,
                  std::span<const int32_t> anchors, BlockScratch& s, int head_slots = 0,
                  std::span<const int> widths = {});

// Short blocks (reference/dspark.md §2.6): a pass drafting to depth d runs only w(d) = min(gamma, d + extra) slots,
// so the block layers cost ~w/gamma of the trained width. The block is bidirectional, so the earlier slots' hidden
// states (the drafts) change; replies never do (verification decides). Each request of a pass gets its own width, so
// a stream's drafts do not depend on the streams beside it. Off (the default): every pass runs gamma slots.
// LS_DRAFTER_SHORT_BLOCK = off | depth | depth+N, read at first use; set_short_block overrides it.
struct ShortBlock {
  bool on = false;
  int extra = 0;  // slots past the depth (depth+N), >= 0
};
ShortBlock short_block();
void set_short_block(ShortBlock block);
// The slots a pass of `depth` runs under the current switch: gamma when off, else min(gamma, depth + extra).
int block_width(int depth, int gamma);
// Parses an LS_DRAFTER_SHORT_BLOCK value ("off", "0", "" = off; "depth"; "depth+N"); false for anything else.
bool parse_short_block(const char* text, ShortBlock& block);

// Wall time by op of the block passes and scans run while a profile is set (cpu_bench's pass profile; none by default:
// then each op costs one null check). Summed over calls; `passes` counts block passes, `rows` the block rows they ran.
struct PassProfile {
  double embed = 0, norms = 0, qkv = 0, rope = 0, attention = 0, o_proj = 0, ffn_in = 0, ffn_down = 0, head = 0;
  double scan_w2 = 0, scan_pick = 0;  // the Markov scan: W2 e (+ the base logits' add), then pick and confidence
  int passes = 0;
  int64_t rows = 0;
};
void set_pass_profile(PassProfile* profile);
PassProfile* pass_profile();

}  // namespace ls::dspark
