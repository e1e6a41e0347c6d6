// Kernels of the CUDA drafter's batched absorb: K/V rows of many streams scattered into their contexts in one launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/status.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

// Row r of keys [rows, width] goes to key_rows[r] and row r of values [rows, width] to value_rows[r] (device arrays
// of device pointers, one per row: each stream's context row at its position).
Status scatter_context_rows(const bf16_t* keys, const bf16_t* values, int64_t rows, int64_t width,
                            bf16_t* const* key_rows, bf16_t* const* value_rows, cudaStream_t stream);

// The fused absorb's heads: kv [rows, layers, 2, kv_heads, head_dim] is one GEMM of the chunk's C with every
// layer's k_proj and v_proj stacked. Key heads get the per-head RMSNorm with k_norms [layers, head_dim] (rms_norm's
// arithmetic) and RoPE at positions[row] (rope_rotate's), value heads are copied; each goes to its row's context
// row: row_pointers [2 (keys, values), layers, rows] (= rms_norm + rope_rotate + scatter_context_rows per layer).
struct AbsorbHeads {
  const bf16_t* kv = nullptr;
  int64_t rows = 0;
  int layers = 0, kv_heads = 0, head_dim = 0;
  const float* k_norms = nullptr;
  float eps = 0;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  bool neox = false;
  bf16_t* const* row_pointers = nullptr;
  bool batched = false;  // session 8: each lane's loads issued at once (norm_rope_head_batched, the same bits)
};
Status absorb_heads(const AbsorbHeads& args, cudaStream_t stream);

// The most rows an absorb inside the block pass's graph takes (session 19, set_absorb_in_pass).
inline constexpr int kAbsorbPassRows = 16;
// Where each row of such an absorb comes from, uploaded with the pass's inputs: taps [rows on the device, row_values]
// bf16 (16-byte aligned rows) and each chunk row's tap row (-1: a padding row, zeros).
struct AbsorbGather {
  const bf16_t* taps = nullptr;
  int64_t sources[kAbsorbPassRows] = {};
};
// features [rows, row_values] = the gathered tap rows (zeros for padding rows): absorb_device()'s feature copies and
// padding memset as one launch whose sources are read on the device, so a captured graph serves every round.
Status gather_tap_rows(const AbsorbGather* gather, int64_t row_values, int64_t rows, bf16_t* features,
                       cudaStream_t stream);

}  // namespace ls::dspark::cuda
