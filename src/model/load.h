// Opens a model directory (config.json + safetensors) as a Target, refusing by name before reading weights.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "compute/ops.h"
#include "model/target.h"

namespace ls {

// Where a model runs: the CPU kernels, or the CUDA backend (refused by name, DeviceUnavailable, without one).
enum class Device { Cpu, Cuda };

struct LoadOptions {
  Device device = Device::Cpu;
  compute::NumericMode mode = compute::NumericMode::Bf16;
  int threads = 1;
  int max_rows = 8192;             // most rows one forward accepts (a whole prompt is one window)
  int exact_width_probe = 16;      // measure facts().exact_width up to this width at load (0: skip, width 1)
  // CUDA target only: the paged KV pool (pages of kv_page_size positions shared by all streams; 0 = enough for
  // max_streams streams of 4096 positions, capped at a quarter of free device memory) and the conv-state slots.
  int kv_page_size = 32;
  int kv_pages = 0;
  int max_streams = 256;
};

// config.json (UnsupportedArchitecture / BadModelConfig), tensor names and shapes (BadSafetensors), then weights.
Result<std::unique_ptr<Target>> load_target(const std::string& directory, const LoadOptions& options);

}  // namespace ls
