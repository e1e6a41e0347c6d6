// The CUDA DSpark drafter's loader (built only with LS_HAVE_CUDA); load_drafter() calls it for Device::Cuda.
#pragma once

#include <memory>

#include "base/status.h"
#include "draft/drafter.h"
#include "draft/dspark/config.h"
#include "draft/load.h"
#include "model/target.h"

namespace ls::dspark {

// Uploads the admitted drafter's weights to the device the target runs on (target.device_embedding() is shared).
Result<std::unique_ptr<Drafter>> load_cuda_drafter(const std::string& directory, Target& target,
                                                   const DrafterOptions& options);

}  // namespace ls::dspark
