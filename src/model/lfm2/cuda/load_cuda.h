// The CUDA target's loader (built only with LS_HAVE_CUDA); load_target() calls it for Device::Cuda.
#pragma once

#include <memory>

#include "base/status.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/load.h"
#include "model/target.h"

namespace ls::lfm2 {

// Uploads the checkpoint's weights to the current CUDA device and returns a Target running there. Every failure
// frees what it took on the device. Refuses DeviceUnavailable when no device is present.
Result<std::unique_ptr<Target>> load_cuda_target(io::ModelConfig config, std::unique_ptr<io::Checkpoint> checkpoint,
                                                 const LoadOptions& options);

}  // namespace ls::lfm2
