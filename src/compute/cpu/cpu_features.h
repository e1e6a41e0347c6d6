// The x86 instruction-set extensions the CPU kernels dispatch on, read once from cpuid at first use.
#pragma once

#include <string>

namespace ls::compute {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 + FMA3
  bool avx512 = false;       // AVX-512 F + BW + VL (the 512-bit fp32 kernels)
  bool avx512_bf16 = false;  // AVX-512 BF16 (vdpbf16ps) on top of `avx512`
  bool avx512_vnni = false;  // AVX-512 VNNI (vpdpbusd) on top of `avx512`
  bool amx_bf16 = false;     // AMX-TILE + AMX-BF16 (tdpbf16ps) with the OS's tile state (XCR0 bits 17, 18)
};

// This CPU's features (cached; the same answer for the life of the process).
const CpuFeatures& cpu_features();

// Tests only: makes cpu_features() report `features` (only ever fewer than the CPU has) while the guard lives, so the
// AVX-512F-without-BF16 and AVX2 fallbacks run and are checked on an AVX-512 BF16 machine. Not thread-safe.
class CpuFeaturesOverride {
 public:
  explicit CpuFeaturesOverride(const CpuFeatures& features);
  ~CpuFeaturesOverride();
  CpuFeaturesOverride(const CpuFeaturesOverride&) = delete;
  CpuFeaturesOverride& operator=(const CpuFeaturesOverride&) = delete;

 private:
  CpuFeatures features_;
  const CpuFeatures* previous_;
};

// "avx512f avx512bw avx512vl avx512bf16 avx2 fma" style list of what was found, for logs and benchmarks.
std::string cpu_features_text();

}  // namespace ls::compute
