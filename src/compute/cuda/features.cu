// The runtime feature decision (features.h): a one-thread probe kernel reports the __CUDA_ARCH__ (and sm_90a-ness)
// of the code this binary runs on the device, combined once with the compute capability and LS_CUDA_PORTABLE.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "base/log.h"
#include "compute/cuda/features.h"

#ifndef LS_CUDA_ARCHS_BUILT
#define LS_CUDA_ARCHS_BUILT "unknown"
#endif

namespace ls::cuda {
namespace {

// out [2] = the code's __CUDA_ARCH__, 1 when it is the sm_90a variant.
__global__ void probe_code_kernel(int* out) {
#ifdef __CUDA_ARCH__
  out[0] = __CUDA_ARCH__;
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
  out[1] = 1;
#else
  out[1] = 0;
#endif
#endif
}

CudaFeatures probe() {
  int count = 0, device = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return CudaFeatures{};
  }
  int host[2] = {0, 0};
  int* out = nullptr;
  bool ran = cudaMalloc(&out, sizeof(host)) == cudaSuccess;
  if (ran) {
    probe_code_kernel<<<1, 1>>>(out);
    ran = cudaGetLastError() == cudaSuccess &&
          cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(out);
  }
  cudaGetLastError();
  if (!ran) {
    log_warn("cuda: the feature probe kernel did not run; using the portable sm_80 path");
    host[0] = 0;
  }
  CudaFeatures features = decide_features(major, minor, host[0], host[1] == 1, portable_forced_by_env());
  cudaDeviceGetAttribute(&features.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, probe_code_kernel) == cudaSuccess) {
    features.binary_version = attributes.binaryVersion;
    features.ptx_version = attributes.ptxVersion;
  }
  cudaGetLastError();
  return features;
}

}  // namespace

std::string CudaFeatures::describe() const {
  std::string line = "cc " + std::to_string(major) + "." + std::to_string(minor) + ", code sm_" +
                     std::to_string(code_arch / 10) + (code_sm90a ? "a" : "") + " (binary " +
                     std::to_string(binary_version) + ", ptx " + std::to_string(ptx_version) + ", built " +
                     built_cuda_archs() + ", " + std::to_string(shared_optin / 1024) + " KB shared):";
  if (wgmma) line += " wgmma";
  if (tma) line += " tma";
  if (clusters) line += " clusters";
  if (pdl) line += " pdl";
  if (portable()) line += " portable sm_80 path";
  if (forced_portable) line += " (LS_CUDA_PORTABLE)";
  return line;
}

CudaFeatures decide_features(int major, int minor, int code_arch, bool code_sm90a, bool forced_portable) {
  CudaFeatures features;
  features.major = major;
  features.minor = minor;
  features.code_arch = code_arch;
  features.code_sm90a = code_sm90a;
  features.forced_portable = forced_portable;
  // sm_90 code (compiled with __CUDA_ARCH__ >= 900, so griddepcontrol, cluster and TMA instructions are in it) on a
  // device that has them; the arch-specific sm_90a code runs on compute capability 9.0 only.
  const bool sm90_code = !forced_portable && major >= 9 && code_arch >= 900;
  features.tma = sm90_code;
  features.clusters = sm90_code;
  features.pdl = sm90_code;
  features.wgmma = sm90_code && code_sm90a && major == 9 && minor == 0;
  return features;
}

CudaFeatures portable_features(const CudaFeatures& features) {
  CudaFeatures portable = features;
  portable.wgmma = portable.tma = portable.clusters = portable.pdl = false;
  return portable;
}

bool portable_forced_by_env() {
  const char* value = std::getenv("LS_CUDA_PORTABLE");
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

const char* built_cuda_archs() { return LS_CUDA_ARCHS_BUILT; }

const CudaFeatures& cuda_features() {
  static CudaFeatures features;
  static std::once_flag once;
  std::call_once(once, [] {
    features = probe();
    if (features.major > 0) log_info("cuda features: %s", features.describe().c_str());
  });
  return features;
}

}  // namespace ls::cuda
