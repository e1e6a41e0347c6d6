// drafter_bench --device cuda --int8-kernels [--rows 1,9,16,27,32]: the drafter's GEMMs one by one at its shape,
// bf16 (cuBLAS as the drafter calls it, and skinny_gemm) against the int8 GEMM (automatic and every shape pinned).
// Each variant is a graph of launches over enough copies of the weights (>= 256 MiB) that none stays in L2, timed
// by events; the table gives microseconds a launch and the weight bytes a second.
#ifdef LS_HAVE_CUDA
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/features.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/int8_gemm.h"
#include "drafter_bench_setup.h"

namespace ls::bench {
namespace {

using json = nlohmann::json;
using dspark::cuda::bf16_t;

#define BENCH_CUDA(call)                                                              \
  do {                                                                                \
    const cudaError_t error = (call);                                                 \
    if (error != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(error));             \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

struct Matrix {
  const char* name;
  int64_t n, k;
  dspark::cuda::Int8Epilogue epilogue;
};

// Median microseconds a launch of `enqueue(copy)` over `copies` copies, captured in one graph.
double time_graph(cudaStream_t stream, int copies, int repeats, const std::function<bool(int)>& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
  bool ok = true;
  for (int copy = 0; copy < copies && ok; ++copy) ok = enqueue(copy);
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !ok) return -1;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return -1;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> times;
  for (int repeat = 0; repeat < repeats + 1; ++repeat) {
    cudaEventRecord(start, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (repeat > 0) times.push_back(1000.0 * ms / copies);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int run_int8_kernels(const Shape& shape, const std::vector<int>& row_counts, int repeats, json& results) {
  using dspark::cuda::Int8Epilogue;
  const int64_t d = shape.hidden, ff = shape.ffn, q = static_cast<int64_t>(shape.heads) * shape.head_dim;
  const int64_t kv = static_cast<int64_t>(shape.kv_heads) * shape.head_dim;
  const Matrix matrices[] = {
      {"qkv", q + 2 * kv, d, Int8Epilogue::Bf16},
      {"o", d, q, Int8Epilogue::Bf16},
      {"gate_up+swiglu", 2 * ff, d, Int8Epilogue::Swiglu},
      {"down", d, ff, Int8Epilogue::Bf16},
      {"head U (fp32)", shape.vocab, d, Int8Epilogue::F32},
      {"fc (absorb)", d, static_cast<int64_t>(shape.taps.size()) * d, Int8Epilogue::Bf16},
      {"context k/v (absorb)", static_cast<int64_t>(shape.layers) * 2 * kv, d, Int8Epilogue::Bf16},
  };
  const dspark::cuda::Int8GemmShape pins[] = {{1, 4},          {1, 8},          {1, 16},         {2, 4},
                                              {2, 8},          {2, 16},         {4, 4},          {4, 8},
                                              {1, 8, true},    {2, 8, true},    {4, 8, true},    {2, 8, false, 2},
                                              {4, 8, false, 4}, {4, 4, false, 4}, {4, 8, true, 4}, {2, 16, false, 2},
                                              {0, 0, true}};  // (the last: the automatic shape with x through L1)
  // The device's features are probed now (a probe kernel), not inside the first capture below.
  (void)ls::cuda::cuda_features();
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(cublas, stream);
  void* workspace = nullptr;
  BENCH_CUDA(cudaMalloc(&workspace, size_t{32} << 20));
  cublasSetWorkspace(cublas, workspace, size_t{32} << 20);
  const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  std::printf("\n## int8 GEMM kernels (%s): us a launch (graph of launches over >= 256 MiB of weight copies), "
              "weight GB/s in brackets\n\n| matrix | rows | cuBLAS bf16 | skinny bf16 | int8 auto (shape) |",
              shape.name.c_str());
  for (const auto& pin : pins)
    std::printf(" int8 m%d w%d%s%s |", pin.m_tiles, pin.warps, pin.x_l1 ? " L1" : "",
                pin.k_slices > 1 ? (" s" + std::to_string(pin.k_slices)).c_str() : "");
  std::printf("\n|---|---|---|---|---|");
  for (size_t i = 0; i < std::size(pins); ++i) std::printf("---|");
  std::printf("\n");
  std::mt19937 rng(20);
  for (const Matrix& m : matrices) {
    const size_t count = static_cast<size_t>(m.n * m.k);
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / (count * 2) + 1, 1, 64));
    std::vector<bf16> host(count);
    std::uniform_real_distribution<float> uniform(-0.05f, 0.05f);
    for (bf16& value : host) value = float_to_bf16(uniform(rng));
    ls::cuda::DeviceBuffer<bf16> w16;
    ls::cuda::DeviceBuffer<uint8_t> w8;
    ls::cuda::DeviceBuffer<float> scales;
    if (!w16.allocate(count * copies).ok() || !w8.allocate(count * copies).ok() ||
        !scales.allocate(static_cast<size_t>(m.n) * copies).ok())
      return 1;
    BENCH_CUDA(cudaMemcpy(w16.data(), host.data(), count * 2, cudaMemcpyHostToDevice));
    for (int copy = 1; copy < copies; ++copy)
      BENCH_CUDA(cudaMemcpy(w16.data() + copy * count, w16.data(), count * 2, cudaMemcpyDeviceToDevice));
    for (int copy = 0; copy < copies; ++copy) {
      const Status status = dspark::cuda::quantize_rows_int8(
          reinterpret_cast<const bf16_t*>(w16.data() + copy * count), m.n, m.k, w8.data() + copy * count,
          scales.data() + copy * m.n, stream);
      if (!status.ok()) return 1;
    }
    std::vector<bf16> x_host(static_cast<size_t>(max_rows * m.k));
    for (bf16& value : x_host) value = float_to_bf16(uniform(rng) * 20);
    // The K splits' scratch, sized for the widest pin at the most rows (tickets zero; each launch leaves them so).
    ls::cuda::DeviceBuffer<float> slice_sums;
    ls::cuda::DeviceBuffer<unsigned int> tickets;
    {
      int64_t floats = 1, tiles = 1;
      for (const auto& pin : pins) {
        for (const int rows : row_counts) {  // as int8_gemm resolves the pin at each row count
          dspark::cuda::Int8Gemm probe{nullptr, rows, {nullptr, nullptr, m.n, m.k}, nullptr, 0, m.epilogue, pin};
          const dspark::cuda::Int8GemmShape shape = dspark::cuda::int8_gemm_shape(probe);
          floats = std::max(floats, dspark::cuda::int8_gemm_slice_floats(probe, shape));
          tiles = std::max(tiles, dspark::cuda::int8_gemm_tiles(probe, shape));
        }
      }
      if (!slice_sums.allocate(static_cast<size_t>(floats)).ok() || !tickets.allocate(static_cast<size_t>(tiles)).ok())
        return 1;
      BENCH_CUDA(cudaMemset(tickets.data(), 0, static_cast<size_t>(tiles) * sizeof(unsigned int)));
    }
    ls::cuda::DeviceBuffer<bf16> x;
    ls::cuda::DeviceBuffer<float> y;
    if (!x.allocate(x_host.size()).ok() || !y.allocate(static_cast<size_t>(max_rows * m.n)).ok()) return 1;
    BENCH_CUDA(cudaMemcpy(x.data(), x_host.data(), x_host.size() * 2, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaStreamSynchronize(stream));
    const auto* xd = reinterpret_cast<const bf16_t*>(x.data());
    const bool swiglu = m.epilogue == Int8Epilogue::Swiglu, f32 = m.epilogue == Int8Epilogue::F32;
    for (const int rows : row_counts) {
      auto int8_launch = [&](dspark::cuda::Int8GemmShape pin) {
        return [&, pin](int copy) {
          dspark::cuda::Int8Gemm args{xd, rows, {w8.data() + copy * count, scales.data() + copy * m.n, m.n, m.k},
                                      y.data(), swiglu ? m.n / 2 : m.n, m.epilogue, pin, false};
          args.shape.slice_sums = slice_sums.data();
          args.shape.tickets = tickets.data();
          return dspark::cuda::int8_gemm(args, true, stream).ok();
        };
      };
      const double bf16_bytes = 2.0 * count, int8_bytes = count + 4.0 * m.n;
      const double cublas_us = time_graph(stream, copies, repeats, [&](int copy) {
        const float alpha = 1.0f, beta = 0.0f;
        return cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m.n), rows, static_cast<int>(m.k),
                            &alpha, w16.data() + copy * count, CUDA_R_16BF, static_cast<int>(m.k), xd, CUDA_R_16BF,
                            static_cast<int>(m.k), &beta, y.data(), f32 ? CUDA_R_32F : CUDA_R_16BF,
                            static_cast<int>(m.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
      });
      double skinny_us = -1;
      if (dspark::cuda::skinny_gemm_supported(rows, m.k)) {
        skinny_us = time_graph(stream, copies, repeats, [&](int copy) {
          const dspark::cuda::SkinnyGemm args{
              xd, rows, m.k, reinterpret_cast<const bf16_t*>(w16.data() + copy * count), m.n, y.data(),
              swiglu ? m.n / 2 : m.n,
              swiglu ? dspark::cuda::SkinnyEpilogue::Swiglu
                     : (f32 ? dspark::cuda::SkinnyEpilogue::F32 : dspark::cuda::SkinnyEpilogue::Bf16)};
          return dspark::cuda::skinny_gemm(args, true, stream).ok();
        });
      }
      dspark::cuda::Int8Gemm probe{xd, rows, {nullptr, nullptr, m.n, m.k}, nullptr, 0, m.epilogue, {}, false};
      const dspark::cuda::Int8GemmShape automatic = dspark::cuda::int8_gemm_shape(probe);
      const double auto_us = time_graph(stream, copies, repeats, int8_launch({}));
      std::printf("| %s | %d | %.2f (%.0f) | %.2f (%.0f) | %.2f (%.0f) m%d w%d |", m.name, rows, cublas_us,
                  bf16_bytes / cublas_us / 1e3, skinny_us, skinny_us > 0 ? bf16_bytes / skinny_us / 1e3 : 0.0,
                  auto_us, int8_bytes / auto_us / 1e3, automatic.m_tiles, automatic.warps);
      json row = {{"matrix", m.name}, {"rows", rows},          {"n", m.n},
                  {"k", m.k},         {"cublas_us", cublas_us}, {"skinny_us", skinny_us},
                  {"int8_auto_us", auto_us}, {"auto_m_tiles", automatic.m_tiles}, {"auto_warps", automatic.warps}};
      for (const auto& pin : pins) {
        const double us = time_graph(stream, copies, repeats, int8_launch(pin));
        std::printf(" %.2f (%.0f) |", us, int8_bytes / us / 1e3);
        row["int8_m" + std::to_string(pin.m_tiles) + "_w" + std::to_string(pin.warps) + (pin.x_l1 ? "_l1" : "") +
            (pin.k_slices > 1 ? "_s" + std::to_string(pin.k_slices) : "") + "_us"] = us;
      }
      std::printf("\n");
      std::fflush(stdout);
      results["int8_kernels"].push_back(row);
    }
  }
  cublasDestroy(cublas);
  cudaFree(workspace);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace ls::bench
#endif  // LS_HAVE_CUDA
