// The staged decode GEMM picks (set_decode_staged_pick, not the default) and the norm in the GEMM prologue
// (gemm_decode_norm / gemm_decode_norm_swiglu): every row the bits of the streaming picks, of the norm launch then the
// GEMM, and the refusals by number. Split from cuda_decode_gemm_test.cpp (session 11).
#ifdef LS_HAVE_CUDA

#include <span>

#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

// The pipeline's automatic picks off for a scope (they come before the staged picks: with them on, the narrow shapes
// of up to 16 rows would run on the pipeline under every staged pick), as they were after it.
struct NoPipelinePicks {
  NoPipelinePicks() : was(decode_pipe_narrow_on()) { set_decode_pipe_narrow(false); }
  ~NoPipelinePicks() { set_decode_pipe_narrow(was); }
  bool was;
};

TEST(CudaDecodeGemm, TheEnginesStagedPicksGiveEveryRowTheBitsOfTheStreamingPicks) {
  LS_SKIP_WITHOUT_DEVICE();
  const DefaultPicksAtExit defaults;
  const NoPipelinePicks staged_first;
  const GemmEngine engine;
  // The staged kernels took their shared-memory opt-in (else the picks fall back to streaming and this compares
  // streaming with itself).
  ASSERT_TRUE(decode_norm_fits(16, 2048));
  // The model's narrow one-slice shapes (out / q, k / v, conv in), an odd N with bias, a short K with a tail, and
  // the wide (16384) and sliced (8192) shapes that keep their streaming picks under the switch.
  const std::vector<std::tuple<int64_t, int64_t, bool>> shapes = {
      {2048, 2048, false}, {512, 2048, true}, {6144, 2048, false}, {1001, 2048, true}, {72, 200, false},
      {16384, 2048, false}, {2048, 8192, false}};
  for (const auto& [n, k, with_bias] : shapes) {
    auto x = upload(to_bf16(random_values(16 * k, 41 + n, 2.0f)));
    auto w = upload(to_bf16(random_values(n * k, 42 + k, 0.5f)));
    auto bias = upload(random_values(n, 43));
    const DeviceMatrix matrix{w.data(), with_bias ? bias.data() : nullptr, n, k};
    for (const int64_t m : {1, 3, 8, 9, 16}) {
      set_decode_staged_pick(-2);  // the streaming picks only
      auto want = poisoned<bf16>(m * n);
      ASSERT_TRUE(engine.gemm(x.data(), m, matrix, want.data(), nullptr, nullptr).ok());
      const std::vector<bf16> want_host = download(want, m * n);
      for (int config = 0; config < decode_staged_config_count(); ++config) {
        set_decode_staged_pick(config);
        auto got = poisoned<bf16>(m * n);
        ASSERT_TRUE(engine.gemm(x.data(), m, matrix, got.data(), nullptr, nullptr).ok());
        const std::vector<bf16> got_host = download(got, m * n);
        EXPECT_EQ(std::memcmp(got_host.data(), want_host.data(), sizeof(bf16) * m * n), 0)
            << decode_variant_name(decode_variant_count() - decode_staged_config_count() + config) << ": N " << n
            << " K " << k << " m " << m;
      }
      set_decode_staged_pick(-1);  // the automatic picks: staged or streaming, the same bits
      auto automatic = poisoned<bf16>(m * n);
      ASSERT_TRUE(engine.gemm(x.data(), m, matrix, automatic.data(), nullptr, nullptr).ok());
      const std::vector<bf16> automatic_host = download(automatic, m * n);
      EXPECT_EQ(std::memcmp(automatic_host.data(), want_host.data(), sizeof(bf16) * m * n), 0)
          << "automatic picks: N " << n << " K " << k << " m " << m;
    }
  }
  set_decode_staged_pick(-1);
}

