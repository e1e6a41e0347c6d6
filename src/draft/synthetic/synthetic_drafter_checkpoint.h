// Random-weight DSpark drafters shaped like LiquidAI's LFM2.5 drafters, for a given target config (synth, benchmarks).
#pragma once

#include <string>

#include "base/status.h"
#include "io/model_config.h"
#include "io/synthetic_checkpoint.h"

namespace ls::dspark {

// LiquidAI's LFM2.5 DSpark layout (5 Qwen3 layers, head_dim 64, FFN 3x hidden, 9 drafts, Markov rank 256,
// confidence head); the fields a caller may shrink for small test checkpoints.
struct SyntheticDrafterShape {
  int num_layers = 5;
  int block_size = 9;
  int markov_rank = 256;
};

// The target layers a drafter taps: LiquidAI's published ids for 16, 24 and 30-layer targets, otherwise up to 5
// ids spread evenly over [0, layers - 2]. InvalidArgument below 2 layers.
Result<std::vector<int>> drafter_taps_for(int target_layers);

// config.json text of a drafter for `target`: its vocab, hidden size and rope_theta; taps from drafter_taps_for.
// InvalidArgument when the hidden size is not a multiple of 64 or the shape is out of range.
Result<std::string> drafter_config_json(const io::ModelConfig& target, const SyntheticDrafterShape& shape);

// Writes `<directory>/config.json` and `model.safetensors` (every manifest tensor, values as synth's) of a drafter
// for the target whose config.json text is `target_config_json`.
Result<io::SyntheticSummary> write_synthetic_drafter(const std::string& directory,
                                                     const std::string& target_config_json,
                                                     const SyntheticDrafterShape& shape,
                                                     const io::SyntheticOptions& options);

}  // namespace ls::dspark
