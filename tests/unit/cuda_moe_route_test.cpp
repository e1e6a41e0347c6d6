// The MoE layer's fused launches against the launches they replace, bitwise: route_and_plan (routing + plan in one
// CTA, and with the router GEMM inside) against the GemmEngine, cuda::route_experts then plan_experts, and
// combine_experts against scatter_weighted then cuda::sum_slots; the residual add + RMSNorm inside the lean route +
// plan against cuda::add_rms_norm then route + plan; the refusals by number.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/hash.h"
#include "compute/cuda/kernels.h"
#include "cuda_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {
namespace {

using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::poisoned;
using cuda::testing::upload;

// Values on a coarse grid (many exact ties among scores) or spread (few), in [-scale, scale].
std::vector<bf16> random_bf16(size_t count, uint64_t seed, float scale, bool coarse) {
  std::vector<bf16> out(count);
  for (size_t i = 0; i < count; ++i) {
    double v = (2.0 * uniform_open01(splitmix64(seed * 0x9E3779B97F4A7C15ull + i)) - 1.0) * scale;
    if (coarse) v = static_cast<double>(static_cast<int>(v * 4.0)) / 4.0;
    out[i] = float_to_bf16(static_cast<float>(v));
  }
  return out;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// One route + plan's outputs on the device, poisoned, and a plan that writes them.
struct RouteOutputs {
  RouteOutputs(int64_t rows, int experts, int k)
      : rows(rows), experts(experts), k(k), slots(rows * k), logits(poisoned<bf16>(rows * experts)),
        chosen(poisoned<int32_t>(slots)), offsets(poisoned<int32_t>(experts + 1)), order(poisoned<int32_t>(slots)),
        weights(poisoned<float>(slots)) {}
  // route + plan of logits (or of x times router when x is set) into these outputs
  RoutePlan plan(const bf16* x = nullptr, const bf16* router = nullptr, int64_t hidden = 0) {
    RoutePlan p;
    p.logits = logits.data();
    p.x = x;
    p.router = router;
    p.hidden = hidden;
    p.rows = rows;
    p.experts = experts;
    p.k = k;
    p.normalize = true;
    p.chosen = chosen.data();
    p.weights = weights.data();
    p.offsets = offsets.data();
    p.order = order.data();
    return p;
  }
  // the launches route_and_plan replaces: cuda::route_experts then plan_experts over these logits
  Status route_and_plan_apart(const RoutePlan& p) {
    LS_RETURN_IF_ERROR(cuda::route_experts(logits.data(), rows, experts, k, p.normalize, p.scaling, p.expert_bias,
                                           chosen.data(), weights.data(), nullptr));
    return plan_experts(chosen.data(), slots, experts, offsets.data(), order.data(), nullptr);
  }
  int64_t rows;
  int experts, k;
  int64_t slots;
  DeviceBuffer<bf16> logits;
  DeviceBuffer<int32_t> chosen, offsets, order;
  DeviceBuffer<float> weights;
};

// Every output of got equal to want's, bitwise (the logits too where with_logits).
void expect_same_route(const RouteOutputs& got, const RouteOutputs& want, bool with_logits, const std::string& where) {
  if (with_logits) {
    const std::vector<bf16> a = download(got.logits, got.rows * got.experts),
                            b = download(want.logits, want.rows * want.experts);
    int differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i].bits != b[i].bits;
    EXPECT_EQ(differ, 0) << where << ": logits of " << a.size();
  }
  EXPECT_TRUE(same_bits(download(got.chosen, got.slots), download(want.chosen, want.slots))) << where << ": chosen";
  EXPECT_TRUE(same_bits(download(got.weights, got.slots), download(want.weights, want.slots))) << where << ": weights";
  EXPECT_TRUE(same_bits(download(got.offsets, got.experts + 1), download(want.offsets, want.experts + 1)))
      << where << ": offsets";
  EXPECT_TRUE(same_bits(download(got.order, got.slots), download(want.order, want.slots))) << where << ": order";
}

std::string where(int64_t rows, int experts, int k, int64_t hidden) {
  return "rows " + std::to_string(rows) + " E " + std::to_string(experts) + " k " + std::to_string(k) + " K " +
         std::to_string(hidden);
}

TEST(CudaMoeRoute, RouteAndPlanInOneLaunchGiveTheRouteAndPlanLaunchesBits) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Case { int64_t rows; int experts, k; bool normalize, bias, coarse; float scaling; };
  const Case cases[] = {{1, 32, 4, true, true, false, 1.0f},   {1, 32, 4, false, false, true, 2.5f},
                        {7, 32, 4, true, false, true, 1.0f},   {16, 8, 2, true, true, true, 1.5f},
                        {64, 64, 8, false, true, false, 1.0f}, {33, 256, 1, true, true, true, 1.0f},
                        {5, 40, 40, true, false, true, 1.0f}};
  int checked = 0;
  for (const Case& c : cases) {
    const std::vector<bf16> logits = random_bf16(c.rows * c.experts, 7 + c.rows, 4.0f, c.coarse);
    std::vector<float> bias_host(c.experts);
    for (int e = 0; e < c.experts; ++e) bias_host[e] = static_cast<float>(e % 3) * 0.25f;
    DeviceBuffer<float> bias = upload(bias_host);
    RouteOutputs want(c.rows, c.experts, c.k), got(c.rows, c.experts, c.k);
    for (RouteOutputs* out : {&want, &got})
      ASSERT_EQ(cudaMemcpy(out->logits.data(), logits.data(), logits.size() * sizeof(bf16), cudaMemcpyHostToDevice),
                cudaSuccess);
    RoutePlan plan = got.plan();
    plan.normalize = c.normalize;
    plan.scaling = c.scaling;
    plan.expert_bias = c.bias ? bias.data() : nullptr;
    ASSERT_TRUE(want.route_and_plan_apart(plan).ok());
    ASSERT_TRUE(route_and_plan(plan, nullptr).ok());
    expect_same_route(got, want, true, where(c.rows, c.experts, c.k, 0));
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

// Both ways of running the router inside: streamed through per-warp pipelines, and preloaded whole into shared
// memory before the wait (set_moe_router_preload; up to 16 rows, the router and x rows within 192 KB).
TEST(CudaMoeRoute, TheRouterGemmInsideRouteAndPlanGivesTheGemmEngineAndRouteLaunchBitsStreamedOrPreloaded) {
  LS_SKIP_WITHOUT_DEVICE();
  const cuda::GemmEngine engine;
  struct Case { int64_t rows; int experts, k; int64_t hidden; bool bias; bool preload; };
  // K tails (264 and 40 end inside a 64-wide tile; 2056, past one chain, is refused below), experts not a
  // multiple of 8, rows across chunks of 8; 16 rows of the 8B router fill the preload's 192 KB exactly
  for (const Case c : {Case{1, 32, 4, 2048, false, false}, Case{8, 32, 4, 2048, true, false},
                       Case{13, 36, 3, 264, true, false}, Case{64, 256, 8, 40, false, false},
                       Case{1, 32, 4, 2048, false, true}, Case{8, 32, 4, 2048, true, true},
                       Case{16, 32, 4, 2048, true, true}, Case{13, 36, 3, 264, true, true},
                       Case{3, 8, 2, 40, false, true}}) {
    if (c.preload) {
      ASSERT_TRUE(router_preload_fits(c.rows, c.experts, c.hidden)) << "rows " << c.rows;
    }
    struct PreloadScope {  // the old kernel (the lean one, the default, has its own test below)
      explicit PreloadScope(bool on) : before(moe_router_preload()), lean_before(moe_route_lean()) {
        set_moe_router_preload(on);
        set_moe_route_lean(false);
      }
      ~PreloadScope() {
        set_moe_router_preload(before);
        set_moe_route_lean(lean_before);
      }
      bool before, lean_before;
    } preload_scope(c.preload);
    DeviceBuffer<bf16> x = upload(random_bf16(c.rows * c.hidden, 50 + c.rows, 1.0f, false));
    DeviceBuffer<bf16> router = upload(random_bf16(c.experts * c.hidden, 60 + c.experts, 0.05f, false));
    std::vector<float> bias_host(c.experts);
    for (int e = 0; e < c.experts; ++e) bias_host[e] = 0.01f * static_cast<float>(e % 5);
    DeviceBuffer<float> router_bias = upload(bias_host);
    const cuda::DeviceMatrix matrix{router.data(), c.bias ? router_bias.data() : nullptr, c.experts, c.hidden};
    RouteOutputs want(c.rows, c.experts, c.k), got(c.rows, c.experts, c.k);
    RoutePlan plan = got.plan(x.data(), router.data(), c.hidden);
    plan.router_bias = c.bias ? router_bias.data() : nullptr;
    ASSERT_TRUE(engine.gemm(x.data(), c.rows, matrix, want.logits.data(), nullptr, nullptr).ok());
    ASSERT_TRUE(want.route_and_plan_apart(plan).ok());
    ASSERT_TRUE(route_and_plan(plan, nullptr).ok());
    expect_same_route(got, want, true, where(c.rows, c.experts, c.k, c.hidden) + " preload " + std::to_string(c.preload));
  }
}

// The lean route + plan (moe8) against the GemmEngine, cuda::route_experts and plan_experts: logits, choices,
// weights, offsets and order bitwise, outputs poisoned first. Ties from coarse grids (and saturated sigmoids at K
// 2048), experts not a multiple of 8 or 32 and up to 256 (8 a lane), k up to E (more slots than lanes), NaN router
// biases (those experts never picked: with k = E the last choices are none and left out of the plan), K tails.
TEST(CudaMoeRoute, TheLeanRouteAndPlanGivesTheGemmEngineRouteAndPlanLaunchBits) {
  LS_SKIP_WITHOUT_DEVICE();
  const cuda::GemmEngine engine;
  struct Case { int64_t rows; int experts, k; int64_t hidden; bool coarse, expert_bias, normalize; float scaling;
                int nan_every; };
  std::vector<Case> cases;
  for (int64_t rows = 1; rows <= 16; ++rows) cases.push_back({rows, 32, 4, 2048, rows % 5 == 0, true, true, 1.0f, 0});
  for (const Case c : {Case{7, 36, 3, 264, true, true, false, 2.5f, 0}, Case{16, 8, 2, 40, true, false, true, 1.0f, 0},
                       Case{5, 40, 40, 64, true, true, true, 1.0f, 0}, Case{3, 8, 8, 64, false, true, true, 1.0f, 3},
                       Case{2, 256, 1, 40, false, true, true, 1.0f, 0},
                       Case{12, 70, 6, 128, true, false, true, 1.5f, 7}})
    cases.push_back(c);
  int checked = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(route_lean_fits(c.rows, c.experts, c.k, c.hidden)) << "rows " << c.rows << " E " << c.experts;
    DeviceBuffer<bf16> x = upload(random_bf16(c.rows * c.hidden, 80 + c.rows, 1.0f, c.coarse));
    DeviceBuffer<bf16> router = upload(random_bf16(c.experts * c.hidden, 90 + c.experts, c.coarse ? 1.0f : 0.05f,
                                                   c.coarse));
    std::vector<float> router_bias_host(c.experts), expert_bias_host(c.experts);
    for (int e = 0; e < c.experts; ++e) {
      router_bias_host[e] = c.nan_every > 0 && e % c.nan_every == 2 ? std::nanf("") : 0.01f * static_cast<float>(e % 5);
      expert_bias_host[e] = static_cast<float>(e % 3) * 0.25f;
    }
    DeviceBuffer<float> router_bias = upload(router_bias_host), expert_bias = upload(expert_bias_host);
    const cuda::DeviceMatrix matrix{router.data(), router_bias.data(), c.experts, c.hidden};
    RouteOutputs want(c.rows, c.experts, c.k), got(c.rows, c.experts, c.k);
    RoutePlan plan = got.plan(x.data(), router.data(), c.hidden);
    plan.router_bias = router_bias.data();
    plan.normalize = c.normalize;
    plan.scaling = c.scaling;
    plan.expert_bias = c.expert_bias ? expert_bias.data() : nullptr;
    ASSERT_TRUE(engine.gemm(x.data(), c.rows, matrix, want.logits.data(), nullptr, nullptr).ok());
    ASSERT_TRUE(want.route_and_plan_apart(plan).ok());
    const Status status = route_and_plan_lean(plan, nullptr);
    ASSERT_TRUE(status.ok()) << status.to_string();
    expect_same_route(got, want, true, where(c.rows, c.experts, c.k, c.hidden));
    if (c.nan_every > 0) {
      const std::vector<int32_t> chosen_host = download(got.chosen, got.slots);
      EXPECT_EQ(std::count(chosen_host.begin(), chosen_host.end(), -1) > 0, c.k == c.experts)
          << where(c.rows, c.experts, c.k, c.hidden);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 22);
}

// route_and_plan runs the lean kernel under set_moe_route_lean (and the old one past 16 rows): the same bits as
// with the switch off, on the 8B router shape; the lean refusals by number.
TEST(CudaMoeRoute, TheLeanSwitchGivesTheOldRouteAndPlanBitsAndTheLeanKernelRefusesByNumber) {
  LS_SKIP_WITHOUT_DEVICE();
  constexpr int E = 32, k = 4;
  constexpr int64_t D = 2048;
  for (const int64_t rows : {1, 16, 17}) {
    DeviceBuffer<bf16> x = upload(random_bf16(rows * D, 100 + rows, 1.0f, false));
    DeviceBuffer<bf16> router = upload(random_bf16(E * D, 101, 0.05f, false));
    RouteOutputs old_kernel(rows, E, k), lean(rows, E, k);
    for (RouteOutputs* out : {&old_kernel, &lean}) {
      const bool before = moe_route_lean();
      set_moe_route_lean(out == &lean);
      const Status status = route_and_plan(out->plan(x.data(), router.data(), D), nullptr);
      set_moe_route_lean(before);
      ASSERT_TRUE(status.ok()) << status.to_string();
    }
    expect_same_route(lean, old_kernel, true, where(rows, E, k, D));
  }
  EXPECT_FALSE(route_lean_fits(17, 32, 4, 2048));
  EXPECT_FALSE(route_lean_fits(4, 257, 4, 2048));
  EXPECT_FALSE(route_lean_fits(16, 40, 4, 2048)) << "the 8B router with 40 experts and 16 rows: past the shared memory";
  EXPECT_TRUE(route_lean_fits(16, 32, 4, 2048));
  DeviceBuffer<bf16> x = poisoned<bf16>(17 * 2048);
  RoutePlan plan;
  plan.x = x.data();
  plan.hidden = 2048;
  plan.rows = 17;
  plan.experts = 32;
  plan.k = 4;
  const Status rows = route_and_plan_lean(plan, nullptr);
  EXPECT_EQ(rows.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(rows.to_string().find("rows 17"), std::string::npos) << rows.to_string();
  plan.rows = 4;
  plan.x = nullptr;
  EXPECT_EQ(route_and_plan_lean(plan, nullptr).code(), ErrorCode::InvalidArgument) << "no x: no router GEMM to run";
}

// The residual add + RMSNorm inside the lean route + plan (step10) against cuda::add_rms_norm then the lean route +
// plan on its output: the new residual h, the normed rows x, logits, choices, weights, offsets and order bitwise,
// outputs poisoned first; rows 1..16, K tails (264, 40: x tiles partly zero), experts not a multiple of 8.
// fault: the planted one rounding instead of two (the check must see it).
int norm_in_route_differences(bool fault) {
  const cuda::GemmEngine engine;
  struct Case { int64_t rows; int experts, k; int64_t hidden; };
  std::vector<Case> cases;
  for (int64_t rows = 1; rows <= 16; ++rows) cases.push_back({rows, 32, 4, 2048});
  for (const Case c : {Case{7, 36, 3, 264}, Case{16, 8, 2, 40}, Case{3, 70, 6, 1024}}) cases.push_back(c);
  int differ = 0;
  for (const Case& c : cases) {
    const std::string at = where(c.rows, c.experts, c.k, c.hidden);
    const int64_t n = c.rows * c.hidden;
    const std::vector<bf16> h_host = random_bf16(n, 110 + c.rows, 3.0f, false);
    DeviceBuffer<bf16> delta = upload(random_bf16(n, 120 + c.rows, 0.5f, false));
    DeviceBuffer<bf16> weight = upload(random_bf16(c.hidden, 130, 2.0f, false));
    DeviceBuffer<bf16> router = upload(random_bf16(c.experts * c.hidden, 140 + c.experts, 0.05f, false));
    DeviceBuffer<bf16> h_want = upload(h_host), h_got = upload(h_host);
    DeviceBuffer<bf16> x_want = poisoned<bf16>(n), x_got = poisoned<bf16>(n);
    RouteOutputs want(c.rows, c.experts, c.k), got(c.rows, c.experts, c.k);
    constexpr float kEps = 1e-5f;
    EXPECT_TRUE(cuda::add_rms_norm(h_want.data(), delta.data(), c.rows, static_cast<int>(c.hidden), weight.data(), kEps,
                                   x_want.data(), nullptr)
                    .ok());
    const cuda::DeviceMatrix matrix{router.data(), nullptr, c.experts, c.hidden};
    RoutePlan plan = got.plan(x_got.data(), router.data(), c.hidden);
    EXPECT_TRUE(engine.gemm(x_want.data(), c.rows, matrix, want.logits.data(), nullptr, nullptr).ok());
    EXPECT_TRUE(want.route_and_plan_apart(plan).ok());
    plan.norm_h = h_got.data();
    plan.norm_delta = delta.data();
    plan.norm_weight = weight.data();
    plan.norm_eps = kEps;
    plan.norm_out = x_got.data();
    plan.norm_fault_for_test = fault;
    EXPECT_TRUE(route_norm_fits(plan)) << at;
    const Status status = route_and_plan(plan, nullptr);
    EXPECT_TRUE(status.ok()) << at << ": " << status.to_string();
    auto count = [&](const std::vector<bf16>& a, const std::vector<bf16>& b) {
      int d = 0;
      for (size_t i = 0; i < a.size(); ++i) d += a[i].bits != b[i].bits;
      return d;
    };
    const int h_differ = count(download(h_got, n), download(h_want, n));
    const int x_differ = count(download(x_got, n), download(x_want, n));
    differ += h_differ + x_differ;
    if (!fault) {
      EXPECT_EQ(h_differ, 0) << at << ": residual of " << n;
      EXPECT_EQ(x_differ, 0) << at << ": normed rows of " << n;
      expect_same_route(got, want, true, at);
    }
  }
  return differ;
}

TEST(CudaMoeRoute, TheNormInsideTheLeanRouteGivesTheAddRmsNormThenRouteBits) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(norm_in_route_differences(false), 0);
}

TEST(CudaMoeRoute, APlantedOneRoundingInTheNormInsideTheRouteTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_GT(norm_in_route_differences(true), 0);
}

TEST(CudaMoeRoute, TheNormInsideRouteIsRefusedOffTheLeanKernelAndOnUnalignedRows) {
  LS_SKIP_WITHOUT_DEVICE();
  DeviceBuffer<bf16> rows = poisoned<bf16>(17 * 2048 + 8), weight = poisoned<bf16>(2048);
  RouteOutputs out(17, 32, 4);
  RoutePlan plan = out.plan(rows.data(), rows.data(), 2048);
  plan.norm_h = rows.data();
  plan.norm_delta = rows.data();
  plan.norm_weight = weight.data();
  plan.norm_out = rows.data();
  EXPECT_FALSE(route_norm_fits(plan)) << "17 rows: past the lean kernel";
  const Status wide = route_and_plan(plan, nullptr);
  EXPECT_EQ(wide.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(wide.to_string().find("lean kernel only"), std::string::npos) << wide.to_string();
  plan.rows = 4;
  EXPECT_TRUE(route_norm_fits(plan));
  plan.norm_delta = rows.data() + 4;  // 8 bytes off
  EXPECT_FALSE(route_norm_fits(plan));
  const Status unaligned = route_and_plan_lean(plan, nullptr);
  EXPECT_EQ(unaligned.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(unaligned.to_string().find("16-byte aligned"), std::string::npos) << unaligned.to_string();
}

TEST(CudaMoeRoute, CombineInOneLaunchGivesTheScatterAndSumBits) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Case { int64_t rows; int experts, k, width; };
  for (const Case c : {Case{1, 32, 4, 2048}, Case{8, 32, 4, 2048}, Case{64, 16, 4, 264}, Case{256, 8, 4, 72}}) {
    const int64_t slots = c.rows * c.k;
    std::vector<int32_t> chosen_host;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int j = 0; j < c.k; ++j) chosen_host.push_back(static_cast<int32_t>((r * 5 + j * 3 + (r % 3) * j) % c.experts));
    DeviceBuffer<int32_t> chosen = upload(chosen_host), offsets = poisoned<int32_t>(c.experts + 1),
                          order = poisoned<int32_t>(slots);
    ASSERT_TRUE(plan_experts(chosen.data(), slots, c.experts, offsets.data(), order.data(), nullptr).ok());
    // weights as the router gives them (bf16 values), outputs of mixed signs and magnitudes
    std::vector<float> weights_host(slots);
    for (int64_t s = 0; s < slots; ++s) weights_host[s] = bf16_to_float(float_to_bf16(0.1f + 0.37f * static_cast<float>(s % 7)));
    DeviceBuffer<float> weights = upload(weights_host);
    DeviceBuffer<bf16> out = upload(random_bf16(slots * c.width, 31 + c.rows, 8.0f, false));
    DeviceBuffer<bf16> slot_rows = poisoned<bf16>(slots * c.width), y_ref = poisoned<bf16>(c.rows * c.width),
                       y = poisoned<bf16>(c.rows * c.width);
    ASSERT_TRUE(scatter_weighted(out.data(), order.data(), weights.data(), slots, c.width, slot_rows.data(), nullptr).ok());
    ASSERT_TRUE(cuda::sum_slots(slot_rows.data(), c.rows, c.k, c.width, y_ref.data(), nullptr).ok());
    ASSERT_TRUE(combine_experts(out.data(), offsets.data(), c.experts, order.data(), weights.data(), c.rows, c.k,
                                c.width, y.data(), nullptr)
                    .ok());
    const std::vector<bf16> got = download(y, c.rows * c.width), want = download(y_ref, c.rows * c.width);
    int differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits;
    EXPECT_EQ(differ, 0) << "rows " << c.rows << " width " << c.width << ": of " << got.size() << " outputs";
  }
}

TEST(CudaMoeRoute, RefusesTooManyRowsExpertsSlotsOrRouterKByNumber) {
  LS_SKIP_WITHOUT_DEVICE();
  RoutePlan plan;
  plan.rows = 65;
  plan.experts = 32;
  plan.k = 4;
  const Status rows = route_and_plan(plan, nullptr);
  EXPECT_EQ(rows.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(rows.to_string().find("rows 65"), std::string::npos) << rows.to_string();
  plan.rows = 1;
  plan.experts = 257;
  const Status experts = route_and_plan(plan, nullptr);
  EXPECT_EQ(experts.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(experts.to_string().find("experts 257"), std::string::npos) << experts.to_string();
  plan.experts = 4;
  plan.k = 5;
  EXPECT_EQ(route_and_plan(plan, nullptr).code(), ErrorCode::InvalidArgument);
  plan.k = 2;
  DeviceBuffer<bf16> x = poisoned<bf16>(2056);
  plan.x = x.data();
  plan.hidden = 2056;  // past one canonical chain
  const Status hidden = route_and_plan(plan, nullptr);
  EXPECT_EQ(hidden.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(hidden.to_string().find("2056"), std::string::npos) << hidden.to_string();
  EXPECT_FALSE(router_preload_fits(17, 32, 2048)) << "17 rows";
  EXPECT_FALSE(router_preload_fits(16, 40, 2048)) << "the 8B router with 40 experts: past 192 KB";
  EXPECT_TRUE(router_preload_fits(16, 32, 2048));
  const Status slots = combine_experts(nullptr, nullptr, 4, nullptr, nullptr, 257, 4, 64, nullptr, nullptr);
  EXPECT_EQ(slots.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(slots.to_string().find("rows 257 x k 4"), std::string::npos) << slots.to_string();
}

// Timing (LS_EXPERT_TIMING=1; never in the default suite): route_and_plan with the router inside at the 8B shapes
// (32 experts, top-4, D 2048) back to back, 416 routers cycled (52 MB, past the L2) so the router comes from memory;
// the router streamed through the warps' pipelines vs preloaded whole before the wait vs the lean kernel (moe8); then
// the lean kernel at K 512 (a quarter of the router's 128-step mma chain: the difference is the chain's cost) and with
// one router for every launch (in L2: the difference is the preload from memory, where it is not hidden).
TEST(CudaMoeRouteTiming, TimesRouteAndPlanWithTheRouterStreamedAndPreloadedWhenAsked) {
  LS_SKIP_WITHOUT_DEVICE();
  if (std::getenv("LS_EXPERT_TIMING") == nullptr) GTEST_SKIP() << "set LS_EXPERT_TIMING=1 to time";
  constexpr int E = 32, k = 4, kRouters = 416, kIters = 832;
  constexpr int64_t D = 2048, kMaxRows = 16;
  DeviceBuffer<bf16> routers, x = upload(random_bf16(kMaxRows * D, 5, 1.0f, false));
  ASSERT_TRUE(routers.allocate(kRouters * E * D).ok());
  ASSERT_EQ(cudaMemset(routers.data(), 0x3C, routers.bytes()), cudaSuccess);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const bool preload_before = moe_router_preload(), lean_before = moe_route_lean();
  std::printf("[route timing] rows, us per route + plan launch (router inside): streamed, preloaded, lean, lean at K "
              "512, lean with one router (L2)\n");
  for (int64_t rows : {1, 4, 16}) {
    double us[5];
    for (int v = 0; v < 5; ++v) {
      set_moe_router_preload(v >= 1);
      set_moe_route_lean(v >= 2);
      const int64_t hidden = v == 3 ? 512 : D;
      const int routers_cycled = v == 4 ? 1 : kRouters;
      RouteOutputs out(rows, E, k);
      auto launch = [&](int i) {
        const bf16* router = routers.data() + static_cast<int64_t>(i % routers_cycled) * E * D;
        EXPECT_TRUE(route_and_plan(out.plan(x.data(), router, hidden), nullptr).ok());
      };
      for (int i = 0; i < 16; ++i) launch(i);
      cudaEventRecord(start);
      for (int i = 0; i < kIters; ++i) launch(i);
      cudaEventRecord(stop);
      ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      us[v] = 1000.0 * ms / kIters;
    }
    set_moe_router_preload(preload_before);
    set_moe_route_lean(lean_before);
    std::printf("[route timing] %3lld rows  %7.2f %7.2f %7.2f %7.2f %7.2f us\n", static_cast<long long>(rows), us[0],
                us[1], us[2], us[3], us[4]);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
