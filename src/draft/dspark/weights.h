// The DSpark drafter's weights: the manifest checked before reading, bf16 as stored (bits 0) or int8 rows (bits 8).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "compute/cpu/draft_ops.h"
#include "compute/ops.h"
#include "draft/dspark/config.h"
#include "draft/dspark/init_steps.h"
#include "io/safetensors.h"

namespace ls::dspark {

// A dense matrix [rows, cols] (out x in): as stored (bf16; fp32 for F32/F16 checkpoints) or int8 per output row.
struct DraftMatrix {
  compute::OwnedMatrix dense;  // bits 0
  std::vector<int8_t> codes;   // bits 8 without AVX-512 VNNI: [rows, cols]
  std::vector<int8_t> panels;  // bits 8 with AVX-512 VNNI, instead of codes: as compute::pack_int8_panels lays them out
  std::vector<float> scales;   // bits 8: [rows]
  std::vector<int32_t> code_sums;  // bits 8: [rows] each row's codes summed (the w8a8 kernel's offset term)
  int64_t rows = 0;
  int64_t cols = 0;

  bool quantized() const { return !codes.empty() || !panels.empty(); }
  // bits 8: the code of (row, col), wherever it is held.
  int8_t code(int64_t row, int64_t col) const;
  int64_t bytes() const;
};

// y [rows, w.rows] = x [rows, w.cols] @ W^T with whichever storage W has.
void apply_matrix(const compute::OpContext& ctx, const float* x, int64_t rows, const DraftMatrix& w, float* y);

struct DraftLayerWeights {
  std::vector<float> input_norm;  // [d]
  DraftMatrix q_proj;             // [heads * hd, d]
  DraftMatrix k_proj;             // [kv_heads * hd, d]
  DraftMatrix v_proj;             // [kv_heads * hd, d]
  DraftMatrix o_proj;             // [d, heads * hd]
  std::vector<float> q_norm;      // [hd]
  std::vector<float> k_norm;      // [hd]
  std::vector<float> post_norm;   // [d]
  DraftMatrix gate_proj;          // [ffn, d]
  DraftMatrix up_proj;            // [ffn, d]
  DraftMatrix down_proj;          // [d, ffn]
};

struct DsparkWeights {
  DraftMatrix fc;                         // [d, taps * d]
  std::vector<float> hidden_norm;         // [d]
  std::vector<DraftLayerWeights> layers;  // [num_layers]
  std::vector<float> final_norm;          // [d]
  compute::OwnedMatrix markov_w1;         // [V, r] a table gathered by the previous token; never quantized
  DraftMatrix markov_w2;                  // [V, r]
  std::vector<float> confidence_weight;   // [d + r] fp32, empty without a confidence head
  float confidence_bias = 0.0f;
  // The block's head, the target's tied embedding E [V, d]: quantized with bits 8; a bf16 copy in the B-tile layout
  // where the drafter runs on AMX in bf16 mode (compute::drafter_amx); otherwise empty (the target's head runs it).
  DraftMatrix head;

  int64_t bytes() const;
};

// out = the int8 rows of a [rows, cols] matrix whose row r row_values(r, values [cols]) writes: codes (or, on AVX-512
// VNNI, panels), scales and code sums, each allocation counted by `steps` under `name`; rows_read (may be empty) is
// called once every row has been read, before the panels are made.
Status quantize_draft_matrix(int64_t rows, int64_t cols, const std::string& name, DraftMatrix& out, InitSteps& steps,
                             const std::function<void(int64_t row, float* values)>& row_values,
                             const std::function<void()>& rows_read = {});

// Packs every bf16 dense matrix for the CPU kernels, in one huge-page arena in the order a round reads them (fc, then
// each layer's q, k, v, o, gate, up, down, then W2), so a cold pass streams one contiguous run instead of row-major
// rows on small pages: the B-tile layout where the drafter runs on AMX (compute::drafter_amx), else the panels (the
// same bits as unpacked). Returns how many.
int pack_draft_weights(DsparkWeights& weights);

// One expected tensor of the manifest (reference/dspark.md §3.2).
struct ManifestEntry {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<ManifestEntry> draft_manifest(const DsparkConfig& config);

// Before any weight is read: every manifest tensor present with its shape (BadSafetensors naming tensor and
// shapes), a reduced draft vocabulary (d2t / t2d) refused as UnsupportedDraftShape, nothing unexpected
// (embed_tokens / lm_head copies of the target are allowed and skipped).
Status check_draft_tensors(const io::Checkpoint& checkpoint, const DsparkConfig& config);

// Reads the weights, one matrix at a time; bits 8 quantizes each dense matrix right after reading it, so the
// loader's peak is the final size plus the largest matrix (`steps` records both). Every buffer is a counted step.
Result<DsparkWeights> load_draft_weights(const io::Checkpoint& checkpoint, const DsparkConfig& config, int bits,
                                         InitSteps& steps);

}  // namespace ls::dspark
