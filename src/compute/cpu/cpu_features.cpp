// cpuid-based feature detection through the compiler's __builtin_cpu_supports (which also checks OS XSAVE state).
#include "compute/cpu/cpu_features.h"

namespace ls::compute {
namespace {

CpuFeatures detect_cpu_features() {
  __builtin_cpu_init();
  CpuFeatures features;
  features.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  features.avx512 = features.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl");
  features.avx512_bf16 = features.avx512 && __builtin_cpu_supports("avx512bf16");
  features.avx512_vnni = features.avx512 && __builtin_cpu_supports("avx512vnni");
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
  override_features = &features_;
}

CpuFeaturesOverride::~CpuFeaturesOverride() { override_features = previous_; }

std::string cpu_features_text() {
  const CpuFeatures& features = cpu_features();
  std::string text;
  if (features.avx512) text += "avx512f avx512bw avx512vl ";
  if (features.avx512_bf16) text += "avx512bf16 ";
  if (features.avx512_vnni) text += "avx512vnni ";
  if (features.avx2_fma) text += "avx2 fma";
  if (text.empty()) text = "portable";
  return text;
}

}  // namespace ls::compute
