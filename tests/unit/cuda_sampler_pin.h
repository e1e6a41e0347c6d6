// Pins the device sampler's kernel (cuda::SamplerKernel) for a scope: the CUDA sampler tests share it.
#pragma once
#ifdef LS_HAVE_CUDA

#include "compute/cuda/kernels.h"

namespace ls::cuda::testing {

class ScopedSamplerKernel {
 public:
  explicit ScopedSamplerKernel(SamplerKernel kernel) : before_(sampler_kernel()) { set_sampler_kernel(kernel); }
  ~ScopedSamplerKernel() { set_sampler_kernel(before_); }
  ScopedSamplerKernel(const ScopedSamplerKernel&) = delete;
  ScopedSamplerKernel& operator=(const ScopedSamplerKernel&) = delete;

 private:
  SamplerKernel before_;
};

}  // namespace ls::cuda::testing

#endif  // LS_HAVE_CUDA
