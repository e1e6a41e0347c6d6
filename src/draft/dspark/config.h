// DSpark drafter config.json admission: parse LiquidAI's field layouts and refuse by name before any weight is read.
//
// Slot convention: only DSpark's anchor-first convention is supported (block [anchor, mask x (block_size-1)],
// every slot yields a draft, so block_size = number of drafts). DFlash-convention exports
// (`speculators_model_type: "dspark"`, `sample_from_anchor: false`, `dspark_bonus_anchor: true`) are refused with
// UnsupportedDraftShape, as SGLang does.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compute/ops.h"
#include "model/load.h"
#include "model/target.h"

namespace ls::dspark {

enum class RopeStyle { Interleaved, NeoX };  // Interleaved pairs (2i, 2i+1); NeoX pairs (i, i + head_dim/2)

// The largest Markov rank the drafter's kernels support (the scan stages one W1 row of this many floats).
inline constexpr int kMaxMarkovRank = 256;

struct DsparkConfig {
  int vocab_size = 0;
  int hidden_size = 0;   // d; must equal the target's hidden size (shared embedding and head)
  int num_layers = 0;    // L_d draft decoder layers
  int num_heads = 0;     // H_q
  int num_kv_heads = 0;  // H_kv
  int head_dim = 0;
  int ffn_size = 0;         // intermediate_size
  float norm_eps = 1e-6f;   // rms_norm_eps (Qwen3 default when absent)
  double rope_theta = 0.0;  // the draft's own theta
  RopeStyle rope_style = RopeStyle::Interleaved;
  int block_size = 0;  // gamma = number of drafts per pass
  int mask_token_id = -1;
  std::vector<int> target_layer_ids;           // taps, in concatenation order
  int num_target_layers = -1;                  // -1 when the config does not say
  int markov_rank = 0;                         // r
  bool has_confidence = false;                 // enable_confidence_head (input [final hidden ; W1[prev]])
  std::vector<float> confidence_temperatures;  // [block_size] STS temperatures, or empty

  int tap_count() const { return static_cast<int>(target_layer_ids.size()); }
  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
};

// Parses config.json text. Refuses UnsupportedDraftActivation, UnsupportedDraftShape, BadDraftConfig by name,
// with the field and its value in the message.
Result<DsparkConfig> parse_dspark_config(const std::string& json_text);
// Reads `<directory>/config.json`.
Result<DsparkConfig> read_dspark_config(const std::string& directory);
// DraftTargetMismatch unless vocab, hidden size, tap ids and num_target_layers fit the target.
Status check_draft_fits_target(const DsparkConfig& config, const TargetFacts& target);
// UnsupportedDraftBits unless bits is 0 (bf16 as stored) or 8 (int8 per output row, quantized at load; on the CUDA
// device int8 copies beside the bf16 weights, taken by the GEMMs of few rows: draft/dspark/cuda/int8_weights.h).
Status check_draft_bits(int bits);
// --drafter-bits -1 (kDraftBitsAuto, the CLI's and lanes_bench's default) made 0 or 8; other values pass through. A
// drafter's bits never reach a reply (the target verifies every draft), so auto picks the faster pass: int8 on a CPU
// drafter in bf16 mode where the w8a8 kernel runs (AVX-512 VNNI), with or without AMX; bf16 as stored on the CUDA
// device, in fp32 mode (the parity reference) and without VNNI (the int8 GEMM would widen codes to fp32 there). On
// the AMD Zen 4 host the nano pair's pass ran 0.60-0.89x of bf16's at 1 / 4 / 16 streams, on the Xeon's two cores
// 0.67-0.98x of the AMX tiles' (cpu18's drafter default), and 1-stream rounds drafting every round 3-11 % faster there;
// acceptance held (docs/cpu.md, cpu19).
inline constexpr int kDraftBitsAuto = -1;
int resolve_draft_bits(int bits, Device device, compute::NumericMode mode);

}  // namespace ls::dspark
