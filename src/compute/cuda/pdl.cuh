// Programmatic dependent launch (sm_90; plain launches on the portable path): the kernel-side wait and trigger and
// the host-side launch with programmatic stream serialization. Included by CUDA sources only.
#pragma once

#include <cuda_runtime.h>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/features.h"

namespace ls::cuda {

// A kernel launched programmatically starts while the kernel before it drains; it waits here for that kernel (its
// completion and memory) before reading what it wrote or writing anything. A no-op after a plain launch.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel (if launched programmatically) start its prologue now.
__device__ __forceinline__ void let_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

// Launches `kernel` on `stream` allowed to overlap the previous kernel's tail (programmatic stream serialization).
template <typename... Params, typename... Args>
Status launch_programmatic(void (*kernel)(Params...), dim3 grid, int threads, int smem, cudaStream_t stream,
                           Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = cuda_features().pdl ? 1 : 0;  // the portable sm_80 path: an ordinary launch
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, args...));
  return ok_status();
}

}  // namespace ls::cuda
