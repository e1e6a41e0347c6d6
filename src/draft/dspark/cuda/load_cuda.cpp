// load_cuda_drafter: the CPU path's admission and refusals, then the weights uploaded to the target's CUDA device.
#include "draft/dspark/cuda/load_cuda.h"

#include "base/log.h"
#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/dspark/weights.h"
#include "io/safetensors.h"

namespace ls::dspark {
namespace {

// UnsupportedDraftShape for shapes the device kernels do not take (checked before any weight is read).
Status check_device_shape(const DsparkConfig& config) {
  if (config.block_size > cuda::kMaxDeviceBlock) {
    return Status(ErrorCode::UnsupportedDraftShape, "block_size " + std::to_string(config.block_size) +
                                                        " exceeds the CUDA drafter's " +
                                                        std::to_string(cuda::kMaxDeviceBlock) + " slots");
  }
  if (!cuda::device_head_dim_supported(config.head_dim)) {
    return Status(ErrorCode::UnsupportedDraftShape, "head_dim " + std::to_string(config.head_dim) +
                                                        " is not one the CUDA drafter's attention takes (16, 32, 64, "
                                                        "128)");
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Drafter>> load_cuda_drafter(const std::string& directory, Target& target,
                                                   const DrafterOptions& options) {
  // Refusals first, as on the CPU: bits, the config, the config against the target; then what the device needs.
  LS_RETURN_IF_ERROR(check_draft_bits(options.bits));
  if (options.mode != compute::NumericMode::Bf16) {
    return Status(ErrorCode::InvalidArgument, "the CUDA drafter runs in bf16 only (the fp32 reference is the CPU's)");
  }
  LS_ASSIGN_OR_RETURN(DsparkConfig config, read_dspark_config(directory));
  LS_RETURN_IF_ERROR(check_draft_fits_target(config, target.facts()));
  LS_RETURN_IF_ERROR(check_device_shape(config));
  const void* embedding = target.device_embedding();
  if (embedding == nullptr) {
    return Status(ErrorCode::InvalidArgument,
                  "the CUDA drafter needs a target on the CUDA device (this target has no device embedding; load "
                  "the target with --device cuda, or the drafter on the CPU)");
  }
  LS_RETURN_IF_ERROR(ls::cuda::require_device());
  InitSteps steps(options.fail_init_step);
  Result<DsparkWeights> weights = [&]() -> Result<DsparkWeights> {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<io::Checkpoint> checkpoint, io::Checkpoint::open(directory));
    return load_draft_weights(*checkpoint, config, 0, steps);
  }();
  if (!weights.ok()) return weights.status();
  LS_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaDsparkDrafter> drafter,
                      cuda::CudaDsparkDrafter::create(config, *weights, static_cast<const cuda::bf16_t*>(embedding),
                                                      options, steps));
  log_info("drafter: DSpark on CUDA, %d layers, block %d, markov rank %d, bf16 weights%s (%.1f MiB on the device)",
           config.num_layers, config.block_size, config.markov_rank,
           options.bits == 8 ? " + int8 copies for GEMMs of few rows" : "", cuda::drafter_device_bytes() / 1048576.0);
  return std::unique_ptr<Drafter>(std::move(drafter));
}

}  // namespace ls::dspark
