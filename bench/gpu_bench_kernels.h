// gpu_bench's device measurements that need no target (gpu_bench_kernels.cpp): the copy bandwidth behind the memory
// floor, cuBLAS on a model's prefill projections, and the --decode-gemm table of the decode GEMM variants.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "base/status.h"
#include "io/model_config.h"

namespace ls::gpu_bench {

inline void check(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what, status.to_string().c_str());
  std::exit(1);
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
