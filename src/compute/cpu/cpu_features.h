// The x86 instruction-set extensions the CPU kernels dispatch on, read once from cpuid at first use.
#pragma once

#include <string>

namespace ls::compute {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 + FMA3
  bool avx512 = false;       // AVX-512 F + BW + VL (the 512-bit fp32 kernels)
  bool avx512_bf16 = false;  // AVX-512 BF16 (vdpbf16ps) on top of `avx512`
};

// This CPU's features (cached; the same answer for the life of the process).
const CpuFeatures& cpu_features();

// "avx512f avx512bw avx512vl avx512bf16 avx2 fma" style list of what was found, for logs and benchmarks.
std::string cpu_features_text();

}  // namespace ls::compute
