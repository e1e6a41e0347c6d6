// load_drafter: the one DSpark drafter format behind the Drafter interface.
#include "draft/load.h"

#include "draft/dspark/dspark_drafter.h"
#ifdef LS_HAVE_CUDA
#include "draft/dspark/cuda/load_cuda.h"
#endif

namespace ls {

Result<std::unique_ptr<Drafter>> load_drafter(const std::string& directory, Target& target,
                                              const DrafterOptions& asked) {
  DrafterOptions options = asked;  // --drafter-bits auto made 0 or 8 for this device and CPU (dspark/config.h)
  options.bits = dspark::resolve_draft_bits(asked.bits, asked.device, asked.mode);
  if (options.device == Device::Cuda) {
#ifdef LS_HAVE_CUDA
    return dspark::load_cuda_drafter(directory, target, options);
#else
    return Status(ErrorCode::DeviceUnavailable, "this build has no CUDA backend (nvcc was not found at configure time)");
#endif
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<dspark::DsparkDrafter> drafter,
                      dspark::DsparkDrafter::load(directory, target, options));
  return std::unique_ptr<Drafter>(std::move(drafter));
}

}  // namespace ls
