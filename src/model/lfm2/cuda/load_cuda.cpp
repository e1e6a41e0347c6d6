// load_cuda_target: refuses fp32 and missing devices by name, reads the bf16 weights, uploads them, probes exact width.
#include "model/lfm2/cuda/load_cuda.h"

#include "compute/cuda/cuda_util.h"
#include "model/exact_width.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/weights.h"

namespace ls::lfm2 {

Result<std::unique_ptr<Target>> load_cuda_target(io::ModelConfig config, std::unique_ptr<io::Checkpoint> checkpoint,
                                                 const LoadOptions& options) {
  LS_RETURN_IF_ERROR(cuda::require_device());
  if (options.mode != compute::NumericMode::Bf16)
    return Status(ErrorCode::InvalidArgument, "the CUDA target runs bf16 only; --mode fp32 is CPU-only");
  LS_ASSIGN_OR_RETURN(Weights weights, load_weights(std::move(checkpoint), config, compute::NumericMode::Bf16));
  LS_ASSIGN_OR_RETURN(std::unique_ptr<CudaTarget> target, CudaTarget::create(std::move(config), weights, options));
  if (options.exact_width_probe > 0) {
    LS_ASSIGN_OR_RETURN(int width, measure_exact_width(*target, options.exact_width_probe));
    target->set_exact_width(width);
  }
  return std::unique_ptr<Target>(std::move(target));
}

}  // namespace ls::lfm2
