// The combine inside the streamed down launch (expert_ffn with y, weights and tickets: the last warp done with a
// column group weighs and sums each token's slots in slot order) against the streamed experts followed by the
// combine_experts launch: bitwise, at 1..32 rows, with slots the plan left out; every token's row equal to its one-row
// run; the tickets left at zero; a planted K-order fault turns it red; the timing of both when asked. Also the lean
// down launch combining per column group (moe7).
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/hash.h"
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

// Which slots the plan leaves out (their expert -1, as routing gives for NaN scores).
enum class Drop { None, SomeSlots, Every };

struct Combined {
  std::vector<bf16> y;        // [rows, D]
  std::vector<int32_t> tickets;
  bool combined_in_down = false;
  Status status;
};

// The experts of `tokens` (x and routing from each token) on the streamed path, then y either from the down launch
// (in_down) or from combine_experts after it.
Combined run(const Layer& layer, const std::vector<int>& tokens, bool in_down, Drop drop,
             ExpertFfnPath path = ExpertFfnPath::Streamed) {
  const int64_t rows = static_cast<int64_t>(tokens.size()), slots = rows * layer.k, D = layer.d, I = layer.i;
  const testing::RoutedTokens routed = testing::route_tokens(layer, tokens, [&](int t, int j) {
    return drop == Drop::Every || (drop == Drop::SomeSlots && t % 4 == 1 && j == layer.k - 1);
  });
  DeviceBuffer<bf16> x_dev = upload(routed.x);
  DeviceBuffer<int32_t> chosen_dev = upload(routed.chosen);
  DeviceBuffer<float> weights_dev = upload(routed.weights);
  DeviceBuffer<int32_t> offsets = poisoned<int32_t>(layer.experts + 1), order = poisoned<int32_t>(slots);
  DeviceBuffer<bf16> act = poisoned<bf16>(slots * I), out = poisoned<bf16>(slots * D), y = poisoned<bf16>(rows * D);
  DeviceBuffer<int32_t> tickets;
  Combined result;
  result.status = tickets.allocate(expert_combine_tickets(D));
  if (!result.status.ok()) return result;
  cudaMemset(tickets.data(), 0, tickets.bytes());
  result.status = plan_experts(chosen_dev.data(), slots, layer.experts, offsets.data(), order.data(), nullptr);
  if (!result.status.ok()) return result;
  pin_expert_ffn_path_for_test(path);
  ExpertFfn f = testing::layer_ffn(layer, x_dev.data(), rows, offsets.data(), order.data(), act.data(), out.data());
  if (in_down) {
    f.weights = weights_dev.data();
    f.y = y.data();
    f.tickets = tickets.data();
  }
  result.combined_in_down = expert_ffn_combines(f);
  result.status = expert_ffn(f, nullptr);
  pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
  if (result.status.ok() && !in_down)
    result.status = combine_experts(out.data(), offsets.data(), layer.experts, order.data(), weights_dev.data(), rows,
                                    layer.k, static_cast<int>(D), y.data(), nullptr);
  if (!result.status.ok()) return result;
  result.y = download(y, rows * D);
  result.tickets = download(tickets, tickets.size());
  return result;
}

struct FaultScope {
  explicit FaultScope(bool on) { set_expert_fault_for_test(on); }
  ~FaultScope() { set_expert_fault_for_test(false); }
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

int nonzero(const std::vector<int32_t>& v) {
  int n = 0;
  for (int32_t x : v) n += x != 0;
  return n;
}

TEST(CudaExpertCombine, TheCombineInTheDownLaunchGivesTheCombineLaunchBitsAtRowCounts1To32) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Shape { int experts, k; int64_t d, i; };
  // D 264: the last column group is 8 wide (264 = 16 x 16 + 8); K tails on both GEMMs; a wider shape with k 4
  for (const Shape shape : {Shape{8, 2, 264, 200}, Shape{16, 4, 512, 384}}) {
    const Layer layer = make_layer(shape.experts, shape.k, shape.d, shape.i, 25 + shape.d);
    for (const Drop drop : {Drop::None, Drop::SomeSlots, Drop::Every}) {
      int differ = 0, rows_checked = 0, tickets_left = 0;
      for (int m : {1, 2, 3, 5, 8, 16, 32}) {
        // the combine in the streamed down launch vs the combine launch
        const Combined fused = run(layer, tokens_of(m), true, drop, ExpertFfnPath::Streamed),
                       plain = run(layer, tokens_of(m), false, drop);
        ASSERT_TRUE(fused.status.ok()) << fused.status.to_string();
        ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
        ASSERT_TRUE(fused.combined_in_down) << "rows " << m;
        ASSERT_FALSE(plain.combined_in_down);
        differ += differing_rows(fused.y, plain.y, shape.d);
        tickets_left += nonzero(fused.tickets);
        rows_checked += m;
      }
      EXPECT_EQ(differ, 0) << "D " << shape.d << " drop " << static_cast<int>(drop) << ": of " << rows_checked;
      EXPECT_EQ(tickets_left, 0) << "D " << shape.d << ": tickets not back at zero";
    }
  }
}

