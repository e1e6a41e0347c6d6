// load_cuda_target: uploads LFM2 weights to the device and returns the CUDA target (in progress).
#include "model/lfm2/cuda/load_cuda.h"

#include "compute/cuda/cuda_util.h"

namespace ls::lfm2 {

Result<std::unique_ptr<Target>> load_cuda_target(io::ModelConfig config, std::unique_ptr<io::Checkpoint> checkpoint,
                                                 const LoadOptions& options) {
  (void)config;
  (void)checkpoint;
  (void)options;
  LS_RETURN_IF_ERROR(cuda::require_device());
  return Status(ErrorCode::DeviceError, "CUDA target not finished");
}

}  // namespace ls::lfm2
