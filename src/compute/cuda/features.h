// Which sm_90-only features a run may use, decided once per process from the device, the code this binary runs on
// it, and LS_CUDA_PORTABLE; plain C++ header (GemmEngine's choice, split mode, programmatic launches read it).
//
// The portable sm_80+ path (A100, L40S, RTX 30/40; or an H200 running compute_80 PTX) is mma.sync, ldmatrix and
// cp.async only; Hopper adds wgmma and setmaxnreg (sm_90a code only), TMA (cp.async.bulk.tensor + mbarrier),
// thread-block clusters with distributed shared memory, and programmatic dependent launch (griddepcontrol).
#pragma once

#include <string>

namespace ls::cuda {

struct CudaFeatures {
  int major = 0, minor = 0;       // the device's compute capability (0 without a device)
  int code_arch = 0;              // __CUDA_ARCH__ of the code the device runs (800: compute_80 PTX JIT-compiled on 9.0)
  bool code_sm90a = false;        // that code is the sm_90a variant (wgmma, setmaxnreg are compiled in)
  int binary_version = 0;         // the probe kernel's cudaFuncAttributes, for logs: SASS arch x 10 ...
  int ptx_version = 0;            // ... and the virtual arch it came from
  bool forced_portable = false;   // LS_CUDA_PORTABLE asked for the portable path
  int shared_optin = 0;           // shared memory a block may opt into: 227 KB on 9.0, 163 on 8.0, 99 on 8.6 / 8.9
  bool wgmma = false;             // wgmma tiles: sm_90a code on a 9.0 device
  bool tma = false;               // cp.async.bulk.tensor + mbarrier: sm_90 code on a 9.x+ device
  bool clusters = false;          // thread-block clusters and distributed shared memory (the split-mode GEMM)
  bool pdl = false;               // programmatic dependent launch (griddepcontrol in the kernels, the launch attribute)

  // No sm_90-only feature at all: the portable sm_80 path.
  bool portable() const { return !wgmma && !tma && !clusters && !pdl; }
  // One line for logs: "cc 9.0, code sm_90a (binary 90, ptx 90): wgmma tma clusters pdl".
  std::string describe() const;
};

// The rule, in one place: what a device of compute capability major.minor running code compiled for code_arch
// (sm_90a variant or not) may use; forced_portable turns every sm_90-only feature off.
CudaFeatures decide_features(int major, int minor, int code_arch, bool code_sm90a, bool forced_portable);

// The same device and code with every sm_90-only feature off (tests and benches of the portable path).
CudaFeatures portable_features(const CudaFeatures& features);

// LS_CUDA_PORTABLE is set to something other than "" or "0" (read on every call; cuda_features() reads it once).
bool portable_forced_by_env();

// The LS_CUDA_ARCHS this binary was built with, ';' written as ',' (e.g. "90a,80" or "80-ptx").
const char* built_cuda_archs();

// The current device's features, probed on the first call (a one-thread probe kernel reports the code the device
// runs; call it first outside graph capture, e.g. at load); all false without a device or when the probe fails.
const CudaFeatures& cuda_features();

}  // namespace ls::cuda
