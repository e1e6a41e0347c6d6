// gpu_bench's device measurements that need no target (see gpu_bench_kernels.h).
#include "gpu_bench_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/hash.h"
#include "bench_util.h"
#include "compute/cuda/kernels.h"

namespace ls::gpu_bench {
namespace {

using ls::bench::median;

// Seconds of one cuBLAS bf16 GEMM y [m, n] = x [m, k] @ W^T, median of 5 after a warm-up.
double cublas_seconds(cublasHandle_t handle, int64_t m, int64_t n, int64_t k, void* x, void* w, void* y) {
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> times;
  for (int i = 0; i < 6; ++i) {
    cudaEventRecord(start);
    cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                 &alpha, w, CUDA_R_16BF, static_cast<int>(k), x, CUDA_R_16BF, static_cast<int>(k), &beta, y,
                 CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0) times.push_back(ms * 1e-3);
  }
  return median(times);
}

// `count` bf16 values uniform in [-1, 1) (seeded) on the device: cuBLAS on constant operands (0x3c bytes) runs 5-22 %
// faster than on data like a model's (the tensor cores' power and clocks), so the floor is timed on both.
void fill_random(void* device, int64_t count, uint64_t seed) {
  std::vector<uint16_t> host(count);
  for (int64_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(splitmix64(seed * 1000003 + i) >> 40) / 8388608.0f - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    host[i] = static_cast<uint16_t>(bits >> 16);
  }
  cudaMemcpy(device, host.data(), count * 2, cudaMemcpyHostToDevice);
}

}  // namespace

// Device-to-device copy bandwidth (bytes read + written per second) over 1 GiB, median of 10.
double copy_bandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> rates;
  for (int i = 0; i < 11; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0) rates.push_back(2.0 * bytes / (ms * 1e-3));
  }
  cudaFree(a);
  cudaFree(b);
  return median(rates);
}

// The cuBLAS time of every projection of a prefill of m tokens (and its FLOPs).
CublasPrefill cublas_prefill(const io::ModelConfig& c, int64_t m) {
  const int64_t D = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim, kv = int64_t{c.num_kv_heads} * c.head_dim;
  struct Shape { int64_t m, n, k, launches; };
  std::vector<Shape> shapes;
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.layer_kinds[l] == io::LayerKind::Conv) {
      shapes.push_back({m, 3 * D, D, 1});
      shapes.push_back({m, D, D, 1});
    } else {
      shapes.push_back({m, q, D, 1});
      shapes.push_back({m, kv, D, 2});
      shapes.push_back({m, D, q, 1});
    }
    if (c.is_moe_layer(l)) {
      const int64_t E = c.moe->num_experts, I = c.moe->expert_ffn_size, rows = std::max<int64_t>(1, m * c.moe->experts_per_token / E);
      shapes.push_back({m, E, D, 1});
      shapes.push_back({rows, 2 * I, D, E});
      shapes.push_back({rows, D, I, E});
    } else {
      shapes.push_back({m, 2 * int64_t{c.ffn_size}, D, 1});
      shapes.push_back({m, D, c.ffn_size, 1});
    }
  }
  int64_t max_x = 0, max_w = 0, max_y = 0;
  for (const Shape& s : shapes) {
    max_x = std::max(max_x, s.m * s.k);
    max_w = std::max(max_w, s.n * s.k);
    max_y = std::max(max_y, s.m * s.n);
  }
  void *x = nullptr, *w = nullptr, *y = nullptr;
  cudaMalloc(&x, max_x * 2);
  cudaMalloc(&w, max_w * 2);
  cudaMalloc(&y, max_y * 2);
  cublasHandle_t handle;
  cublasCreate(&handle);
  CublasPrefill out;
  for (const bool random : {false, true}) {
    if (random) {
      fill_random(x, max_x, 1);
      fill_random(w, max_w, 2);
    } else {
      cudaMemset(x, 0x3c, max_x * 2);
      cudaMemset(w, 0x3c, max_w * 2);
    }
    double seconds = 0;
    for (const Shape& s : shapes) seconds += s.launches * cublas_seconds(handle, s.m, s.n, s.k, x, w, y);
    (random ? out.random_seconds : out.seconds) = seconds;
  }
  for (const Shape& s : shapes) out.flops += s.launches * 2.0 * s.m * s.n * s.k;
  cublasDestroy(handle);
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  return out;
}

