// The routed experts of a MoE layer streamed (expert_ffn: the decode expert kernels, one warp's cp.async pipeline per
// (expert row chunk, column group) item, gather in the gate|up row loads, SwiGLU in registers, the down launch staging
// its weights early; and the lean kernels) against the four-launch path (gather, gate|up GEMM, swiglu, down GEMM):
// bitwise at row counts 1..256; every token's outputs equal to its one-row run; a planted K-order fault in each path
// turns the check red; the timing of every path when asked.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/hash.h"
#include "compute/cuda/kernels.h"
#include "cuda_expert_test_util.h"
#include "cuda_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {
namespace {

using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::poisoned;
using cuda::testing::upload;
using testing::Layer;
using testing::make_layer;
using testing::random_bf16;

// One forward's outputs: per (token, slot) the down row [D] (slot order), and act [slots, I] in plan order.
struct Outputs {
  std::vector<bf16> by_slot;  // [rows, k, D]
  std::vector<bf16> act;      // [slots, I]
  Status status;
};

// Runs the experts of `rows` tokens (x rows of seed `x_seed` + token, routing from the token) on the current kernel
// pin: four launches called one by one, or expert_ffn with `path` pinned.
Outputs run(const Layer& layer, const std::vector<int>& tokens, ExpertFfnPath path) {
  const int64_t rows = static_cast<int64_t>(tokens.size()), slots = rows * layer.k, D = layer.d, I = layer.i;
  const testing::RoutedTokens routed = testing::route_tokens(layer, tokens);
  DeviceBuffer<bf16> x_dev = upload(routed.x);
  DeviceBuffer<int32_t> chosen_dev = upload(routed.chosen);
  DeviceBuffer<int32_t> offsets = poisoned<int32_t>(layer.experts + 1), order = poisoned<int32_t>(slots);
  DeviceBuffer<bf16> gathered = poisoned<bf16>(slots * D), gate_up = poisoned<bf16>(slots * 2 * I);
  DeviceBuffer<bf16> act = poisoned<bf16>(slots * I), out = poisoned<bf16>(slots * D);
  Outputs result;
  result.status = plan_experts(chosen_dev.data(), slots, layer.experts, offsets.data(), order.data(), nullptr);
  if (!result.status.ok()) return result;
  if (path != ExpertFfnPath::FourLaunches) {
    pin_expert_ffn_path_for_test(path);
    ExpertFfn f = testing::layer_ffn(layer, x_dev.data(), rows, offsets.data(), order.data(), act.data(), out.data());
    f.gathered = gathered.data();
    f.gate_up = gate_up.data();
    result.status = expert_ffn(f, nullptr);
    pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
  } else {
    Status s = gather_rows(x_dev.data(), order.data(), slots, static_cast<int>(D), layer.k, gathered.data(), nullptr);
    if (s.ok())
      s = expert_gemm(gathered.data(), offsets.data(), layer.experts, rows, layer.gate_up.data(), 2 * I, D,
                      gate_up.data(), nullptr);
    if (s.ok())
      s = cuda::swiglu(gate_up.data(), gate_up.data() + I, slots, static_cast<int>(I), 2 * I, act.data(), nullptr);
    if (s.ok())
      s = expert_gemm(act.data(), offsets.data(), layer.experts, rows, layer.down.data(), D, I, out.data(), nullptr);
    result.status = s;
  }
  if (!result.status.ok()) return result;
  const std::vector<int32_t> order_host = download(order, slots);
  const std::vector<bf16> got = download(out, slots * D);
  result.act = download(act, slots * I);
  result.by_slot.assign(slots * D, bf16{0xFFFF});
  for (int64_t p = 0; p < slots; ++p)
    std::memcpy(&result.by_slot[order_host[p] * D], &got[p * D], D * sizeof(bf16));
  return result;
}

// Pins an expert kernel (and optionally the planted fault) for one scope.
struct Pin {
  explicit Pin(ExpertKernel kernel, bool fault = false) {
    pin_expert_kernel_for_test(kernel);
    set_expert_fault_for_test(fault);
  }
  ~Pin() {
    pin_expert_kernel_for_test(ExpertKernel::Automatic);
    pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
    set_expert_fault_for_test(false);
  }
};

std::vector<int> tokens_of(int m) {
  std::vector<int> t(m);
  for (int r = 0; r < m; ++r) t[r] = (m * 7 + r * 3) % 300;
  return t;
}

int differing_rows(const std::vector<bf16>& a, const std::vector<bf16>& b, int64_t width) {
  int differ = 0;
  for (size_t r = 0; r * width < a.size(); ++r)
    differ += std::memcmp(&a[r * width], &b[r * width], width * sizeof(bf16)) != 0;
  return differ;
}

constexpr ExpertFfnPath kStreamed[] = {ExpertFfnPath::Streamed, ExpertFfnPath::StreamedLean};

TEST(CudaExpertFfn, TheStreamedExpertsGiveTheFourLaunchBitsAtRowCounts1To256) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Shape { int experts, k; int64_t d, i; };
  // K tails (D 264, I 200 not multiples of 64), a down N (264) that ends inside a 16-column item, experts hot
  // enough for several row chunks of 8, and a wider shape
  for (const Shape shape : {Shape{8, 2, 264, 200}, Shape{16, 4, 512, 384}}) {
    const Layer layer = make_layer(shape.experts, shape.k, shape.d, shape.i, 15 + shape.d);
    const Pin pin(ExpertKernel::Rows16);  // the four-launch reference (every tile gives its bits)
    for (ExpertFfnPath path : kStreamed) {
      int differ_out = 0, differ_act = 0, slots = 0;
      for (int m : {1, 2, 5, 8, 16, 64, 256}) {
        const Outputs streamed = run(layer, tokens_of(m), path),
                      plain = run(layer, tokens_of(m), ExpertFfnPath::FourLaunches);
        ASSERT_TRUE(streamed.status.ok()) << streamed.status.to_string();
        ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
        differ_out += differing_rows(streamed.by_slot, plain.by_slot, shape.d);
        differ_act += differing_rows(streamed.act, plain.act, shape.i);
        slots += m * shape.k;
      }
      EXPECT_EQ(differ_out, 0) << expert_ffn_path_name(path) << " D " << shape.d << ": of " << slots << " slots";
      EXPECT_EQ(differ_act, 0) << expert_ffn_path_name(path) << " D " << shape.d << ": of " << slots << " slots";
    }
  }
}

