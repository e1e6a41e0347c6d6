// The decode GEMMs' norm prologue under the held schedule (set_decode_norm_held, step11: the norm weight loaded with
// the first rows' h and delta and kept in registers, 16 chunks a thread in flight, the chain's loads batched; one-warp
// launches only, the others keep the plain schedule): the bits of the norm launch then the GEMM (the unfused
// composition that stays), h_out the residual add's, at 1..16 rows, every staged configuration and the streaming SwiGLU
// one; a planted fault (the neighbour slot's weight) turns the one-warp launch red.
#ifdef LS_HAVE_CUDA

#include <vector>

#include "compute/cuda/decode_norm_schedule.h"
#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

// The held schedule (and the fault) for the scope, the default configurations and schedule after it.
struct HeldScope {
  explicit HeldScope(bool fault) : before(decode_norm_held()) {
    set_decode_norm_held(true);
    set_decode_norm_fault_for_test(fault);
  }
  ~HeldScope() {
    set_decode_norm_held(before);
    set_decode_norm_fault_for_test(false);
    set_decode_norm_configs(0, 2);
  }
  bool before;
};

struct Inputs {
  DeviceBuffer<bf16> h, delta, weight, h_plain, u;  // u: the norm launch's output of round(h + delta), or of h
};

Inputs inputs(int64_t m, int64_t k, bool with_delta, uint64_t seed) {
  Inputs c;
  c.h = upload(to_bf16(random_values(m * k, seed, 3.0f)));
  c.delta = upload(to_bf16(random_values(m * k, seed + 1, 2.0f)));
  c.weight = upload(to_bf16(random_values(k, seed + 2, 1.0f)));
  c.h_plain = upload(download(c.h, m * k));
  c.u = poisoned<bf16>(m * k);
  const Status norm = with_delta ? add_rms_norm(c.h_plain.data(), c.delta.data(), m, static_cast<int>(k),
                                                c.weight.data(), 1e-5f, c.u.data(), nullptr)
                                 : rms_norm(c.h.data(), m, static_cast<int>(k), c.weight.data(), 1e-5f, c.u.data(),
                                            nullptr);
  EXPECT_TRUE(norm.ok()) << norm.to_string();
  return c;
}

DecodeNorm decode_norm(const Inputs& c, bool with_delta, bf16* h_out) {
  DecodeNorm norm;
  norm.h = c.h.data();
  norm.delta = with_delta ? c.delta.data() : nullptr;
  norm.h_out = with_delta ? h_out : nullptr;
  norm.weight = c.weight.data();
  norm.eps = 1e-5f;
  return norm;
}

bool same(const DeviceBuffer<bf16>& a, const DeviceBuffer<bf16>& b, int64_t count) {
  const std::vector<bf16> x = download(a, count), y = download(b, count);
  return std::memcmp(x.data(), y.data(), sizeof(bf16) * count) == 0;
}