// Under each staged pick the grouped q / k / v launch runs the staged kernel (every weight staged before the wait):
// each matrix's rows bitwise the streaming picks' separate GEMMs (1.2B q / k / v, odd N with a bias and a K tail).
TEST(CudaDecodeGemm, UnderEachStagedPickQKAndVInOneLaunchGiveTheBitsOfThreeStreamingGemms) {
  LS_SKIP_WITHOUT_DEVICE();
  const DefaultPicksAtExit defaults;
  const NoPipelinePicks staged_first;
  const GemmEngine engine;
  ASSERT_TRUE(decode_norm_fits(16, 2048));  // the staged kernels took their opt-in (else this compares streaming)
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> groups = {{{2048, 512, 512}, 2048},
                                                                        {{1001, 7, 64, 300}, 1000}};
  for (const auto& [ns, k] : groups) {
    for (const int64_t m : {1, 3, 8, 9, 16}) {
      auto x = upload(to_bf16(random_values(m * k, 61 + m + k, 2.0f)));
      std::vector<DeviceBuffer<bf16>> weights;
      std::vector<DeviceBuffer<float>> biases;
      std::vector<DeviceMatrix> matrices;
      std::vector<std::vector<bf16>> want;
      set_decode_staged_pick(-2);  // the streaming picks only
      for (size_t i = 0; i < ns.size(); ++i) {
        weights.push_back(upload(to_bf16(random_values(ns[i] * k, 62 + i + k, 0.5f))));
        biases.push_back(upload(random_values(ns[i], 63 + i)));
        matrices.push_back(DeviceMatrix{weights[i].data(), i == 1 ? biases[i].data() : nullptr, ns[i], k});
        auto plain = poisoned<bf16>(m * ns[i]);
        ASSERT_TRUE(engine.gemm(x.data(), m, matrices[i], plain.data(), nullptr, nullptr).ok());
        want.push_back(download(plain, m * ns[i]));
      }
      for (int config = 0; config < decode_staged_config_count(); ++config) {
        set_decode_staged_pick(config);
        std::vector<DeviceBuffer<bf16>> fused;
        std::vector<bf16*> outputs;
        for (size_t i = 0; i < ns.size(); ++i) {
          fused.push_back(poisoned<bf16>(m * ns[i]));
          outputs.push_back(fused[i].data());
        }
        ASSERT_TRUE(gemm_decode_group(engine, x.data(), m, matrices, outputs, nullptr).ok());
        for (size_t i = 0; i < ns.size(); ++i) {
          const std::vector<bf16> got = download(fused[i], m * ns[i]);
          EXPECT_EQ(std::memcmp(got.data(), want[i].data(), sizeof(bf16) * got.size()), 0)
              << decode_variant_name(decode_variant_count() - decode_staged_config_count() + config) << ": matrix "
              << i << " of N " << ns[i] << ", K " << k << ", m " << m;
        }
      }
    }
  }
}

// The oracle of the norm prologue: h_out = round(h + delta) (or h alone), u = RMSNorm * weight by the norm launches.
struct NormCase {
  DeviceBuffer<bf16> h, delta, weight, h_plain, u;
};

NormCase norm_case(int64_t m, int64_t k, bool with_delta, uint64_t seed) {
  NormCase c;
  c.h = upload(to_bf16(random_values(m * k, seed, 3.0f)));
  c.delta = upload(to_bf16(random_values(m * k, seed + 1, 2.0f)));
  c.weight = upload(to_bf16(random_values(k, seed + 2, 1.0f)));
  c.h_plain = upload(download(c.h, m * k));
  c.u = poisoned<bf16>(m * k);
  if (with_delta)
    EXPECT_TRUE(add_rms_norm(c.h_plain.data(), c.delta.data(), m, static_cast<int>(k), c.weight.data(), 1e-5f,
                             c.u.data(), nullptr)
                    .ok());
  else
    EXPECT_TRUE(rms_norm(c.h.data(), m, static_cast<int>(k), c.weight.data(), 1e-5f, c.u.data(), nullptr).ok());
  return c;
}