TEST(CudaExpertCombine, EveryTokenGetsItsOneRowBitsFromTheCombineInTheDownLaunch) {
  LS_SKIP_WITHOUT_DEVICE();
  const Layer layer = make_layer(16, 4, 512, 384, 81);
  int differ = 0, checked = 0;
  for (int m : {4, 16, 32}) {
    const std::vector<int> tokens = tokens_of(m);
    const Combined many = run(layer, tokens, true, Drop::SomeSlots);
    ASSERT_TRUE(many.status.ok()) << many.status.to_string();
    for (int r = 0; r < m; r += (m > 4 ? 5 : 1)) {
      const Combined one = run(layer, {tokens[r]}, true, Drop::SomeSlots);
      ASSERT_TRUE(one.status.ok()) << one.status.to_string();
      differ += std::memcmp(&many.y[r * layer.d], one.y.data(), layer.d * sizeof(bf16)) != 0;
      ++checked;
    }
  }
  EXPECT_EQ(differ, 0) << "tokens differing from their one-row run, of " << checked;
}

TEST(CudaExpertCombine, APlantedOutOfOrderKWalkWithTheCombineInTheDownLaunchTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  const Layer layer = make_layer(8, 2, 1024, 512, 93);
  const Combined plain = run(layer, tokens_of(4), false, Drop::None);
  ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
  const FaultScope fault(true);
  const Combined fused = run(layer, tokens_of(4), true, Drop::None);
  ASSERT_TRUE(fused.status.ok()) << fused.status.to_string();
  EXPECT_GT(differing_rows(fused.y, plain.y, layer.d), 0) << "the reversed K walk went unseen";
}

// moe7: the lean down launch combining (a CTA per column group runs the group's row chunks, then sums each token's
// slots over the group's columns in slot order): the combine launch's bits where it combines (a row chunk a warp),
// with slots left out of the plan, on poisoned y; each token's row its one-row run; the planted K fault red.
TEST(CudaExpertCombine, TheLeanDownLaunchCombiningItsColumnGroupsGivesTheCombineLaunchBits) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Shape { int experts, k; int64_t d, i; };
  for (const Shape shape : {Shape{8, 2, 264, 200}, Shape{16, 4, 512, 384}, Shape{6, 1, 136, 72}}) {
    const Layer layer = make_layer(shape.experts, shape.k, shape.d, shape.i, 35 + shape.d);
    for (const Drop drop : {Drop::None, Drop::SomeSlots, Drop::Every}) {
      int differ = 0, rows_checked = 0;
      for (int m = 1; m * shape.k <= 4; ++m) {  // the rows whose row chunks fit one a warp
        const Combined fused = run(layer, tokens_of(m), true, drop, ExpertFfnPath::StreamedLeanCombine),
                       plain = run(layer, tokens_of(m), false, drop);
        ASSERT_TRUE(fused.status.ok()) << fused.status.to_string();
        ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
        ASSERT_TRUE(fused.combined_in_down) << "rows " << m << ", k " << shape.k;
        differ += differing_rows(fused.y, plain.y, shape.d);
        rows_checked += m;
      }
      EXPECT_EQ(differ, 0) << "D " << shape.d << " drop " << static_cast<int>(drop) << ": of " << rows_checked;
    }
    // one row chunk a warp at most: more rows leave the combine to the caller
    const Combined wide = run(layer, tokens_of(4 / shape.k + 1), true, Drop::None, ExpertFfnPath::StreamedLeanCombine);
    ASSERT_TRUE(wide.status.ok()) << wide.status.to_string();
    EXPECT_FALSE(wide.combined_in_down) << "D " << shape.d;
  }
  // each token of a 4-row forward (k 1: four row chunks) equals its one-row run
  const Layer layer = make_layer(6, 1, 136, 72, 82);
  const std::vector<int> tokens = tokens_of(4);
  const Combined many = run(layer, tokens, true, Drop::SomeSlots, ExpertFfnPath::StreamedLeanCombine);
  ASSERT_TRUE(many.status.ok()) << many.status.to_string();
  int differ = 0;
  for (int r = 0; r < 4; ++r) {
    const Combined one = run(layer, {tokens[r]}, true, Drop::SomeSlots, ExpertFfnPath::StreamedLeanCombine);
    ASSERT_TRUE(one.status.ok()) << one.status.to_string();
    differ += std::memcmp(&many.y[r * layer.d], one.y.data(), layer.d * sizeof(bf16)) != 0;
  }
  EXPECT_EQ(differ, 0) << "tokens differing from their one-row run, of 4";
}

