// What the CUDA kernel benches share (cuda_gemm_bench.cu, cuda_decode_bench.cu): the CUDA error check, random bf16
// fills and the graph-replay timing. Included by those two files only.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "compute/cuda/kernels.h"

namespace ls::cuda::bench {

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

inline void check(const Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    std::exit(1);
  }
}

// p [n] = random bf16 in [-0.05, 0.05) from `seed` (cuda_decode_bench.cu).
void fill(bf16* p, size_t n, uint64_t seed);

// Median ms of one replay of `exec` on `stream` over `samples` replays (after one untimed).
inline double replay_ms(cudaGraphExec_t exec, cudaStream_t stream, int samples) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> times;
  for (int s = 0; s < samples; ++s) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median ms per GEMM when `count` launches are replayed from one CUDA graph (no launch gaps from the host).
template <class F>
double graph_ms(F body, int count) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < count; ++i) body(i, stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = replay_ms(exec, stream, 11) / count;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return ms;
}

// The pipeline decode GEMM against the streaming kernels (cuda_decode_bench.cu): every arm at `widths` rows, or
// (quick) only the automatic picks up to 16 rows. What a kernel boundary costs in a graph: chain_bench.
int pipe_bench(const std::vector<int64_t>& widths, bool quick);
int chain_bench();

}  // namespace ls::cuda::bench
