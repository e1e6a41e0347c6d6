// The decode-kernel benches of cuda_gemm_bench (issue 8): --chain, what a kernel boundary costs in a graph, and
// --pipe / --pipe-rows, the pipeline decode GEMM against the streaming kernels on the 1.2B decode shapes.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "compute/cuda/kernels.h"
#include "compute/cuda/pdl.cuh"
#include "cuda_bench_util.cuh"

namespace ls::cuda::bench {
namespace {

__global__ void fill_kernel(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t x = seed + i * 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    p[i] = __float2bfloat16_rn((static_cast<float>(x >> 40) / 16777216.0f - 0.5f) * 0.1f);
  }
}

__global__ void empty_kernel() {}

__global__ void empty_programmatic_kernel() {
  let_next_kernel_start();
  wait_for_previous_kernel();
}

}  // namespace

void fill(bf16* p, size_t n, uint64_t seed) {
  fill_kernel<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(p), n, seed);
  CHECK_CUDA(cudaGetLastError());
}

// --chain (issue 8, what a kernel boundary costs inside a decode step): chains of `kChain` launches captured in one
// CUDA graph on a non-blocking stream, us per launch (median of 15 replays): empty kernels plain / programmatic, the
// 1-row add_rms_norm (2048), the 1-row GEMM 2048->2048 with one weight copy (L2-resident) and with 48 (DRAM), each
// reading the previous one's output, and the decode layer's norm -> GEMM pairs.
int chain_bench() {
  constexpr int kChain = 96, kCopies = 48;
  constexpr int64_t D = 2048;
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const GemmEngine engine;
  DeviceBuffer<__nv_bfloat16> w, a, b, weight;
  check(w.allocate(kCopies * D * D));
  check(a.allocate(D));
  check(b.allocate(D));
  check(weight.allocate(D));
  fill_kernel<<<1024, 256>>>(w.data(), kCopies * D * D, 1);
  fill_kernel<<<8, 256>>>(a.data(), D, 2);
  fill_kernel<<<8, 256>>>(b.data(), D, 3);
  fill_kernel<<<8, 256>>>(weight.data(), D, 4);
  CHECK_CUDA(cudaDeviceSynchronize());
  bf16* x = reinterpret_cast<bf16*>(a.data());
  bf16* y = reinterpret_cast<bf16*>(b.data());
  const bf16* gain = reinterpret_cast<const bf16*>(weight.data());
  auto matrix = [&](int i) {
    return DeviceMatrix{reinterpret_cast<const bf16*>(w.data()) + (i % kCopies) * D * D, nullptr, D, D};
  };
  auto one = [&](int i) { return DeviceMatrix{reinterpret_cast<const bf16*>(w.data()), nullptr, D, D}; };
  struct Case {
    const char* name;
    int launches_per_step;
    std::function<Status(int)> step;
  };
  const Case cases[] = {
      {"empty kernel, plain launch", 1,
       [&](int) {
         empty_kernel<<<1, 32, 0, stream>>>();
         return ok_status();
       }},
      {"empty kernel, programmatic", 1,
       [&](int) { return launch_programmatic(empty_programmatic_kernel, dim3(1), 32, 0, stream); }},
      {"empty kernel x 132 CTAs, programmatic", 1,
       [&](int) { return launch_programmatic(empty_programmatic_kernel, dim3(132), 128, 0, stream); }},
      {"add_rms_norm 1 x 2048", 1, [&](int) { return add_rms_norm(x, y, 1, D, gain, 1e-5f, y, stream); }},
      {"GEMM 2048->2048 m 1, W in L2", 1,
       [&](int i) { return engine.gemm(i % 2 ? y : x, 1, one(i), i % 2 ? x : y, nullptr, stream); }},
      {"GEMM 2048->2048 m 1, W from DRAM", 1,
       [&](int i) { return engine.gemm(i % 2 ? y : x, 1, matrix(i), i % 2 ? x : y, nullptr, stream); }},
      {"add_rms_norm + GEMM (DRAM), per pair", 2,
       [&](int i) {
         const Status norm = add_rms_norm(x, y, 1, D, gain, 1e-5f, y, stream);
         if (!norm.ok()) return norm;
         return engine.gemm(y, 1, matrix(i), x, nullptr, stream);
       }},
  };
  std::printf("kernel chains (%d launches in one graph; us per launch):\n", kChain);
  for (const Case& c : cases) {
    check(c.step(0));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < kChain / c.launches_per_step; ++i) check(c.step(i));
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    std::printf("  %-40s %7.2f us\n", c.name, replay_ms(exec, stream, 15) * 1e3 / kChain);
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

// --pipe [widths] (issue 8, sessions 8-9): the pipeline decode GEMM (row copies, and tensor copies of the weights:
// set_decode_pipe_tma 1 = one 3D box a stage) against the streaming kernels on the 1.2B
// decode shapes (and the 65536-wide head), back-to-back launches over weight copies (> 512 MiB, DRAM) in one graph;
// us, TB/s of weights and the share of 4.2 TB/s; the automatic configuration at chunks of 16 / 8 / 4 K tiles and
// rings of 96 / 200 KB, then every configuration pinned.
// quick (--pipe-rows): the old kernels, the default (session 10: one-slice launches up to 16 rows, x once with row
// copies) and every class on boxes, in that order and again.
int pipe_bench(const std::vector<int64_t>& widths, bool quick) {
  const GemmEngine engine;
  const int default_classes = decode_pipe_tma_classes();
  struct Shape {
    int64_t n, k;
    bool swiglu;
    const char* what;
  };
  const Shape shapes[] = {{2048, 2048, false, "2048->2048"},  {6144, 2048, false, "2048->6144"},
                          {3072, 2048, false, "2048->3072"},  {2048, 8192, false, "8192->2048"},
                          {16384, 2048, true, "2048->16384 swiglu"}, {8192, 2048, false, "2048->8192"},
                          {65536, 2048, false, "2048->65536 head"}};
  std::printf("pipeline decode GEMM (us per launch, TB/s of weights, share of 4.2 TB/s; old = streaming kernels):\n");
  std::printf("%-20s %4s %-34s %9s %7s %6s\n", "shape", "m", "kernel", "us", "TB/s", "of 4.2");
  for (const Shape& shape : shapes) {
    const size_t elems = shape.n * shape.k;
    const int copies = static_cast<int>(std::max<size_t>(2, (1ull << 29) / (elems * 2) + 1));
    std::vector<DeviceBuffer<bf16>> weights(copies);
    for (int c = 0; c < copies; ++c) {
      check(weights[c].allocate(elems));
      fill(weights[c].data(), elems, 2000 + c);
    }
    DeviceBuffer<bf16> x, y;
    check(x.allocate(16 * shape.k));
    check(y.allocate(16 * shape.n));
    fill(x.data(), 16 * shape.k, 9);
    const bool head = shape.n >= 65536;
    for (const int64_t m : widths) {
      if (head && m > 1) continue;
      auto matrix = [&](int i) { return DeviceMatrix{weights[i % copies].data(), nullptr, shape.n, shape.k}; };
      auto run = [&](int i, cudaStream_t stream) {
        if (shape.swiglu) check(gemm_decode_swiglu(engine, x.data(), m, matrix(i), y.data(), stream));
        else check(engine.gemm(x.data(), m, matrix(i), y.data(), nullptr, stream));
      };
      auto row = [&](const std::string& name, double ms) {
        const double tbs = 2.0 * elems / ms / 1e9;
        std::printf("%-20s %4lld %-34s %9.2f %7.2f %6.2f\n", shape.what, static_cast<long long>(m), name.c_str(),
                    ms * 1e3, tbs, tbs / 4.2);
      };
      if (quick) {
        for (int again = 0; again < 2; ++again) {
          set_decode_pipe_narrow(false);
          row("old", graph_ms(run, 40));
          set_decode_pipe_narrow(true);
          row("default", graph_ms(run, 40));
          set_decode_pipe_tma_classes(15);
          row("every class 3D boxes", graph_ms(run, 40));
          set_decode_pipe_tma_classes(default_classes);
        }
        continue;
      }
      set_decode_pipe_tma(0);
      set_decode_pipeline(false);
      set_decode_pipe_narrow(false);
      row("old", graph_ms(run, 40));
      set_decode_pipe_narrow(true);
      if (!head) row("session 8 default (rows, narrow)", graph_ms(run, 40));
      set_decode_pipe_tma(-1);
      if (!head) row("default (3D boxes wide and sliced)", graph_ms(run, 40));
      set_decode_pipe_tma_classes(15);
      if (!head) row("default + 3D boxes for every class", graph_ms(run, 40));
      set_decode_pipe_tma_classes(default_classes);
      set_decode_pipe_tma(0);
      set_decode_pipeline(true);
      if (!head) row("rows pipe auto, chunk 16", graph_ms(run, 40));
      for (const int mode : {1}) {
        set_decode_pipe_tma(mode);
        const std::string name = "tma 3d";
        for (const int chunk : mode == 1 ? std::vector<int>{16, 8, 4} : std::vector<int>{8}) {
          set_decode_pipeline(true);
          set_decode_pipe_chunk(chunk);
          if (!head) row(name + " auto, chunk " + std::to_string(chunk), graph_ms(run, 40));
          if (mode == 1 && chunk == 8 && !head)
            for (const int ring : {96, 200}) {
              set_decode_pipeline(true, -1, ring);
              row(name + " auto, chunk 8, ring " + std::to_string(ring) + " KB", graph_ms(run, 40));
            }
          set_decode_pipe_chunk(0);
        }
        for (int config = 0; config < decode_pipe_config_count(); ++config) {
          const bool swiglu_config = config >= decode_pipe_config_count() - 2;
          if (swiglu_config != shape.swiglu) continue;
          auto pinned = [&](int i, cudaStream_t stream) {
            check(gemm_decode_pipe(engine, config, x.data(), m, matrix(i), y.data(), nullptr, stream));
          };
          set_decode_pipeline(false);
          set_decode_pipe_chunk(8);
          const Status status = gemm_decode_pipe(engine, config, x.data(), m, matrix(0), y.data(), nullptr, nullptr);
          if (!status.ok()) {
            std::printf("%-20s %4lld %-34s refused: %s\n", shape.what, static_cast<long long>(m),
                        (name + " " + decode_pipe_config_name(config)).c_str(), status.message().c_str());
            continue;
          }
          row(name + " " + decode_pipe_config_name(config) + ", chunk 8", graph_ms(pinned, 40));
          if (mode == 1 && (config == 1 || config == 4)) {  // a ring small enough for two CTAs an SM
            set_decode_pipeline(false, -1, 96);
            if (gemm_decode_pipe(engine, config, x.data(), m, matrix(0), y.data(), nullptr, nullptr).ok())
              row(name + " " + decode_pipe_config_name(config) + ", ring 96 KB", graph_ms(pinned, 40));
            set_decode_pipeline(false);
          }
          set_decode_pipe_chunk(0);
        }
      }
      set_decode_pipe_chunk(0);
      set_decode_pipe_tma(-1);
      set_decode_pipeline(false);
      set_decode_pipe_narrow(true);
    }
  }
  return 0;
}

}  // namespace ls::cuda::bench
