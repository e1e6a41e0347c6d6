// load_target: config first, then the checkpoint's header check, then weights into an Lfm2Target.
#include "model/load.h"

#include "compute/cpu/matmul_amx.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/exact_width.h"
#include "model/lfm2/lfm2_target.h"
#ifdef LS_HAVE_CUDA
#include "model/lfm2/cuda/load_cuda.h"
#endif

namespace ls {

Result<std::unique_ptr<Target>> load_target(const std::string& directory, const LoadOptions& options) {
  if (options.threads < 1 || options.max_rows < 1)
    return Status(ErrorCode::InvalidArgument, "threads and max_rows must be >= 1, got " +
                                                  std::to_string(options.threads) + " and " +
                                                  std::to_string(options.max_rows));
  // LS_CPU_AMX=1 where this CPU cannot run the AMX path: refused before any file is read.
  if (options.device == Device::Cpu) LS_RETURN_IF_ERROR(compute::cpu_amx_refusal());
  LS_ASSIGN_OR_RETURN(io::ModelConfig config, io::read_model_config(directory));
  LS_ASSIGN_OR_RETURN(std::unique_ptr<io::Checkpoint> checkpoint, io::Checkpoint::open(directory));
  LS_RETURN_IF_ERROR(io::check_target_tensors(*checkpoint, config));
  if (options.device == Device::Cuda) {
#ifdef LS_HAVE_CUDA
    return lfm2::load_cuda_target(std::move(config), std::move(checkpoint), options);
#else
    return Status(ErrorCode::DeviceUnavailable, "this build has no CUDA backend (nvcc was not found at configure time)");
#endif
  }
  LS_ASSIGN_OR_RETURN(lfm2::Weights weights, lfm2::load_weights(std::move(checkpoint), config, options.mode));
  auto model = std::make_unique<lfm2::Model>(std::move(config), std::move(weights), options.threads);
  auto target = std::make_unique<lfm2::Lfm2Target>(std::move(model), options.max_rows);
  if (options.exact_width_probe > 0) {
    LS_ASSIGN_OR_RETURN(int width, measure_exact_width(*target, options.exact_width_probe));
    target->set_exact_width(width);
  }
  return std::unique_ptr<Target>(std::move(target));
}

}  // namespace ls
