// GPU kernel bench: the batch-invariant bf16 GEMM vs cuBLAS and vs the measured read bandwidth, per shape and m,
// plus the device sampler. Usage: cuda_gemm_bench [table.txt [shapes [widths [filter]]]] (prints the table, writes
// it to the file; shapes, e.g. 8192->2048 or 2048->6144,8192->2048, times those shapes only; widths, e.g. 128,2048, those m
// only, and then skips the sampler; filter, "+text" / "-text": only the pinned configurations whose name has / has
// not text). cuda_gemm_bench --chain: what a kernel boundary costs in a graph (chain_bench). cuda_gemm_bench --pipe
// [widths]: the pipeline decode GEMM (row and tensor copies) against the streaming kernels (pipe_bench); --pipe-rows
// [widths]: only the automatic picks up to 16 rows against the default and the streaming kernels.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "base/hash.h"
#include "compute/cuda/kernels.h"
#include "cuda_bench_util.cuh"

using namespace ls;
using namespace ls::cuda;
using namespace ls::cuda::bench;

namespace {

__global__ void read_kernel(const uint4* p, size_t n, unsigned int* sink) {
  unsigned int acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

// Median milliseconds per call of `body` (called `inner` times per sample, 15 samples) on stream 0.
template <class F>
double time_ms(F body, int inner) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  body(0);  // warm up
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> samples;
  for (int s = 0; s < 15; ++s) {
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < inner; ++i) body(i);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms / inner);
  }
  std::sort(samples.begin(), samples.end());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--chain") return chain_bench();
  if (argc > 1 && (std::string(argv[1]) == "--pipe" || std::string(argv[1]) == "--pipe-rows")) {
    std::vector<int64_t> widths = {1, 4, 8, 16};
    if (argc > 2) {
      widths.clear();
      const std::string list = argv[2];
      for (size_t at = 0; at < list.size();) {
        const size_t comma = list.find(',', at);
        widths.push_back(std::atoll(list.substr(at, comma - at).c_str()));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    }
    return pipe_bench(widths, std::string(argv[1]) == "--pipe-rows");
  }
  std::string table;
  auto emit = [&](const char* format, auto... args) {
    char line[512];
    std::snprintf(line, sizeof line, format, args...);
    std::fputs(line, stdout);
    std::fflush(stdout);
    table += line;
  };
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  emit("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // Read bandwidth (the memory floor's denominator) and device copy bandwidth on 2 GiB.
  const size_t big = 2ull << 30;
  DeviceBuffer<unsigned char> a, b;
  check(a.allocate(big));
  check(b.allocate(big));
  DeviceBuffer<unsigned int> sink;
  check(sink.allocate(1));
  CHECK_CUDA(cudaMemset(a.data(), 1, big));
  const double read_ms = time_ms([&](int) {
    read_kernel<<<prop.multiProcessorCount * 8, 512>>>(reinterpret_cast<const uint4*>(a.data()), big / 16, sink.data());
  }, 5);
  const double copy_ms = time_ms([&](int) { CHECK_CUDA(cudaMemcpyAsync(b.data(), a.data(), big, cudaMemcpyDeviceToDevice)); }, 5);
  const double read_gbs = big / read_ms / 1e6, copy_gbs = 2.0 * big / copy_ms / 1e6;
  emit("read bandwidth %.0f GB/s, copy %.0f GB/s (read + write)\n", read_gbs, copy_gbs);
  a.reset();
  b.reset();

  GemmEngine engine;
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  struct Shape {
    int64_t n, k;
    const char* what;
  };
  // The LFM2.5-1.2B projections: w1|w3 2048->16384, conv in 2048->6144 (also qkv as timed for issue 8), q|k|v
  // 2048->3072, out 2048->2048, w2 8192->2048, the head 2048->65536; 2048->8192 is w1 or w3 alone.
  const Shape shapes[] = {{8192, 2048, "2048->8192"},   {2048, 8192, "8192->2048"},   {6144, 2048, "2048->6144"},
                          {2048, 2048, "2048->2048"},   {16384, 2048, "2048->16384"}, {65536, 2048, "2048->65536"},
                          {3072, 2048, "2048->3072"}};
  std::vector<int64_t> widths = {1, 4, 16, 17, 32, 64, 100, 128, 256, 2048};
  // Optional: the shapes to time (comma list, e.g. 8192->2048,2048->6144) and the widths.
  const std::string only = argc > 2 ? "," + std::string(argv[2]) + "," : "";
  if (argc > 3) {
    widths.clear();
    const std::string list = argv[3];
    for (size_t at = 0; at < list.size();) {
      const size_t comma = list.find(',', at);
      widths.push_back(std::atoll(list.substr(at, comma - at).c_str()));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  const int64_t max_m = *std::max_element(widths.begin(), widths.end());
  emit("\n%-12s %5s %-15s %9s %8s %7s %8s %9s %8s %7s\n", "shape", "m", "tile", "own us", "own GB/s", "%read",
       "own TF/s", "cublas us", "cb TF/s", "%cublas");
  for (const Shape& shape : shapes) {
    if (argc > 2 && only.find("," + std::string(shape.what) + ",") == std::string::npos) continue;
    if (argc <= 2 && shape.k == 2048 && shape.n != 8192 && shape.n != 65536) continue;  // the table of docs/cuda.md
    const size_t weight_elems = shape.n * shape.k;
    const int copies = static_cast<int>(std::max<size_t>(2, (1ull << 29) / (weight_elems * 2) + 1));  // > 512 MiB
    std::vector<DeviceBuffer<bf16>> weights(copies);
    for (int c = 0; c < copies; ++c) {
      check(weights[c].allocate(weight_elems));
      fill(weights[c].data(), weight_elems, 1000 + c);
    }
    DeviceBuffer<bf16> x, y;
    check(x.allocate(max_m * shape.k));
    check(y.allocate(max_m * shape.n));
    fill(x.data(), max_m * shape.k, 7);
    for (int64_t m : widths) {
      auto own = [&](int i, cudaStream_t stream) {
        check(engine.gemm(x.data(), m, DeviceMatrix{weights[i % copies].data(), nullptr, shape.n, shape.k}, y.data(),
                          nullptr, stream));
      };
      auto blas = [&](int i, cudaStream_t stream) {
        cublasSetStream(handle, stream);
        const float alpha = 1.0f, beta = 0.0f;
        cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, shape.n, m, shape.k, &alpha, weights[i % copies].data(),
                     CUDA_R_16BF, shape.k, x.data(), CUDA_R_16BF, shape.k, &beta, y.data(), CUDA_R_16BF, shape.n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      const int count = m <= 16 ? 40 : 10;
      const double own_ms = graph_ms(own, count);
      const double blas_ms = graph_ms(blas, count);
      const double bytes = 2.0 * (weight_elems + m * shape.k + m * shape.n);
      const double flops = 2.0 * m * shape.n * shape.k;
      const double own_gbs = bytes / own_ms / 1e6;
      emit("%-12s %5lld %-15s %9.1f %8.0f %6.0f%% %8.1f %9.1f %8.1f %6.0f%%\n", shape.what, static_cast<long long>(m),
           engine.tile_name(m, shape.n, shape.k), own_ms * 1e3, own_gbs, 100.0 * own_gbs / read_gbs, flops / own_ms / 1e9,
           blas_ms * 1e3, flops / blas_ms / 1e9, 100.0 * blas_ms / own_ms);
      // Decode rows: the engine's pick with the streaming launches' L2 weight prefetch, for the A/B.
      if (m <= 16) {
        set_decode_l2_prefetch(true);
        const double prefetch_ms = graph_ms(own, count);
        set_decode_l2_prefetch(false);
        emit("%-12s %5lld %-15s %9.1f %8.0f %6.0f%% %8.1f %9s %8s %6.0f%%  (L2 prefetch)\n", shape.what,
             static_cast<long long>(m), engine.tile_name(m, shape.n, shape.k), prefetch_ms * 1e3,
             bytes / prefetch_ms / 1e6, 100.0 * bytes / prefetch_ms / 1e6 / read_gbs, flops / prefetch_ms / 1e9, "", "",
             100.0 * blas_ms / prefetch_ms);
      }
      // Verify windows (17..64 rows): the older pick (no streamed windows), for the A/B.
      if (m > 16 && m <= 64) {
        set_decode_rows(16);
        const std::string older = engine.tile_name(m, shape.n, shape.k);
        const double older_ms = graph_ms(own, count);
        set_decode_rows(32);
        emit("%-12s %5lld %-15s %9.1f %8s %7s %8.1f %9s %8s %6.0f%%  (older pick)\n", shape.what,
             static_cast<long long>(m), older.c_str(), older_ms * 1e3, "", "", flops / older_ms / 1e9, "", "",
             100.0 * blas_ms / older_ms);
        // The streaming kernel with 32 / 64 x rows a tile (set_decode_rows), where it takes K.
        set_decode_rows(64);
        const std::string streamed = engine.tile_name(m, shape.n, shape.k);
        if (streamed.rfind("decode", 0) == 0) {
          const double streamed_ms = graph_ms(own, count);
          emit("%-12s %5lld %-15s %9.1f %8.0f %6.0f%% %8.1f %9s %8s %6.0f%%  (streamed rows)\n", shape.what,
               static_cast<long long>(m), streamed.c_str(), streamed_ms * 1e3, bytes / streamed_ms / 1e6,
               100.0 * bytes / streamed_ms / 1e6 / read_gbs, flops / streamed_ms / 1e9, "", "",
               100.0 * blas_ms / streamed_ms);
        }
        set_decode_rows(32);
      }
      // Every other configuration that may run at this (m, K), pinned, for choosing the automatic pick.
      for (int tile = 0; tile < GemmEngine::tile_count(); ++tile) {
        GemmEngine pinned;
        pinned.pin_tile_for_test(tile);
        const std::string name = pinned.tile_name(m, shape.n, shape.k);
        if (name == engine.tile_name(m, shape.n, shape.k)) continue;
        // Decode rows: only the decode kernel and the 16-row tiles compete.
        if (m <= 16 && name.rfind("16x", 0) != 0 && name.rfind("decode", 0) != 0) continue;
        // Optional filter on the pinned names: "+text" times only those containing text, "-text" leaves them out.
        if (argc > 4 && argv[4][0] != 0 && (name.find(argv[4] + 1) != std::string::npos) != (argv[4][0] == '+'))
          continue;
        // Prefill rows (m >= 128, widths given): only the 128-row tiles compete.
        if (argc > 3 && m >= 128 && name.rfind("128x", 0) != 0 && name.rfind("256x", 0) != 0 &&
            name.rfind("wgmma", 0) != 0)
          continue;
        auto variant = [&](int i, cudaStream_t stream) {
          check(pinned.gemm(x.data(), m, DeviceMatrix{weights[i % copies].data(), nullptr, shape.n, shape.k},
                            y.data(), nullptr, stream));
        };
        const double ms = graph_ms(variant, count);
        emit("%-12s %5lld %-15s %9.1f %8s %7s %8.1f %9s %8s %6.0f%%  (pinned)\n", shape.what,
             static_cast<long long>(m), name.c_str(), ms * 1e3, "", "", flops / ms / 1e9, "", "",
             100.0 * blas_ms / ms);
      }
    }
  }
  cublasDestroy(handle);

  if (argc > 3) {
    if (argc > 1) {
      FILE* file = std::fopen(argv[1], "w");
      if (file) {
        std::fputs(table.c_str(), file);
        std::fclose(file);
      }
    }
    return 0;
  }
  // The device sampler on 256 rows x 65536 logits: greedy, and sampled with top-k 50 / top-p 0.9.
  const int rows = 256, vocab = 65536;
  DeviceBuffer<float> logits;
  DeviceBuffer<RowDraw> draws;
  DeviceBuffer<int32_t> tokens;
  check(logits.allocate(static_cast<size_t>(rows) * vocab));
  check(draws.allocate(rows));
  check(tokens.allocate(rows));
  std::vector<float> host(static_cast<size_t>(rows) * vocab);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(uniform_open01(splitmix64(i)) * 12.0);
  CHECK_CUDA(cudaMemcpy(logits.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  DrawScratch scratch;
  check(scratch.reserve(rows, vocab));
  auto time_draws = [&](RowDraw d) {
    std::vector<RowDraw> all(rows, d);
    CHECK_CUDA(cudaMemcpy(draws.data(), all.data(), rows * sizeof(RowDraw), cudaMemcpyHostToDevice));
    return time_ms([&](int) { check(draw_rows(logits.data(), rows, vocab, draws.data(), tokens.data(), scratch, 0)); },
                   5);
  };
  emit("\nsampler, %d rows x %d: greedy %.1f us", rows, vocab, time_draws(RowDraw{}) * 1e3);
  emit(", T=0.8 plain %.1f us", time_draws(RowDraw{0.8f, 0, 1.0f, 0.0f, 1, 5}) * 1e3);
  emit(", top-k 50 + top-p 0.9 %.1f us", time_draws(RowDraw{0.8f, 50, 0.9f, 0.0f, 1, 5}) * 1e3);
  emit(", top-p 0.9 alone %.1f us\n", time_draws(RowDraw{0.8f, 0, 0.9f, 0.0f, 1, 5}) * 1e3);
  if (argc > 1) {
    FILE* file = std::fopen(argv[1], "w");
    if (file) {
      std::fputs(table.c_str(), file);
      std::fclose(file);
    }
  }
  return 0;
}
