// The CUDA target's grouped expert GEMMs: accuracy against an fp64 reference, bitwise batch invariance of every
// kernel across row counts and expert loads, the planted fault, refusals; LS_EXPERT_TIMING=1 times the 8B's shapes.
#ifdef LS_HAVE_CUDA

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/hash.h"
#include "cuda_expert_test_util.h"
#include "cuda_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "model/load.h"

namespace ls::lfm2::gpu {
namespace {

using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::poisoned;
using cuda::testing::upload;

constexpr ExpertKernel kTensorKernels[] = {ExpertKernel::Rows16, ExpertKernel::Rows16Narrow, ExpertKernel::Rows64,
                                           ExpertKernel::Rows128};

// Pins a kernel (and optionally the planted fault) for one scope.
struct KernelPin {
  KernelPin(ExpertKernel kernel, bool fault = false) {
    pin_expert_kernel_for_test(kernel);
    set_expert_fault_for_test(fault);
  }
  ~KernelPin() {
    pin_expert_kernel_for_test(ExpertKernel::Automatic);
    set_expert_fault_for_test(false);
  }
};

using testing::random_bf16;

// How tokens pick their k distinct experts.
enum class Load { Uniform, OneHot, EmptyExperts };
const char* load_name(Load load) {
  return load == Load::Uniform ? "uniform" : load == Load::OneHot ? "one hot expert" : "empty experts";
}

// chosen [tokens, k]: distinct experts per token, in the token's slot order.
std::vector<int32_t> route(int tokens, int experts, int k, Load load, uint64_t seed) {
  std::vector<int32_t> allowed;  // EmptyExperts: only the odd experts below the last; the first and last stay empty
  for (int e = 0; e < experts; ++e)
    if (load != Load::EmptyExperts || (e % 2 == 1 && e != experts - 1)) allowed.push_back(e);
  std::vector<int32_t> chosen;
  for (int t = 0; t < tokens; ++t) {
    std::vector<int32_t> left = allowed;
    for (int j = 0; j < k; ++j) {
      size_t at = splitmix64(seed * 7919 + t * 64 + j) % left.size();
      if (load == Load::OneHot && j == 0) at = std::find(left.begin(), left.end(), 2 % experts) - left.begin();
      chosen.push_back(left[at]);
      left.erase(left.begin() + static_cast<int64_t>(at));
    }
  }
  return chosen;
}

// The forward's inputs as the MoE layer hands them over: rows grouped by expert (slots in ascending order).
struct GroupedInput {
  std::vector<int32_t> offsets;  // [experts + 1]
  std::vector<int32_t> order;    // [slots] slot index of each grouped row
  std::vector<bf16> x;           // [slots, K]
};
GroupedInput group(const std::vector<int32_t>& chosen, int experts, const std::vector<int>& row_token, int k,
                   const std::vector<bf16>& tokens_x, int64_t kdim) {
  GroupedInput in;
  in.offsets.assign(experts + 1, 0);
  const int64_t slots = static_cast<int64_t>(row_token.size()) * k;
  for (int e = 0; e < experts; ++e) {
    in.offsets[e] = static_cast<int32_t>(in.order.size());
    for (int64_t s = 0; s < slots; ++s)
      if (chosen[row_token[s / k] * k + s % k] == e) in.order.push_back(static_cast<int32_t>(s));
  }
  in.offsets[experts] = static_cast<int32_t>(in.order.size());
  in.x.resize(slots * kdim);
  for (int64_t p = 0; p < slots; ++p)
    std::memcpy(&in.x[p * kdim], &tokens_x[row_token[in.order[p] / k] * kdim], kdim * sizeof(bf16));
  return in;
}

// One test problem: a pool of tokens with their routing, the experts' weights on the device.
struct Problem {
  int experts, k, tokens;
  int64_t n, kdim;
  std::vector<bf16> x, w;  // [tokens, K], [experts, N, K]
  std::vector<int32_t> chosen;
  DeviceBuffer<bf16> w_dev;
};
Problem make_problem(int experts, int k, int tokens, int64_t n, int64_t kdim, Load load, uint64_t seed) {
  Problem p{experts, k, tokens, n, kdim, random_bf16(tokens * kdim, seed, 1.0f),
            random_bf16(experts * n * kdim, seed + 1, 0.05f), route(tokens, experts, k, load, seed + 2), {}};
  p.w_dev = upload(p.w);
  return p;
}

// Runs the forward of rows row_token with the current pin; returns y [tokens][k][N] bits (0xFFFF where not run).
std::vector<bf16> run_forward(const Problem& p, const std::vector<int>& row_token, Status* status) {
  const GroupedInput in = group(p.chosen, p.experts, row_token, p.k, p.x, p.kdim);
  const int64_t slots = static_cast<int64_t>(in.order.size());
  DeviceBuffer<bf16> x = upload(in.x);
  DeviceBuffer<int32_t> offsets = upload(in.offsets);
  DeviceBuffer<bf16> y = poisoned<bf16>(slots * p.n);
  *status = expert_gemm(x.data(), offsets.data(), p.experts, static_cast<int64_t>(row_token.size()), p.w_dev.data(),
                        p.n, p.kdim, y.data(), nullptr);
  const std::vector<bf16> got = download(y, slots * p.n);
  std::vector<bf16> out(static_cast<size_t>(p.tokens) * p.k * p.n, bf16{0xFFFF});
  for (int64_t q = 0; q < slots; ++q) {
    const int32_t s = in.order[q];
    std::memcpy(&out[(static_cast<int64_t>(row_token[s / p.k]) * p.k + s % p.k) * p.n], &got[q * p.n],
                p.n * sizeof(bf16));
  }
  return out;
}

// Every token alone (one-row forwards), the oracle of batch invariance.
std::vector<bf16> one_row_outputs(const Problem& p) {
  std::vector<bf16> all(static_cast<size_t>(p.tokens) * p.k * p.n);
  for (int t = 0; t < p.tokens; ++t) {
    Status status;
    const std::vector<bf16> y = run_forward(p, {t}, &status);
    EXPECT_TRUE(status.ok()) << status.to_string();
    std::memcpy(&all[static_cast<int64_t>(t) * p.k * p.n], &y[static_cast<int64_t>(t) * p.k * p.n],
                p.k * p.n * sizeof(bf16));
  }
  return all;
}

// Rows of a forward of m rows: tokens from a start that moves with m, so a token sits at different tile places.
std::vector<int> rows_of(int m, int tokens) {
  std::vector<int> rows(m);
  for (int r = 0; r < m; ++r) rows[r] = (m * 37 + r) % tokens;
  return rows;
}

// Outputs (token, slot) of the forward that differ bitwise from the oracle; the first one described in `first`.
int64_t count_differences(const Problem& p, const std::vector<int>& rows, const std::vector<bf16>& got,
                          const std::vector<bf16>& oracle, std::string* first) {
  int64_t differing = 0;
  for (int r = 0; r < static_cast<int>(rows.size()); ++r)
    for (int j = 0; j < p.k; ++j) {
      const int64_t at = (static_cast<int64_t>(rows[r]) * p.k + j) * p.n;
      if (std::memcmp(&got[at], &oracle[at], p.n * sizeof(bf16)) == 0) continue;
      if (differing++ == 0)
        *first = "row " + std::to_string(r) + " (token " + std::to_string(rows[r]) + ") slot " + std::to_string(j) +
                 " expert " + std::to_string(p.chosen[rows[r] * p.k + j]);
    }
  return differing;
}

TEST(CudaExperts, EveryKernelMatchesAnFp64ReferenceWithinBf16Rounding) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Shape { int64_t n, kdim; };
  for (const Shape shape : {Shape{200, 2056}, Shape{131, 72}, Shape{64, 1792}}) {
    Problem p = make_problem(8, 3, 40, shape.n, shape.kdim, Load::Uniform, 11 + shape.kdim);
    const std::vector<int> rows = rows_of(40, p.tokens);
    for (ExpertKernel kernel : {ExpertKernel::Scalar, ExpertKernel::Rows16, ExpertKernel::Rows16Narrow, ExpertKernel::Rows64,
                                ExpertKernel::Rows128}) {
      KernelPin pin(kernel);
      Status status;
      const std::vector<bf16> y = run_forward(p, rows, &status);
      ASSERT_TRUE(status.ok()) << status.to_string();
      double err2 = 0, ref2 = 0;
      int bad = 0;
      for (int t = 0; t < p.tokens; ++t)
        for (int j = 0; j < p.k; ++j) {
          const int e = p.chosen[t * p.k + j];
          for (int64_t c = 0; c < p.n; ++c) {
            double ref = 0, magnitude = 0;
            for (int64_t q = 0; q < p.kdim; ++q) {
              const double prod = static_cast<double>(bf16_to_float(p.x[t * p.kdim + q])) *
                                  bf16_to_float(p.w[(e * p.n + c) * p.kdim + q]);
              ref += prod;
              magnitude += std::fabs(prod);
            }
            const double got = bf16_to_float(y[(static_cast<int64_t>(t) * p.k + j) * p.n + c]);
            err2 += (got - ref) * (got - ref);
            ref2 += ref * ref;
            // Half a bf16 ulp for the one rounding, plus fp32 accumulation over K.
            if (!(std::fabs(got - ref) <= std::fabs(ref) / 256.0 + 1e-4 * magnitude)) ++bad;
          }
        }
      EXPECT_EQ(bad, 0) << expert_kernel_name(kernel) << " N " << p.n << " K " << p.kdim;
      EXPECT_LT(std::sqrt(err2 / ref2), 4e-3) << expert_kernel_name(kernel) << " N " << p.n << " K " << p.kdim;
    }
  }
}

// The batch-invariance contract: a token's expert outputs are the bits of its one-row forward at every row count,
// under every tensor-core kernel and expert load; the 1-row oracle is the automatic tensor-core pick (Rows16).
TEST(CudaExperts, EveryRowGetsItsOneRowBitsAtEveryRowCountKernelAndExpertLoad) {
  LS_SKIP_WITHOUT_DEVICE();
  std::vector<int> counts;
  for (int m = 1; m <= 16; ++m) counts.push_back(m);
  for (int m : {64, 256, 2048}) counts.push_back(m);
  struct Shape { int64_t n, kdim; };
  for (const Shape shape : {Shape{200, 2056}, Shape{66, 40}}) {
    for (Load load : {Load::Uniform, Load::OneHot, Load::EmptyExperts}) {
      const Problem p = make_problem(8, 3, 2048, shape.n, shape.kdim, load, 100 + static_cast<int>(load));
      std::vector<bf16> oracle;
      {
        KernelPin pin(ExpertKernel::Rows16);
        oracle = one_row_outputs(p);
      }
      for (ExpertKernel kernel : kTensorKernels) {
        KernelPin pin(kernel);
        for (int m : counts) {
          const std::vector<int> rows = rows_of(m, p.tokens);
          Status status;
          const std::vector<bf16> y = run_forward(p, rows, &status);
          ASSERT_TRUE(status.ok()) << status.to_string();
          std::string first;
          EXPECT_EQ(count_differences(p, rows, y, oracle, &first), 0)
              << expert_kernel_name(kernel) << ", " << load_name(load) << ", m " << m << ", N " << p.n << " K "
              << p.kdim << ": first " << first << " differs from its one-row forward";
        }
      }
    }
  }
}

TEST(CudaExperts, TheScalarKernelGivesItsOneRowBitsAtEveryRowCount) {
  LS_SKIP_WITHOUT_DEVICE();
  KernelPin pin(ExpertKernel::Scalar);
  const Problem p = make_problem(8, 3, 300, 130, 264, Load::OneHot, 7);
  const std::vector<bf16> oracle = one_row_outputs(p);
  for (int m : {2, 7, 16, 17, 64, 300}) {
    const std::vector<int> rows = rows_of(m, p.tokens);
    Status status;
    const std::vector<bf16> y = run_forward(p, rows, &status);
    ASSERT_TRUE(status.ok()) << status.to_string();
    std::string first;
    EXPECT_EQ(count_differences(p, rows, y, oracle, &first), 0) << "m " << m << ": first " << first;
  }
}

// K tiles walked backwards whenever more than one row is possible: every multi-row forward must turn red. One
// reversed sum moves about 0.15% of bf16 outputs, so rows are 1024 wide (a row differs with ~80% odds).
TEST(CudaExperts, APlantedOutOfOrderKChunkTurnsTheInvarianceCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  const Problem p = make_problem(8, 3, 256, 1024, 2048, Load::Uniform, 21);
  std::vector<bf16> oracle;
  {
    KernelPin pin(ExpertKernel::Rows16);
    oracle = one_row_outputs(p);
  }
  for (ExpertKernel kernel : kTensorKernels) {
    KernelPin pin(kernel, /*fault=*/true);
    for (int m : {4, 16, 256}) {
      const std::vector<int> rows = rows_of(m, p.tokens);
      Status status;
      const std::vector<bf16> y = run_forward(p, rows, &status);
      ASSERT_TRUE(status.ok()) << status.to_string();
      std::string first;
      const int64_t differing = count_differences(p, rows, y, oracle, &first);
      EXPECT_GT(differing, 0) << expert_kernel_name(kernel) << " m " << m << " stayed green under the fault";
      std::printf("fault under %s, m %d: %lld of %d outputs differ, first %s\n", expert_kernel_name(kernel), m,
                  static_cast<long long>(differing), m * p.k, first.c_str());
    }
  }
}

TEST(CudaExperts, RefusesARaggedKAndTooManyExpertsByNumber) {
  const Status ragged = expert_gemm(nullptr, nullptr, 4, 8, nullptr, 64, 100, nullptr, nullptr);
  EXPECT_EQ(ragged.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(ragged.message().find("100"), std::string::npos) << ragged.to_string();
  KernelPin pin(ExpertKernel::Rows64);
  const Status many = expert_gemm(nullptr, nullptr, 5000, 8, nullptr, 64, 64, nullptr, nullptr);
  EXPECT_EQ(many.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(many.message().find("5000"), std::string::npos) << many.to_string();
}

// The golden MoE model (K 128 / 64: the scalar kernel by default) run with the experts pinned to the scalar kernel,
// then to the 16x64 tensor-core tile: the other order may move router picks on near ties only, at most 2% of them
// (the golden test's bar); prints how far the logits moved (batch B's golden failure: which change moved it).
TEST(CudaExperts, PinnedTensorCoreExpertsMoveAtMostTwoPercentOfTheGoldenMoeRouterPicks) {
  LS_SKIP_WITHOUT_DEVICE();
  std::string dir = std::string(LS_SOURCE_DIR) + "/tests/golden/lfm2_moe";
  if (!std::filesystem::exists(dir)) dir = std::filesystem::current_path().string() + "/tests/golden/lfm2_moe";
  std::ifstream file(dir + "/golden.json");
  if (!file) GTEST_SKIP() << "no golden MoE model at " << dir;
  const nlohmann::json meta = nlohmann::json::parse(file);
  LoadOptions options;
  options.device = Device::Cuda;
  options.max_rows = 256;
  options.max_streams = 64;
  options.kv_pages = 2048;
  options.kv_page_size = 16;
  options.exact_width_probe = 16;
  auto loaded = load_target(dir, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  auto* target = dynamic_cast<CudaTarget*>(loaded->get());
  ASSERT_NE(target, nullptr);
  const int64_t V = target->facts().vocab_size;
  std::vector<int32_t> picks[2];
  std::vector<float> logits[2];
  StreamId stream = 1;
  for (int run = 0; run < 2; ++run) {
    KernelPin pin(run == 0 ? ExpertKernel::Scalar : ExpertKernel::Rows16);
    target->set_expert_trace(&picks[run]);
    for (const auto& c : meta["cases"]) {
      const std::vector<int32_t> prompt = c["prompt"];
      Window window;
      window.stream = stream;
      window.tokens = prompt;
      window.want_logits = true;
      Result<Verified> v = target->forward(std::span<const Window>(&window, 1));
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      logits[run].insert(logits[run].end(), v->logits.begin(), v->logits.begin() + static_cast<int64_t>(prompt.size()) * V);
      ASSERT_TRUE(target->commit(stream, static_cast<int>(prompt.size())).ok());
      ++stream;
    }
    target->set_expert_trace(nullptr);
  }
  ASSERT_EQ(picks[0].size(), picks[1].size());
  ASSERT_EQ(logits[0].size(), logits[1].size());
  int differ = 0;
  for (size_t i = 0; i < picks[0].size(); ++i) differ += picks[0][i] != picks[1][i];
  double worst = 0;
  for (size_t row = 0; row * V < logits[0].size(); ++row) {
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < V; ++i) {
      diff = std::max(diff, std::fabs(double(logits[1][row * V + i]) - logits[0][row * V + i]));
      scale = std::max(scale, std::fabs(double(logits[0][row * V + i])));
    }
    worst = std::max(worst, diff / scale);
  }
  std::printf("[golden moe] tensor-core vs scalar experts: %d of %zu router picks differ; worst row's logits moved "
              "%.3g relative\n", differ, picks[0].size(), worst);
  EXPECT_LE(differ * 50, static_cast<int>(picks[0].size())) << "router picks moved by the expert kernel: " << differ;
}

// ---- Timing (LS_EXPERT_TIMING=1; never in the default suite) ----

// Mean device time of `launch(i)` over `iters` calls, after one warm call per pattern (ms).
template <class F>
double time_ms(int iters, int patterns, F&& launch) {
  for (int i = 0; i < patterns; ++i) launch(i);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) launch(i % patterns);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

// Every kernel and cuBLAS (one cublasGemmEx per routed expert, counts known on the host) at the LFM2-8B-A1B expert
// shapes (32 experts, top-4; gate|up 2048 -> 3584, down 1792 -> 2048) for 1..2048 rows of random routing; small row
// counts cycle 8 routings so the weights come from memory, not L2. The tensor-core kernels' outputs must agree.
TEST(CudaExpertsTiming, TimesEveryKernelAtThe8BShapesWhenAsked) {
  LS_SKIP_WITHOUT_DEVICE();
  if (std::getenv("LS_EXPERT_TIMING") == nullptr) GTEST_SKIP() << "set LS_EXPERT_TIMING=1 to time";
  constexpr int E = 32, k = 4, kMaxRows = 2048, kMoeLayers = 22;
  const size_t copy_bytes = size_t{1} << 30;
  DeviceBuffer<uint8_t> from, to;
  ASSERT_TRUE(from.allocate(copy_bytes).ok());
  ASSERT_TRUE(to.allocate(copy_bytes).ok());
  const double copy_ms = time_ms(5, 1, [&](int) { cudaMemcpyAsync(to.data(), from.data(), copy_bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e6);
  std::printf("device copy %.0f GB/s (read + write)\n", copy_gbs);
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  struct Shape { const char* name; int64_t n, kdim; };
  const ExpertKernel kernels[] = {ExpertKernel::Scalar, ExpertKernel::Rows16, ExpertKernel::Rows16Narrow,
                                  ExpertKernel::Rows64, ExpertKernel::Rows128};
  constexpr int kKernels = 5;
  std::printf("%-8s %5s %-18s %10s %8s %7s %8s %11s %9s\n", "shape", "rows", "kernel", "us", "GB/s", "%copy", "TFLOP/s",
              "cuBLAS us", "%cuBLAS");
  double prefill_ms[kKernels + 1] = {};  // per kernel, then cuBLAS: gate|up + down at 2048 rows
  for (const Shape shape : {Shape{"gate_up", 3584, 2048}, Shape{"down", 2048, 1792}}) {
    DeviceBuffer<bf16> w, x, y;
    const size_t w_count = static_cast<size_t>(E) * shape.n * shape.kdim;
    ASSERT_TRUE(w.allocate(w_count).ok());
    const std::vector<bf16> chunk = random_bf16(size_t{1} << 23, 5, 0.05f);
    for (size_t at = 0; at < w_count; at += chunk.size())
      cudaMemcpy(w.data() + at, chunk.data(), std::min(chunk.size(), w_count - at) * sizeof(bf16), cudaMemcpyHostToDevice);
    x = upload(random_bf16(static_cast<size_t>(kMaxRows) * k * shape.kdim, 6, 1.0f));
    ASSERT_TRUE(y.allocate(static_cast<size_t>(kMaxRows) * k * shape.n).ok());
    for (int rows : {1, 4, 16, 64, 128, 256, 2048}) {
      const int patterns = rows <= 128 ? 8 : 1;
      std::vector<std::vector<int32_t>> offsets(patterns);
      std::vector<DeviceBuffer<int32_t>> offsets_dev;
      double weight_bytes = 0;
      for (int q = 0; q < patterns; ++q) {
        const std::vector<int32_t> chosen = route(rows, E, k, Load::Uniform, 1000 + rows * 10 + q);
        std::vector<int32_t> counts(E, 0);
        for (int32_t e : chosen) ++counts[e];
        offsets[q].assign(E + 1, 0);
        for (int e = 0; e < E; ++e) {
          offsets[q][e + 1] = offsets[q][e] + counts[e];
          weight_bytes += counts[e] > 0 ? 2.0 * shape.n * shape.kdim / patterns : 0.0;
        }
        offsets_dev.push_back(upload(offsets[q]));
      }
      const double flops = 2.0 * rows * k * shape.n * shape.kdim;
      const int iters = rows >= 256 ? 4 : 40;
      const double cublas_ms = time_ms(iters, patterns, [&](int q) {
        const float alpha = 1.0f, beta = 0.0f;
        for (int e = 0; e < E; ++e) {
          const int count = offsets[q][e + 1] - offsets[q][e];
          if (count == 0) continue;
          cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(shape.n), count, static_cast<int>(shape.kdim),
                       &alpha, w.data() + static_cast<int64_t>(e) * shape.n * shape.kdim, CUDA_R_16BF,
                       static_cast<int>(shape.kdim), x.data() + static_cast<int64_t>(offsets[q][e]) * shape.kdim,
                       CUDA_R_16BF, static_cast<int>(shape.kdim), &beta,
                       y.data() + static_cast<int64_t>(offsets[q][e]) * shape.n, CUDA_R_16BF, static_cast<int>(shape.n),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        }
      });
      if (rows == kMaxRows) prefill_ms[kKernels] += cublas_ms;
      std::vector<bf16> first_tensor_output;
      for (int ki = 0; ki < kKernels; ++ki) {
        KernelPin pin(kernels[ki]);
        Status status;
        const double ms = time_ms(kernels[ki] == ExpertKernel::Scalar && rows >= 256 ? 2 : iters, patterns, [&](int q) {
          Status launched =
              expert_gemm(x.data(), offsets_dev[q].data(), E, rows, w.data(), shape.n, shape.kdim, y.data(), nullptr);
          if (!launched.ok()) status = launched;
        });
        ASSERT_TRUE(status.ok()) << status.to_string();
        if (rows == kMaxRows) prefill_ms[ki] += ms;
        std::printf("%-8s %5d %-18s %10.1f %8.0f %6.0f%% %8.1f %11.1f %8.0f%%\n", shape.name, rows,
                    expert_kernel_name(kernels[ki]), ms * 1e3, weight_bytes / (ms * 1e6),
                    100.0 * weight_bytes / (ms * 1e6) / copy_gbs, flops / (ms * 1e9), cublas_ms * 1e3,
                    100.0 * cublas_ms / ms);
        if (kernels[ki] == ExpertKernel::Scalar) continue;
        // The last launch ran the last pattern: every tensor-core kernel must leave the same bits.
        const size_t outputs = static_cast<size_t>(offsets[patterns - 1][E]) * shape.n;
        std::vector<bf16> got = download(y, outputs);
        if (first_tensor_output.empty()) {
          first_tensor_output = got;
        } else {
          EXPECT_EQ(std::memcmp(got.data(), first_tensor_output.data(), outputs * sizeof(bf16)), 0)
              << shape.name << " rows " << rows << ": " << expert_kernel_name(kernels[ki]) << " differs from Rows16";
        }
        cudaMemset(y.data(), 0xFF, y.bytes());
      }
    }
  }
  cublasDestroy(handle);
  std::printf("8B prefill 2048, experts of %d MoE layers (gate|up + down):", kMoeLayers);
  for (int ki = 0; ki < kKernels; ++ki) std::printf(" %s %.1f ms,", expert_kernel_name(kernels[ki]), kMoeLayers * prefill_ms[ki]);
  std::printf(" cuBLAS %.1f ms\n", kMoeLayers * prefill_ms[kKernels]);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
