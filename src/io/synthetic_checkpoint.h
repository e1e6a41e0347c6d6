// Random-weight checkpoints of a given config.json: HF tensor names, sharded safetensors, streamed to disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace ls::io {

struct SyntheticOptions {
  uint64_t seed = 0;
  DType dtype = DType::BF16;                     // every tensor except expert_bias (always F32, as HF saves it)
  size_t max_shard_bytes = size_t{2} << 30;      // a shard closes before it would pass this (2 GiB)
};

struct SyntheticSummary {
  size_t tensors = 0;
  size_t total_bytes = 0;  // tensor data, as the index's metadata.total_size
  int shards = 0;
};

// Writes `<directory>/config.json` (the given text, which must parse as an lfm2/lfm2_moe config) and the tensors it
// implies as model-0000i-of-0000n.safetensors + model.safetensors.index.json. Values are a pure function of
// (seed, tensor name, element index): matrices uniform with std 0.02, norm weights 1 +- 0.1, conv kernels +-0.5,
// expert_bias +-0.02. Memory stays at one chunk whatever the model size.
Result<SyntheticSummary> write_synthetic_checkpoint(const std::string& directory, const std::string& config_json,
                                                    const SyntheticOptions& options);

// Writes `tensors` (name, shape, role) as one safetensors file at `path`, values and dtypes drawn as above
// (a drafter checkpoint, say; max_shard_bytes is ignored).
Result<SyntheticSummary> write_synthetic_safetensors(const std::string& path, std::span<const ExpectedTensor> tensors,
                                                     const SyntheticOptions& options);

}  // namespace ls::io