TEST(CudaExpertFfn, EveryTokenGetsItsOneRowBitsFromTheStreamedExperts) {
  LS_SKIP_WITHOUT_DEVICE();
  const Layer layer = make_layer(8, 2, 264, 200, 78);
  for (ExpertFfnPath path : kStreamed) {
    int differ = 0, checked = 0;
    for (int m : {4, 8, 64}) {
      const std::vector<int> tokens = tokens_of(m);
      const Outputs many = run(layer, tokens, path);
      ASSERT_TRUE(many.status.ok()) << many.status.to_string();
      for (int r = 0; r < m; r += (m > 8 ? 7 : 1)) {
        const Outputs one = run(layer, {tokens[r]}, path);
        ASSERT_TRUE(one.status.ok()) << one.status.to_string();
        differ += std::memcmp(&many.by_slot[r * layer.k * layer.d], one.by_slot.data(),
                              layer.k * layer.d * sizeof(bf16)) != 0;
        ++checked;
      }
    }
    EXPECT_EQ(differ, 0) << expert_ffn_path_name(path) << ": tokens differing from their one-row run, of " << checked;
  }
}

TEST(CudaExpertFfn, APlantedOutOfOrderKWalkInTheStreamedExpertsTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  const Layer layer = make_layer(8, 2, 1024, 512, 92);
  for (ExpertFfnPath path : kStreamed) {
    Outputs plain;
    {
      const Pin pin(ExpertKernel::Rows16);
      plain = run(layer, tokens_of(4), ExpertFfnPath::FourLaunches);
    }
    const Pin faulty(ExpertKernel::Rows16, true);
    const Outputs streamed = run(layer, tokens_of(4), path);
    ASSERT_TRUE(streamed.status.ok()) << streamed.status.to_string();
    EXPECT_GT(differing_rows(streamed.by_slot, plain.by_slot, layer.d), 0)
        << expert_ffn_path_name(path) << ": the reversed K walk went unseen";
  }
}