TEST(CudaExpertCombine, APlantedOutOfOrderKWalkWithTheLeanDownLaunchCombiningTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  // k 1, 4 tokens: four row chunks, one a warp; long K on both GEMMs (a reversed walk moves ~0.15% of the bf16
  // outputs, so 2 tokens of k 2 on D 1024 / I 512 went unseen in H200 batch s7A)
  const Layer layer = make_layer(8, 1, 1024, 1536, 94);
  const Combined plain = run(layer, tokens_of(4), false, Drop::None);
  ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
  const FaultScope fault(true);
  const Combined fused = run(layer, tokens_of(4), true, Drop::None, ExpertFfnPath::StreamedLeanCombine);
  ASSERT_TRUE(fused.status.ok()) << fused.status.to_string();
  ASSERT_TRUE(fused.combined_in_down);
  EXPECT_GT(differing_rows(fused.y, plain.y, layer.d), 0) << "the reversed K walk went unseen";
}

TEST(CudaExpertCombine, TheDownLaunchCombinesOnlyOnTheStreamedPathUpTo1024Slots) {
  LS_SKIP_WITHOUT_DEVICE();
  DeviceBuffer<bf16> any = poisoned<bf16>(64);
  DeviceBuffer<float> weights = poisoned<float>(16);
  DeviceBuffer<int32_t> tickets = poisoned<int32_t>(16);
  ExpertFfn f;
  f.x = f.act = f.out = f.y = any.data();
  f.w_gate_up = f.w_down = any.data();
  f.weights = weights.data();
  f.tickets = tickets.data();
  f.experts = 32;
  f.hidden = 2048;
  f.inter = 1792;
  f.top_k = 4;
  pin_expert_ffn_path_for_test(ExpertFfnPath::Streamed);
  f.rows = 256;  // 1024 slots: the table's size
  EXPECT_TRUE(expert_ffn_combines(f));
  f.rows = 257;
  EXPECT_FALSE(expert_ffn_combines(f)) << "1028 slots";
  f.rows = 1;
  pin_expert_ffn_path_for_test(ExpertFfnPath::StreamedLean);
  EXPECT_FALSE(expert_ffn_combines(f)) << "lean streamed experts";
  pin_expert_ffn_path_for_test(ExpertFfnPath::StreamedLeanCombine);
  EXPECT_TRUE(expert_ffn_combines(f)) << "lean, combining down: 1 row of top-4 is 4 row chunks, one a warp";
  f.rows = 2;
  EXPECT_FALSE(expert_ffn_combines(f)) << "lean, combining down: 2 rows of top-4 may be 8 row chunks";
  f.rows = 1;
  f.weights = nullptr;
  EXPECT_FALSE(expert_ffn_combines(f)) << "lean, combining down: no weights";
  f.weights = weights.data();
  pin_expert_ffn_path_for_test(ExpertFfnPath::FourLaunches);
  EXPECT_FALSE(expert_ffn_combines(f)) << "four launches";
  pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
  EXPECT_TRUE(expert_ffn_combines(f)) << "the automatic pick at 1 row is lean, combining in down";
  f.tickets = nullptr;
  EXPECT_TRUE(expert_ffn_combines(f)) << "the lean down launch combines without tickets";
  pin_expert_ffn_path_for_test(ExpertFfnPath::Streamed);
  EXPECT_FALSE(expert_ffn_combines(f)) << "no tickets";
  pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
  EXPECT_EQ(expert_combine_tickets(2048), 128);
  EXPECT_EQ(expert_combine_tickets(264), 17);
}

