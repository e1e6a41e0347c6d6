// load_cuda_drafter: the DSpark drafter on the CUDA device (in progress: refuses until the device drafter lands).
#include "draft/dspark/cuda/load_cuda.h"

#include "compute/cuda/cuda_util.h"

namespace ls::dspark {

Result<std::unique_ptr<Drafter>> load_cuda_drafter(const std::string& directory, Target& target,
                                                   const DrafterOptions& options) {
  (void)directory;
  (void)options;
  LS_RETURN_IF_ERROR(cuda::require_device());
  if (target.device_embedding() == nullptr) {
    return Status(ErrorCode::InvalidArgument,
                  "the CUDA drafter needs a target loaded on the CUDA device (this target has no device embedding)");
  }
  return Status(ErrorCode::DeviceError, "CUDA drafter not finished");
}

}  // namespace ls::dspark