// Timing (LS_EXPERT_TIMING=1; never in the default suite): the routed experts of one LFM2-8B-A1B MoE layer (32
// experts, top-4, D 2048, I 1792; constant weights: the values do not change the time) at 1..64 rows on
// every path (each after its plan launch, as in the target), 8 routings cycled so the weights come from memory;
// GB/s = distinct routed experts' bytes / time of the fastest path.
TEST(CudaExpertFfnTiming, TimesEveryExpertPathAtThe8BShapesWhenAsked) {
  LS_SKIP_WITHOUT_DEVICE();
  if (std::getenv("LS_EXPERT_TIMING") == nullptr) GTEST_SKIP() << "set LS_EXPERT_TIMING=1 to time";
  constexpr int E = 32, k = 4, kPatterns = 8;
  constexpr int64_t D = 2048, I = 1792, kMaxRows = 64;
  Layer layer{E, k, D, I, {}, {}};
  ASSERT_TRUE(layer.gate_up.allocate(E * 2 * I * D).ok());
  ASSERT_TRUE(layer.down.allocate(E * D * I).ok());
  ASSERT_EQ(cudaMemset(layer.gate_up.data(), 0x3C, layer.gate_up.bytes()), cudaSuccess);  // bf16 0x3C3C = 0.0115
  ASSERT_EQ(cudaMemset(layer.down.data(), 0x3C, layer.down.bytes()), cudaSuccess);
  DeviceBuffer<bf16> x = upload(random_bf16(kMaxRows * D, 3, 1.0f));
  DeviceBuffer<bf16> gathered, gate_up, act, out;
  ASSERT_TRUE(gathered.allocate(kMaxRows * k * D).ok() && gate_up.allocate(kMaxRows * k * 2 * I).ok() &&
              act.allocate(kMaxRows * k * I).ok() && out.allocate(kMaxRows * k * D).ok());
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  constexpr ExpertFfnPath kPaths[] = {ExpertFfnPath::FourLaunches, ExpertFfnPath::Streamed, ExpertFfnPath::StreamedLean};
  constexpr int kPathCount = sizeof(kPaths) / sizeof(kPaths[0]);
  std::printf("[expert ffn timing] rows, routed experts, us on: four launches, streamed, streamed lean; GB/s of the "
              "fastest\n");
  for (int64_t rows : {1, 4, 8, 16, 32, 64}) {
    std::vector<DeviceBuffer<int32_t>> offsets(kPatterns), order(kPatterns), chosen_dev(kPatterns);
    double distinct = 0;
    for (int pattern = 0; pattern < kPatterns; ++pattern) {
      std::vector<int32_t> chosen;
      std::vector<char> used(E, 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int j = 0; j < k; ++j) {
          int e = static_cast<int>(splitmix64(pattern * 1000 + r * 16 + j) % E);
          while (std::find(chosen.end() - j, chosen.end(), e) != chosen.end()) e = (e + 1) % E;
          chosen.push_back(e);
          used[e] = 1;
        }
      for (char u : used) distinct += u;
      chosen_dev[pattern] = upload(chosen);
      offsets[pattern] = poisoned<int32_t>(E + 1);
      order[pattern] = poisoned<int32_t>(rows * k);
      ASSERT_TRUE(plan_experts(chosen_dev[pattern].data(), rows * k, E, offsets[pattern].data(),
                               order[pattern].data(), nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    double us[kPathCount], best = 1e30;
    for (int v = 0; v < kPathCount; ++v) {
      pin_expert_ffn_path_for_test(kPaths[v]);
      auto launch = [&](int pattern) {
        const int64_t slots = rows * k;
        // the plan right before, as in the target (the expert launches follow it programmatically)
        (void)plan_experts(chosen_dev[pattern].data(), slots, E, offsets[pattern].data(), order[pattern].data(),
                           nullptr);
        ExpertFfn f = testing::layer_ffn(layer, x.data(), rows, offsets[pattern].data(), order[pattern].data(),
                                         act.data(), out.data());
        f.gathered = gathered.data();
        f.gate_up = gate_up.data();
        EXPECT_TRUE(expert_ffn(f, nullptr).ok());
      };
      for (int pattern = 0; pattern < kPatterns; ++pattern) launch(pattern);
      constexpr int kIters = 80;
      cudaEventRecord(start);
      for (int i = 0; i < kIters; ++i) launch(i % kPatterns);
      cudaEventRecord(stop);
      ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      us[v] = 1000.0 * ms / kIters;
      best = std::min(best, us[v]);
    }
    pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
    const double bytes = distinct / kPatterns * 3.0 * I * D * 2.0;
    std::printf("[expert ffn timing] %3lld rows  %5.1f experts ", static_cast<long long>(rows), distinct / kPatterns);
    for (int v = 0; v < kPathCount; ++v) std::printf(" %8.1f", us[v]);
    std::printf(" us  %6.0f GB/s\n", bytes / (best * 1e3));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