// Outputs (and h_out) of the grouped launch under the held schedule that differ from the composition, over K `ks`,
// rows `widths`, with and without the residual add, on each of the staged configurations `configs`.
int grouped_differences(bool fault, const std::vector<int64_t>& ks, const std::vector<int64_t>& widths,
                        const std::vector<int>& configs) {
  const HeldScope held(fault);
  const GemmEngine engine;
  int differences = 0;
  for (const int64_t k : ks) {
    const std::vector<int64_t> ns = {264, 72, 1001};
    std::vector<DeviceBuffer<bf16>> w;
    std::vector<DeviceMatrix> ws;
    auto bias = upload(random_values(264, 151));
    for (size_t i = 0; i < ns.size(); ++i) {
      w.push_back(upload(to_bf16(random_values(ns[i] * k, 152 + i + k, 0.5f))));
      ws.push_back(DeviceMatrix{w.back().data(), i == 0 ? bias.data() : nullptr, ns[i], k});
    }
    for (const int64_t m : widths)
      for (const int config : configs)
        for (const bool with_delta : {false, true}) {
          const Inputs c = inputs(m, k, with_delta, 160 + m + k);
          std::vector<DeviceBuffer<bf16>> want, got;
          std::vector<bf16*> want_ptr, got_ptr;
          for (const int64_t n : ns) {
            want.push_back(poisoned<bf16>(m * n));
            got.push_back(poisoned<bf16>(m * n));
            want_ptr.push_back(want.back().data());
            got_ptr.push_back(got.back().data());
          }
          EXPECT_TRUE(gemm_decode_group(engine, c.u.data(), m, ws, want_ptr, nullptr).ok());
          auto h_out = poisoned<bf16>(m * k);
          set_decode_norm_configs(config, 2);
          const DecodeNorm norm = decode_norm(c, with_delta, h_out.data());
          EXPECT_TRUE(gemm_decode_norm(engine, norm, m, ws, got_ptr, nullptr).ok());
          for (size_t i = 0; i < ns.size(); ++i)
            if (!same(got[i], want[i], m * ns[i])) {
              ++differences;
              if (!fault)
                ADD_FAILURE() << "K " << k << " m " << m << " delta " << with_delta << " matrix " << i << " config "
                              << config;
            }
          if (with_delta && !same(h_out, c.h_plain, m * k)) {
            ++differences;
            ADD_FAILURE() << "K " << k << " m " << m << ": h_out";  // the fault is in the scaling, never in h
          }
        }
  }
  return differences;
}

TEST(CudaDecodeNormHeld, TheGroupedLaunchGivesTheBitsOfTheNormLaunchThenTheGemm) {
  LS_SKIP_WITHOUT_DEVICE();
  std::vector<int> configs;
  for (int config = 0; config < decode_staged_config_count(); ++config) configs.push_back(config);
  EXPECT_EQ(grouped_differences(false, {2048, 1000, 64}, {1, 2, 7, 8, 9, 16}, configs), 0);
}

TEST(CudaDecodeNormHeld, GateUpWithSwigluGivesTheBitsOfTheNormLaunchThenTheSwigluGemm) {
  LS_SKIP_WITHOUT_DEVICE();
  const HeldScope held(false);
  const GemmEngine engine;
  for (const int64_t k : {2048, 1000}) {
    const int64_t f = 1000;  // a tail of the 8-column items
    auto gate_up = upload(to_bf16(random_values(2 * f * k, 171 + k, 0.5f)));
    auto gate_up_bias = upload(random_values(2 * f, 172));
    const DeviceMatrix gu{gate_up.data(), gate_up_bias.data(), 2 * f, k};
    // the staged 16-column configurations and 4 (the streaming kernel, the norm staged once per CTA as K tiles)
    for (const auto& [m, swiglu_config] : std::vector<std::pair<int64_t, int>>{
             {1, 2}, {5, 2}, {16, 3}, {3, 3}, {1, 4}, {5, 4}, {8, 4}, {9, 4}, {16, 4}}) {
      const Inputs c = inputs(m, k, true, 180 + m + k);
      auto want = poisoned<bf16>(m * f), got = poisoned<bf16>(m * f), h_out = poisoned<bf16>(m * k);
      ASSERT_TRUE(gemm_decode_swiglu(engine, c.u.data(), m, gu, want.data(), nullptr).ok());
      set_decode_norm_configs(0, swiglu_config);
      ASSERT_TRUE(gemm_decode_norm_swiglu(engine, decode_norm(c, true, h_out.data()), m, gu, got.data(), nullptr).ok());
      EXPECT_TRUE(same(got, want, m * f)) << "swiglu config " << swiglu_config << " K " << k << " m " << m;
      EXPECT_TRUE(same(h_out, c.h_plain, m * k)) << "swiglu config " << swiglu_config << " K " << k << " m " << m;
    }
  }
}

TEST(CudaDecodeNormHeld, APlantedNeighbourWeightFaultTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  // configuration 0 (one warp, the default); K 2048: each thread's 8 weight slots are 8 different columns
  EXPECT_GT(grouped_differences(true, {2048}, {1, 16}, {0}), 0);
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
