// Prefill's elementwise work (session 12): swiglu's three kernels give the bits of the one-output-a-thread kernel on
// every bf16 gate; and, when asked (LS_PREFILL_TIMING=1), the device time of each op a 1.2B prefill of 2048 tokens
// runs between and in its GEMMs, beside cuBLAS on the same shapes.
#ifdef LS_HAVE_CUDA

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/kernels.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace ls::cuda {
namespace {

using compute::testing::random_values;
using testing::device_ms_per_call;
using testing::download;
using testing::poisoned;
using testing::to_bf16;
using testing::upload;

// Positions where two bf16 arrays differ bit for bit (NaN payloads included).
size_t differing(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += a[i].bits != b[i].bits;
  return count;
}

// Restores the process's swiglu kernel when a test ends.
struct SwigluModeScope {
  SwigluKernel saved = swiglu_kernel_mode();
  ~SwigluModeScope() { set_swiglu_kernel(saved); }
};

// out [rows, width] under `mode` for gate / up interleaved as a gate_up GEMM's output [rows, 2 * width] (+ gap).
std::vector<bf16> swiglu_under(SwigluKernel mode, const DeviceBuffer<bf16>& wide, int64_t rows, int width,
                               int64_t stride) {
  set_swiglu_kernel(mode);
  auto out = poisoned<bf16>(rows * width);
  EXPECT_TRUE(swiglu(wide.data(), wide.data() + width, rows, width, stride, out.data(), nullptr).ok());
  return download(out, rows * width);
}

TEST(CudaSwiglu, EveryKernelGivesTheRowKernelsBitsOnEveryBf16Gate) {
  LS_SKIP_WITHOUT_DEVICE();
  SwigluModeScope scope;
  struct Shape {
    int64_t rows;
    int width;
    int64_t gap;  // extra elements after each row's gate | up
    bool every_gate;
  };
  // 64 x 1024 gates: each of the 65536 bf16 patterns once (NaN, inf, subnormals); then random gates with a ragged
  // last column block, a gapped stride, and a width the vector kernel does not take (the row kernel runs).
  for (const Shape& shape : {Shape{64, 1024, 0, true}, Shape{37, 8200, 0, false}, Shape{19, 2056, 24, false},
                             Shape{5, 1001, 0, false}}) {
    const int64_t stride = 2 * shape.width + shape.gap;
    std::vector<float> values = random_values(shape.rows * stride, 91 + shape.width, 6.0f);
    std::vector<bf16> host = to_bf16(values);
    for (int64_t r = 0; r < shape.rows; ++r)
      for (int c = 0; c < shape.width; ++c) {
        bf16& gate = host[r * stride + c];
        if (shape.every_gate) gate.bits = static_cast<uint16_t>(r * shape.width + c);
        if (!shape.every_gate && c % 97 == 0) gate = float_to_bf16(1.0f);  // the planted entry's gate
      }
    const auto wide = upload(host);
    const std::string what = std::to_string(shape.rows) + "x" + std::to_string(shape.width);
    const auto rows_bits = swiglu_under(SwigluKernel::Rows, wide, shape.rows, shape.width, stride);
    for (SwigluKernel mode : {SwigluKernel::Vector, SwigluKernel::Table})
      EXPECT_EQ(differing(swiglu_under(mode, wide, shape.rows, shape.width, stride), rows_bits), 0u)
          << what << " kernel " << static_cast<int>(mode);
    // The planted table (g = 1.0 one ulp off) is seen wherever the vector kernel runs.
    const size_t planted =
        differing(swiglu_under(SwigluKernel::TablePlantedOneOff, wide, shape.rows, shape.width, stride), rows_bits);
    if (shape.width % 8 == 0)
      EXPECT_GT(planted, 0u) << what << ": the planted table entry went unseen";
    else
      EXPECT_EQ(planted, 0u) << what << ": the row kernel runs (no table)";
    std::printf("swiglu %s: planted table entry changed %zu outputs\n", what.c_str(), planted);
  }
}

// Device microseconds a call, and GB/s of the bytes it must move at least.
void report(const char* what, double bytes, int repeats, const std::function<Status()>& launch) {
  EXPECT_TRUE(launch().ok()) << what;  // warm: the table fill, first-launch costs
  const double us = 1e3 * device_ms_per_call(repeats, [&] { (void)launch(); });
  std::printf("prefill op %-36s %9.1f us %8.0f GB/s\n", what, us, bytes / us / 1e3);
}

// Device microseconds a call and TFLOP/s of a GEMM.
void report_gemm(const char* what, double flops, const std::function<Status()>& launch) {
  EXPECT_TRUE(launch().ok()) << what;
  const double us = 1e3 * device_ms_per_call(10, [&] { (void)launch(); });
  std::printf("prefill op %-44s %9.1f us %6.0f TFLOP/s\n", what, us, flops / us / 1e6);
}

TEST(CudaPrefillOps, TimesThe12BPrefillOpsWhenAsked) {
  LS_SKIP_WITHOUT_DEVICE();
  if (std::getenv("LS_PREFILL_TIMING") == nullptr) GTEST_SKIP() << "set LS_PREFILL_TIMING=1 to time";
  SwigluModeScope scope;
  constexpr int64_t R = 2048, D = 2048, F = 8192, H = 32, KV = 8, HD = 64;
  constexpr int kRepeats = 20;
  auto random_device = [](int64_t count, uint64_t seed, float scale) {
    return upload(to_bf16(random_values(count, seed, scale)));
  };
  auto h = random_device(R * D, 1, 2.0f), delta = random_device(R * D, 2, 0.5f), u = poisoned<bf16>(R * D);
  auto norm_weight = random_device(D, 3, 1.0f);
  auto wide = random_device(R * 2 * F, 4, 4.0f), act = poisoned<bf16>(R * F);
  const double act_bytes = 2.0 * R * F * 3;
  report("add_rms_norm 2048x2048", 2.0 * R * D * 4, kRepeats,
         [&] { return add_rms_norm(h.data(), delta.data(), R, D, norm_weight.data(), 1e-5f, u.data(), nullptr); });
  report("rms_norm 2048x2048", 2.0 * R * D * 2, kRepeats,
         [&] { return rms_norm(h.data(), R, D, norm_weight.data(), 1e-5f, u.data(), nullptr); });
  report("add_residual 2048x2048", 2.0 * R * D * 3, kRepeats,
         [&] { return add_residual(h.data(), delta.data(), R * D, nullptr); });
  const std::pair<const char*, SwigluKernel> modes[] = {{"swiglu rows 2048x8192", SwigluKernel::Rows},
                                                        {"swiglu vector 2048x8192", SwigluKernel::Vector},
                                                        {"swiglu table 2048x8192", SwigluKernel::Table}};
  for (const auto& [name, mode] : modes) {
    set_swiglu_kernel(mode);
    report(name, act_bytes, kRepeats,
           [&] { return swiglu(wide.data(), wide.data() + F, R, F, 2 * F, act.data(), nullptr); });
  }
  auto q_raw = random_device(R * H * HD, 5, 2.0f), k_raw = random_device(R * KV * HD, 6, 2.0f);
  auto q = poisoned<bf16>(R * H * HD), k = poisoned<bf16>(R * KV * HD);
  auto head_weight = random_device(HD, 7, 1.0f);
  std::vector<int64_t> positions_host(R);
  for (int64_t r = 0; r < R; ++r) positions_host[r] = r;
  auto positions = upload(positions_host);
  std::vector<float> inv_freq_host(HD / 2);
  for (int i = 0; i < HD / 2; ++i) inv_freq_host[i] = std::pow(1e6f, -2.0f * i / HD);
  auto inv_freq = upload(inv_freq_host);
  QkNormRope qk;
  qk.q_raw = q_raw.data();
  qk.k_raw = k_raw.data();
  qk.q_weight = head_weight.data();
  qk.k_weight = head_weight.data();
  qk.q = q.data();
  qk.k = k.data();
  qk.rows = R;
  qk.q_heads = H;
  qk.k_heads = KV;
  qk.head_dim = HD;
  qk.eps = 1e-5f;
  qk.positions = positions.data();
  qk.inv_freq = inv_freq.data();
  report("qk_norm_rope 2048 x (32 + 8) x 64", 2.0 * R * (H + KV) * HD * 2, kRepeats,
         [&] { return qk_norm_rope(qk, nullptr); });
  // The GEMMs of one layer (conv: in_proj, out_proj; attention: q, k, v, o; FFN: gate_up, down), and cuBLAS on the
  // same data and on constant data (gpu_bench's floor fills its operands
  // with 0x3c bytes; tensor cores draw less power on constant data).
  GemmEngine engine;
  auto x = random_device(R * F, 8, 1.0f);
  auto y = poisoned<bf16>(R * 2 * F);
  auto constant_x = poisoned<bf16>(R * F), constant_w = poisoned<bf16>(2 * F * D);
  cudaMemset(constant_x.data(), 0x3c, R * F * sizeof(bf16));
  cudaMemset(constant_w.data(), 0x3c, 2 * F * D * sizeof(bf16));
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  auto cublas = [&](const bf16* a, const bf16* w, int64_t n, int64_t kk) {
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status =
        cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(R), static_cast<int>(kk),
                     &alpha, w, CUDA_R_16BF, static_cast<int>(kk), a, CUDA_R_16BF, static_cast<int>(kk), &beta,
                     y.data(), CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return status == CUBLAS_STATUS_SUCCESS ? ok_status() : Status(ErrorCode::Internal, "cublasGemmEx");
  };
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{3 * D, D}, {D, D}, {512, D}, {2 * F, D}, {D, F}};
  for (const auto& [n, kk] : shapes) {
    auto weights = random_device(n * kk, 10 + n, 0.05f);
    const DeviceMatrix matrix{weights.data(), nullptr, n, kk};
    const double flops = 2.0 * R * n * kk;
    const std::string shape = std::to_string(kk) + "->" + std::to_string(n);
    report_gemm(("gemm " + shape + " " + engine.tile_name(R, n, kk)).c_str(), flops,
                [&] { return engine.gemm(x.data(), R, matrix, y.data(), nullptr, nullptr); });
    report_gemm(("cublas " + shape + " same data").c_str(), flops,
                [&] { return cublas(x.data(), weights.data(), n, kk); });
    report_gemm(("cublas " + shape + " constant data").c_str(), flops,
                [&] { return cublas(constant_x.data(), constant_w.data(), n, kk); });
  }
  cublasDestroy(handle);
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