// Timing (LS_EXPERT_TIMING=1; never in the default suite): one LFM2-8B-A1B MoE layer's experts (32 experts, top-4,
// D 2048, I 1792) after its plan launch, with the combine as its own launch and inside the down launch, 8 routings
// cycled so the weights come from memory.
TEST(CudaExpertCombineTiming, TimesTheCombineLaunchAgainstTheCombineInTheDownLaunchWhenAsked) {
  LS_SKIP_WITHOUT_DEVICE();
  if (std::getenv("LS_EXPERT_TIMING") == nullptr) GTEST_SKIP() << "set LS_EXPERT_TIMING=1 to time";
  constexpr int E = 32, k = 4, kPatterns = 8;
  constexpr int64_t D = 2048, I = 1792, kMaxRows = 32;
  Layer layer{E, k, D, I, {}, {}};
  ASSERT_TRUE(layer.gate_up.allocate(E * 2 * I * D).ok());
  ASSERT_TRUE(layer.down.allocate(E * D * I).ok());
  ASSERT_EQ(cudaMemset(layer.gate_up.data(), 0x3C, layer.gate_up.bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemset(layer.down.data(), 0x3C, layer.down.bytes()), cudaSuccess);
  DeviceBuffer<bf16> x = upload(random_bf16(kMaxRows * D, 3, 1.0f));
  DeviceBuffer<bf16> act, out, y;
  DeviceBuffer<int32_t> tickets;
  ASSERT_TRUE(act.allocate(kMaxRows * k * I).ok() && out.allocate(kMaxRows * k * D).ok() &&
              y.allocate(kMaxRows * D).ok() && tickets.allocate(expert_combine_tickets(D)).ok());
  ASSERT_EQ(cudaMemset(tickets.data(), 0, tickets.bytes()), cudaSuccess);
  std::vector<float> weights_host(kMaxRows * k, 0.25f);
  DeviceBuffer<float> weights = upload(weights_host);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::printf("[expert combine timing] rows, us per layer (plan + experts + combine): streamed + combine launch, "
              "streamed with the combine in down, lean + combine launch, lean with the combine in down (1 row)\n");
  for (int64_t rows : {1, 2, 4, 8, 16, 32}) {
    std::vector<DeviceBuffer<int32_t>> offsets(kPatterns), order(kPatterns), chosen_dev(kPatterns);
    for (int pattern = 0; pattern < kPatterns; ++pattern) {
      std::vector<int32_t> chosen;
      for (int64_t r = 0; r < rows; ++r)
        for (int j = 0; j < k; ++j) chosen.push_back(static_cast<int32_t>((splitmix64(pattern * 1000 + r) + j) % E));
      chosen_dev[pattern] = upload(chosen);
      offsets[pattern] = poisoned<int32_t>(E + 1);
      order[pattern] = poisoned<int32_t>(rows * k);
    }
    double us[4];
    constexpr ExpertFfnPath kPaths[] = {ExpertFfnPath::Streamed, ExpertFfnPath::Streamed, ExpertFfnPath::StreamedLean,
                                        ExpertFfnPath::StreamedLeanCombine};
    for (int v = 0; v < 4; ++v) {
      const bool in_down = v % 2 == 1;
      pin_expert_ffn_path_for_test(kPaths[v]);
      auto launch = [&](int pattern) {
        (void)plan_experts(chosen_dev[pattern].data(), rows * k, E, offsets[pattern].data(), order[pattern].data(),
                           nullptr);
        ExpertFfn f = testing::layer_ffn(layer, x.data(), rows, offsets[pattern].data(), order[pattern].data(),
                                         act.data(), out.data());
        if (in_down) {
          f.weights = weights.data();
          f.y = y.data();
          f.tickets = tickets.data();
        }
        const bool combined = expert_ffn_combines(f);
        EXPECT_TRUE(expert_ffn(f, nullptr).ok());
        if (!combined) {
          EXPECT_TRUE(combine_experts(out.data(), offsets[pattern].data(), E, order[pattern].data(), weights.data(),
                                      rows, k, static_cast<int>(D), y.data(), nullptr)
                          .ok());
        }
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
    }
    pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
    std::printf("[expert combine timing] %3lld rows  %8.1f %8.1f %8.1f %8.1f us\n", static_cast<long long>(rows), us[0],
                us[1], us[2], us[3]);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