TEST(CudaDecodeGemm, TheNormInTheGemmPrologueGivesTheBitsOfTheNormLaunchThenTheGemm) {
  LS_SKIP_WITHOUT_DEVICE();
  const DefaultPicksAtExit defaults;
  const GemmEngine engine;
  // K 2048 (the model, the CTA-per-row norm), 1000 (a 64-wide tail), 64 (the warp-per-row norm); three matrices as
  // q / k / v (one with bias, an odd N), rows 1..16, with and without the residual add.
  for (const int64_t k : {2048, 1000, 64}) {
    const std::vector<int64_t> ns = {264, 72, 1001};
    std::vector<DeviceBuffer<bf16>> w;
    std::vector<DeviceMatrix> ws;
    auto bias = upload(random_values(264, 51));
    for (size_t i = 0; i < ns.size(); ++i) {
      w.push_back(upload(to_bf16(random_values(ns[i] * k, 52 + i + k, 0.5f))));
      ws.push_back(DeviceMatrix{w.back().data(), i == 0 ? bias.data() : nullptr, ns[i], k});
    }
    for (const int64_t m : {1, 2, 7, 8, 9, 16}) {
      for (const bool with_delta : {false, true}) {
        NormCase c = norm_case(m, k, with_delta, 60 + m + k);
        std::vector<DeviceBuffer<bf16>> want, got;
        std::vector<bf16*> want_ptr, got_ptr;
        for (const int64_t n : ns) {
          want.push_back(poisoned<bf16>(m * n));
          got.push_back(poisoned<bf16>(m * n));
          want_ptr.push_back(want.back().data());
          got_ptr.push_back(got.back().data());
        }
        ASSERT_TRUE(gemm_decode_group(engine, c.u.data(), m, ws, want_ptr, nullptr).ok());
        auto h_out = poisoned<bf16>(m * k);
        DecodeNorm norm;
        norm.h = c.h.data();
        norm.delta = with_delta ? c.delta.data() : nullptr;
        norm.h_out = with_delta ? h_out.data() : nullptr;
        norm.weight = c.weight.data();
        norm.eps = 1e-5f;
        const int config = static_cast<int>(m + k) % decode_staged_config_count();  // every configuration in turn
        set_decode_norm_configs(config, 2);
        ASSERT_TRUE(gemm_decode_norm(engine, norm, m, ws, got_ptr, nullptr).ok());
        set_decode_norm_configs(0, 2);
        for (size_t i = 0; i < ns.size(); ++i) {
          const std::vector<bf16> a = download(got[i], m * ns[i]), b = download(want[i], m * ns[i]);
          EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(bf16) * a.size()), 0)
              << "K " << k << " m " << m << " delta " << with_delta << " matrix " << i << " config " << config;
        }
        if (with_delta) {
          const std::vector<bf16> a = download(h_out, m * k), b = download(c.h_plain, m * k);
          EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(bf16) * a.size()), 0) << "K " << k << " m " << m << ": h";
        }
      }
    }
    // gate_up + SwiGLU with the norm in the prologue: F = 1000 (a tail of the 8-column items), with bias.
    const int64_t f = 1000;
    auto gate_up = upload(to_bf16(random_values(2 * f * k, 71 + k, 0.5f)));
    auto gate_up_bias = upload(random_values(2 * f, 72));
    const DeviceMatrix gu{gate_up.data(), gate_up_bias.data(), 2 * f, k};
    // Swiglu configurations: both 16-column staged ones, and 4 (the streaming kernel with the norm staged once per
    // CTA as swizzled K tiles: 8 x rows up to m = 8, 16 above).
    for (const auto& [m, swiglu_config] : std::vector<std::pair<int64_t, int>>{
             {1, 2}, {5, 2}, {16, 3}, {3, 3}, {1, 4}, {5, 4}, {8, 4}, {9, 4}, {16, 4}}) {
      NormCase c = norm_case(m, k, true, 80 + m + k);
      set_decode_norm_configs(0, swiglu_config);
      auto want = poisoned<bf16>(m * f), got = poisoned<bf16>(m * f), h_out = poisoned<bf16>(m * k);
      ASSERT_TRUE(gemm_decode_swiglu(engine, c.u.data(), m, gu, want.data(), nullptr).ok());
      DecodeNorm norm;
      norm.h = c.h.data();
      norm.delta = c.delta.data();
      norm.h_out = h_out.data();
      norm.weight = c.weight.data();
      norm.eps = 1e-5f;
      ASSERT_TRUE(gemm_decode_norm_swiglu(engine, norm, m, gu, got.data(), nullptr).ok());
      set_decode_norm_configs(0, 2);
      const std::vector<bf16> a = download(got, m * f), b = download(want, m * f);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(bf16) * a.size()), 0)
          << "swiglu config " << swiglu_config << " K " << k << " m " << m;
      const std::vector<bf16> ha = download(h_out, m * k), hb = download(c.h_plain, m * k);
      EXPECT_EQ(std::memcmp(ha.data(), hb.data(), sizeof(bf16) * ha.size()), 0)
          << "swiglu config " << swiglu_config << " K " << k << " m " << m << ": h";
    }
  }
}

TEST(CudaDecodeGemm, TheNormPrologueRefusesWideRowsLongKAndAnAliasedResidualByNumber) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  auto h = poisoned<bf16>(17 * 2056), delta = poisoned<bf16>(17 * 2056), out = poisoned<bf16>(17 * 2056);
  auto w = poisoned<bf16>(64 * 2056), weight = poisoned<bf16>(2056);
  bf16* const y[1] = {out.data()};
  DecodeNorm norm;
  norm.h = h.data();
  norm.delta = delta.data();
  norm.h_out = out.data();
  norm.weight = weight.data();
  const DeviceMatrix narrow[1] = {DeviceMatrix{w.data(), nullptr, 64, 64}};
  const Status wide = gemm_decode_norm(engine, norm, 17, narrow, y, nullptr);
  EXPECT_EQ(wide.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(wide.message().find("17"), std::string::npos) << wide.message();
  const DeviceMatrix sliced[1] = {DeviceMatrix{w.data(), nullptr, 64, 2056}};
  const Status long_k = gemm_decode_norm(engine, norm, 1, sliced, y, nullptr);
  EXPECT_EQ(long_k.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(long_k.message().find("2056"), std::string::npos) << long_k.message();
  norm.h_out = h.data();
  const Status aliased = gemm_decode_norm(engine, norm, 1, narrow, y, nullptr);
  EXPECT_EQ(aliased.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(aliased.message().find("aliasing"), std::string::npos) << aliased.message();
  norm.h_out = nullptr;
  const Status no_out = gemm_decode_norm_swiglu(engine, norm, 1, narrow[0], out.data(), nullptr);
  EXPECT_EQ(no_out.code(), ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