// --decode-gemm: the decode kernel's variants (and the engine's own pick, "auto") on the LFM2.5-1.2B decode GEMM
// shapes at m = 1, 4, 16: microseconds per GEMM, replayed from a CUDA graph over weight copies that defeat the L2.
void decode_gemm_table(double bandwidth) {
  struct Shape {
    int64_t n, k;
    const char* what;
  };
  const Shape shapes[] = {{16384, 2048, "2048->16384 (w1|w3)"}, {2048, 8192, "8192->2048 (w2)"},
                          {6144, 2048, "2048->6144 (conv in)"},  {2048, 2048, "2048->2048 (out/q)"},
                          {512, 2048, "2048->512 (k/v)"},        {65536, 2048, "2048->65536 (head)"}};
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  const cuda::GemmEngine engine;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::printf("decode GEMM variants (us per GEMM, GB/s of weights, share of the copy bandwidth %.0f GB/s):\n",
              bandwidth / 1e9);
  std::printf("  %-22s %3s %-20s %8s %8s %6s\n", "shape", "m", "variant", "us", "GB/s", "bw");
  for (const Shape& shape : shapes) {
    const int64_t bytes = shape.n * shape.k * 2;
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{768} << 20) / bytes, 2, 64));
    void *w = nullptr, *x = nullptr, *y = nullptr;
    if (cudaMalloc(&w, bytes * copies) != cudaSuccess || cudaMalloc(&x, 16 * shape.k * 2) != cudaSuccess ||
        cudaMalloc(&y, 16 * shape.n * 2) != cudaSuccess) {
      std::fprintf(stderr, "gpu_bench: no memory for %s\n", shape.what);
      std::exit(1);
    }
    cudaMemset(w, 0x3c, bytes * copies);
    cudaMemset(x, 0x3c, 16 * shape.k * 2);
    // The norm prologue's inputs (h, delta, weight) and its residual output: x itself serves as h and delta.
    void* h_out = nullptr;
    if (cudaMalloc(&h_out, 16 * shape.k * 2) != cudaSuccess) std::exit(1);
    cuda::DecodeNorm norm;
    norm.h = static_cast<const bf16*>(x);
    norm.delta = static_cast<const bf16*>(x);
    norm.h_out = static_cast<bf16*>(h_out);
    norm.weight = static_cast<const bf16*>(x);
    norm.eps = 1e-5f;
    const bool norm_fits = cuda::decode_norm_fits(1, shape.k);
    for (const int64_t m : {1, 4, 16}) {
      // -3: the staged launch with the residual add + RMSNorm in its prologue (gate_up with SwiGLU; one-slice only),
      // -2: the fused gate_up GEMM + SwiGLU (w1|w3 only), -1: the engine's pick, then every variant
      const bool gate_up = shape.n == 16384;
      for (int variant = norm_fits ? -3 : (gate_up ? -2 : -1); variant < cuda::decode_variant_count(); ++variant) {
        if (variant == -2 && !gate_up) continue;
        auto run = [&](int copy) {
          const cuda::DeviceMatrix matrix{static_cast<const bf16*>(w) + copy * shape.n * shape.k, nullptr, shape.n,
                                          shape.k};
          const bf16* xb = static_cast<const bf16*>(x);
          bf16* yb = static_cast<bf16*>(y);
          if (variant == -3 && gate_up) return cuda::gemm_decode_norm_swiglu(engine, norm, m, matrix, yb, stream);
          if (variant == -3) return cuda::gemm_decode_norm(engine, norm, m, {&matrix, 1}, {&yb, 1}, stream);
          if (variant == -2) return cuda::gemm_decode_swiglu(engine, xb, m, matrix, yb, stream);
          return variant < 0 ? engine.gemm(xb, m, matrix, yb, nullptr, stream)
                             : cuda::gemm_decode_variant(variant, xb, m, matrix, yb, nullptr, stream);
        };
        check(run(0), "decode gemm warm-up");
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
        for (int copy = 0; copy < copies; ++copy) check(run(copy), "decode gemm");
        const bool captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
        if (!captured || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
          std::fprintf(stderr, "gpu_bench: graph capture failed for %s\n", shape.what);
          std::exit(1);
        }
        cudaGraphLaunch(exec, stream);
        std::vector<double> times;
        for (int i = 0; i < 9; ++i) {
          cudaEventRecord(start, stream);
          cudaGraphLaunch(exec, stream);
          cudaEventRecord(stop, stream);
          cudaEventSynchronize(stop);
          float ms = 0;
          cudaEventElapsedTime(&ms, start, stop);
          times.push_back(ms * 1e3 / copies);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        const double us = median(times), gbs = bytes / (us * 1e3);
        const std::string name = variant == -3   ? std::string(gate_up ? "norm + staged swiglu" : "norm + staged")
                                 : variant == -2 ? std::string("fused + swiglu")
                                 : variant < 0 ? std::string("auto: ") + engine.tile_name(m, shape.n, shape.k)
                                               : cuda::decode_variant_name(variant);
        std::printf("  %-22s %3lld %-20s %8.2f %8.0f %5.0f%%\n", shape.what, static_cast<long long>(m), name.c_str(),
                    us, gbs, 100.0 * gbs * 1e9 / bandwidth);
      }
    }
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
    cudaFree(h_out);
  }
  const cudaError_t error = cudaDeviceSynchronize();
  if (error != cudaSuccess) std::printf("decode GEMM table: %s\n", cudaGetErrorString(error));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
}

}  // namespace ls::gpu_bench
