// cpuid-based feature detection through the compiler's __builtin_cpu_supports (which also checks OS XSAVE state).
#include "compute/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdint>

namespace ls::compute {
namespace {

// AMX-TILE (CPUID.(7,0):EDX[24]) and AMX-BF16 (EDX[22]), with the OS saving the tile configuration and data (XCR0
// bits 17 and 18, readable once OSXSAVE (CPUID.1:ECX[27]) says xgetbv works). GCC 12's __builtin_cpu_supports does
// not know AMX.
bool detect_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx & (1u << 24)) || !(edx & (1u << 22))) return false;
  uint32_t xcr0_low = 0, xcr0_high = 0;
  asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr uint32_t kTileState = (1u << 17) | (1u << 18);
  return (xcr0_low & kTileState) == kTileState;
}

CpuFeatures detect_cpu_features() {
  __builtin_cpu_init();
  CpuFeatures features;
  features.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  features.avx512 = features.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl");
  features.avx512_bf16 = features.avx512 && __builtin_cpu_supports("avx512bf16");
  features.avx512_vnni = features.avx512 && __builtin_cpu_supports("avx512vnni");
  features.amx_bf16 = features.avx512_bf16 && detect_amx_bf16();
  return features;
}

const CpuFeatures* override_features = nullptr;  // set only by CpuFeaturesOverride (tests)

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect_cpu_features();
  return override_features ? *override_features : features;
}

CpuFeaturesOverride::CpuFeaturesOverride(const CpuFeatures& features) : previous_(override_features) {
  const CpuFeatures& real = cpu_features();
  // Never claim an extension the CPU lacks: the kernels would fault.
  features_.avx2_fma = features.avx2_fma && real.avx2_fma;
  features_.avx512 = features.avx512 && real.avx512;
  features_.avx512_bf16 = features.avx512_bf16 && real.avx512_bf16;
  features_.avx512_vnni = features.avx512_vnni && real.avx512_vnni;
  features_.amx_bf16 = features.amx_bf16 && real.amx_bf16;
  override_features = &features_;
}

CpuFeaturesOverride::~CpuFeaturesOverride() { override_features = previous_; }

std::string cpu_features_text() {
  const CpuFeatures& features = cpu_features();
  std::string text;
  if (features.avx512) text += "avx512f avx512bw avx512vl ";
  if (features.avx512_bf16) text += "avx512bf16 ";
  if (features.avx512_vnni) text += "avx512vnni ";
  if (features.amx_bf16) text += "amx-bf16 ";
  if (features.avx2_fma) text += "avx2 fma";
  if (text.empty()) text = "portable";
  return text;
}

}  // namespace ls::compute
