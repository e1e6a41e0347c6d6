// Opening a drafter directory next to a loaded target: admission, weights, warm-up; a refusal leaves the target as is.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "compute/ops.h"
#include "draft/drafter.h"
#include "draft/dspark/markov_scan.h"
#include "model/load.h"
#include "model/target.h"

namespace ls {

struct DrafterOptions {
  Device device = Device::Cpu;                             // Cuda needs a target loaded on the CUDA device
  int bits = 0;  // --drafter-bits: 0 = bf16 as stored, 8 = int8 per row, -1 = auto (dspark::resolve_draft_bits)
  compute::NumericMode mode = compute::NumericMode::Bf16;  // Fp32 is the parity reference
  int threads = 1;                                         // worker threads of the drafter's own pool
  int max_streams = 16;                                    // block scratch reserved at load for this many streams
  // Test-only controls (never set by the CLI): planted draft faults, and the init step to fail (-1 = none).
  dspark::PlantedFaults faults;
  int fail_init_step = -1;
};

// Reads `<directory>/config.json` (refusals before any weight), then the weights, then warms up. The target is
// only read (facts, embed, head) and must outlive the drafter. Every failure frees what was taken.
Result<std::unique_ptr<Drafter>> load_drafter(const std::string& directory, Target& target,
                                              const DrafterOptions& options);

}  // namespace ls
