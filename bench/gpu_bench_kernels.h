// gpu_bench's device measurements that need no target (gpu_bench_kernels.cpp): the copy bandwidth behind the memory
// floor, cuBLAS on a model's prefill projections, and the --decode-gemm table of the decode GEMM variants.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "base/hash.h"
#include "base/status.h"
#include "io/model_config.h"

namespace ls::gpu_bench {

inline void check(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what, status.to_string().c_str());
  std::exit(1);
}

// Milliseconds since `start` (steady clock).
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// `count` token ids below `vocab`, a fixed function of the seed (prompts and windows of the benches).
inline std::vector<int32_t> tokens_for(int count, uint64_t seed, int vocab) {
  std::vector<int32_t> tokens(count);
  for (int i = 0; i < count; ++i) tokens[i] = static_cast<int32_t>(splitmix64(seed * 7919 + i) % vocab);
  return tokens;
}

// Device-to-device copy bandwidth (bytes read + written per second) over 1 GiB, median of 10.
double copy_bandwidth();
// The cuBLAS seconds of every projection of a prefill of m tokens on constant operands (0x3c bytes, as sessions 1-12
// timed the floor) and on random ones, and its FLOPs.
struct CublasPrefill {
  double seconds = 0, random_seconds = 0, flops = 0;
};
CublasPrefill cublas_prefill(const io::ModelConfig& c, int64_t m);
// --decode-gemm: the decode kernel's variants on the LFM2.5-1.2B decode GEMM shapes (us per GEMM, GB/s).
void decode_gemm_table(double bandwidth);

}  // namespace ls::gpu_bench
