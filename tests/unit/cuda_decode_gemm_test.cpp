// The decode GEMM kernel's variants (m <= 16) give, row by row, the bits of the engine's one-row launch; the fused
// gate_up GEMM + SwiGLU and the grouped q / k / v launch give the bits of the separate launches; the streamed verify
// windows and the L2 prefetch keep them (the staged picks and norm prologues: cuda_decode_staged_test.cpp).
#ifdef LS_HAVE_CUDA

#include <span>

#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

TEST(CudaDecodeGemm, EveryVariantGivesEachRowTheBitsOfItsOneRowLaunchAtOneToSixteenRows) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  // (N, K): one slice with N odd and a 16-column tail; K = 72 (one tile, a tail); 2056 (three slices, the last one 8
  // wide); 8192 (eight slices, the down projection); 9216 (nine); the model's wide and narrow one-slice shapes.
  const std::vector<std::tuple<int64_t, int64_t, bool>> shapes = {
      {1001, 2048, true}, {40, 72, false}, {136, 2056, true}, {520, 8192, false}, {64, 9216, false},
      {4096, 2048, false}, {512, 2048, true}};
  const std::vector<int64_t> widths = {1, 2, 5, 8, 9, 16};
  for (const auto& [n, k, with_bias] : shapes) {
    const int64_t max_m = widths.back();
    auto x = upload(to_bf16(random_values(max_m * k, 31 + n, 2.0f)));
    auto w = upload(to_bf16(random_values(n * k, 32 + k, 0.5f)));
    auto bias = upload(random_values(n, 33));
    const DeviceMatrix matrix{w.data(), with_bias ? bias.data() : nullptr, n, k};
    // The oracle: the engine's one-row launch of every row, fp32 and bf16 out.
    auto one_f32 = poisoned<float>(max_m * n);
    auto one_b16 = poisoned<bf16>(max_m * n);
    for (int64_t r = 0; r < max_m; ++r) {
      ASSERT_TRUE(engine.gemm(x.data() + r * k, 1, matrix, nullptr, one_f32.data() + r * n, nullptr).ok());
      ASSERT_TRUE(engine.gemm(x.data() + r * k, 1, matrix, one_b16.data() + r * n, nullptr, nullptr).ok());
    }
    const std::vector<float> want_f32 = download(one_f32, max_m * n);
    const std::vector<bf16> want_b16 = download(one_b16, max_m * n);
    for (int variant = 0; variant < decode_variant_count(); ++variant) {
      for (const int64_t m : widths) {
        auto y_f32 = poisoned<float>(m * n);
        auto y_b16 = poisoned<bf16>(m * n);
        ASSERT_TRUE(gemm_decode_variant(variant, x.data(), m, matrix, nullptr, y_f32.data(), nullptr).ok());
        ASSERT_TRUE(gemm_decode_variant(variant, x.data(), m, matrix, y_b16.data(), nullptr, nullptr).ok());
        const std::vector<float> got_f32 = download(y_f32, m * n);
        const std::vector<bf16> got_b16 = download(y_b16, m * n);
        EXPECT_EQ(first_differing_row(got_f32, want_f32, m, n), -1)
            << decode_variant_name(variant) << ": N " << n << " K " << k << " m " << m << " (fp32 out)";
        EXPECT_EQ(std::memcmp(got_b16.data(), want_b16.data(), sizeof(bf16) * m * n), 0)
            << decode_variant_name(variant) << ": N " << n << " K " << k << " m " << m << " (bf16 out)";
      }
    }
  }
}

TEST(CudaDecodeGemm, GateUpWithSwigluInOneLaunchGivesTheBitsOfTheGemmThenSwiglu) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  // (F, K, bias): the model's FFN shape, F odd (a lone last column), a one-tile K with a tail, a 16-column tail.
  const std::vector<std::tuple<int64_t, int64_t, bool>> shapes = {
      {8192, 2048, false}, {1001, 2048, true}, {40, 72, true}, {136, 1000, false}};
  for (const auto& [f, k, with_bias] : shapes) {
    const int64_t n = 2 * f;
    for (const int64_t m : {1, 3, 8, 9, 16}) {
      auto x = upload(to_bf16(random_values(m * k, 41 + m + k, 2.0f)));
      auto w = upload(to_bf16(random_values(n * k, 42 + f, 0.5f)));
      auto bias = upload(random_values(n, 43));
      const DeviceMatrix matrix{w.data(), with_bias ? bias.data() : nullptr, n, k};
      ASSERT_TRUE(decode_swiglu_fits(m, matrix));
      auto wide = poisoned<bf16>(m * n);
      auto plain = poisoned<bf16>(m * f);
      auto fused = poisoned<bf16>(m * f);
      ASSERT_TRUE(engine.gemm(x.data(), m, matrix, wide.data(), nullptr, nullptr).ok());
      ASSERT_TRUE(swiglu(wide.data(), wide.data() + f, m, static_cast<int>(f), n, plain.data(), nullptr).ok());
      ASSERT_TRUE(gemm_decode_swiglu(engine, x.data(), m, matrix, fused.data(), nullptr).ok());
      const std::vector<bf16> want = download(plain, m * f), got = download(fused, m * f);
      size_t differ = 0, nan = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        differ += want[i].bits != got[i].bits;
        nan += (got[i].bits & 0x7fffu) > 0x7f80u;
      }
      EXPECT_EQ(differ, 0u) << "F " << f << " K " << k << " m " << m;
      EXPECT_EQ(nan, 0u) << "F " << f << " K " << k << " m " << m << ": outputs left unwritten";
    }
  }
  // What it does not take: 17 rows, K above one slice, an odd N; each refused by its numbers.
  auto x = poisoned<bf16>(17 * 2056);
  auto w = poisoned<bf16>(64 * 2056);
  auto act = poisoned<bf16>(17 * 64);
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{17, 64, 64}, {1, 64, 2056}, {1, 63, 64}}) {
    const DeviceMatrix matrix{w.data(), nullptr, n, k};
    EXPECT_FALSE(decode_swiglu_fits(m, matrix));
    const Status refused = gemm_decode_swiglu(engine, x.data(), m, matrix, act.data(), nullptr);
    EXPECT_EQ(refused.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(refused.message().find("m " + std::to_string(m) + ", N " + std::to_string(n) + ", K " + std::to_string(k)),
              std::string::npos)
        << refused.message();
  }
}

TEST(CudaDecodeGemm, QKAndVInOneLaunchGiveTheBitsOfThreeGemms) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  // (N of each matrix, K): the 1.2B's q / k / v, odd and tiny N with a bias, a K tail.
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> groups = {
      {{2048, 512, 512}, 2048}, {{1001, 7, 64, 300}, 1000}, {{40}, 72}};
  for (const auto& [ns, k] : groups) {
    for (const int64_t m : {1, 5, 8, 9, 16}) {
      auto x = upload(to_bf16(random_values(m * k, 51 + m + k, 2.0f)));
      std::vector<DeviceBuffer<bf16>> weights, fused, plain;
      std::vector<DeviceBuffer<float>> biases;
      std::vector<DeviceMatrix> matrices;
      std::vector<bf16*> outputs;
      for (size_t i = 0; i < ns.size(); ++i) {
        weights.push_back(upload(to_bf16(random_values(ns[i] * k, 52 + i + k, 0.5f))));
        biases.push_back(upload(random_values(ns[i], 53 + i)));
        matrices.push_back(DeviceMatrix{weights[i].data(), i == 1 ? biases[i].data() : nullptr, ns[i], k});
        fused.push_back(poisoned<bf16>(m * ns[i]));
        plain.push_back(poisoned<bf16>(m * ns[i]));
        outputs.push_back(fused[i].data());
      }
      ASSERT_TRUE(decode_group_fits(m, matrices));
      ASSERT_TRUE(gemm_decode_group(engine, x.data(), m, matrices, outputs, nullptr).ok());
      for (size_t i = 0; i < ns.size(); ++i) {
        ASSERT_TRUE(engine.gemm(x.data(), m, matrices[i], plain[i].data(), nullptr, nullptr).ok());
        const std::vector<bf16> got = download(fused[i], m * ns[i]), want = download(plain[i], m * ns[i]);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(bf16) * got.size()), 0)
            << "matrix " << i << " of N " << ns[i] << ", K " << k << ", m " << m;
      }
    }
  }
  // 33 rows (32 is the default limit, set_decode_rows), mixed K, five matrices: not taken, and refused by number.
  auto x = poisoned<bf16>(33 * 128);
  auto w = poisoned<bf16>(64 * 128);
  auto y = poisoned<bf16>(33 * 64);
  const DeviceMatrix a{w.data(), nullptr, 64, 64}, b{w.data(), nullptr, 64, 128};
  bf16* const ys[5] = {y.data(), y.data(), y.data(), y.data(), y.data()};
  const std::vector<std::pair<int64_t, std::vector<DeviceMatrix>>> refused_cases = {
      {33, {a, a}}, {1, {a, b}}, {1, {a, a, a, a, a}}};
  for (const auto& [m, ws] : refused_cases) {
    EXPECT_FALSE(decode_group_fits(m, ws));
    const Status refused = gemm_decode_group(engine, x.data(), m, ws, std::span<bf16* const>(ys, ws.size()), nullptr);
    EXPECT_EQ(refused.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(refused.message().find("m " + std::to_string(m) + ", " + std::to_string(ws.size()) + " matrices"),
              std::string::npos)
        << refused.message();
  }
}

// The streaming kernel on verify windows (set_decode_rows(64): 32 / 64 x rows a tile): every row of the engine's
// launch at 17..64 rows bitwise its one-row launch (fp32 and bf16 out; one slice, sliced, a three-slice K with a
// tail, a one-tile K), the planted K-order fault red; the fused SwiGLU and q / k / v launches bitwise the verify
// tiles' GEMMs (then swiglu) at those rows; 65 rows refused by number.
TEST(CudaDecodeGemm, StreamedWindowsOfSeventeenToSixtyFourRowsGiveTheOneRowBitsAndCatchThePlantedFault) {
  LS_SKIP_WITHOUT_DEVICE();
  const DefaultPicksAtExit defaults;
  struct StreamedAt17To32 {  // the streaming kernel, not the pipeline's 17..32-row windows (the default since s13A)
    StreamedAt17To32() : rows32(decode_pipe_rows32()) { set_decode_pipe_rows32(false); }
    ~StreamedAt17To32() { set_decode_pipe_rows32(rows32); }
    bool rows32;
  } streamed;
  const GemmEngine engine;
  const std::vector<int64_t> widths = {17, 24, 32, 33, 48, 64};
  for (const auto& [n, k, with_bias] : std::vector<std::tuple<int64_t, int64_t, bool>>{
           {2048, 2048, false}, {6144, 2048, true}, {2048, 8192, false}, {1001, 2056, true}, {40, 72, false}}) {
    auto x = upload(to_bf16(random_values(64 * k, 111 + n, 2.0f)));
    auto w = upload(to_bf16(random_values(n * k, 112 + k, 0.5f)));
    auto bias = upload(random_values(n, 113));
    const DeviceMatrix matrix{w.data(), with_bias ? bias.data() : nullptr, n, k};
    set_decode_rows(16);
    auto one = poisoned<float>(64 * n);
    for (int64_t r = 0; r < 64; ++r)
      ASSERT_TRUE(engine.gemm(x.data() + r * k, 1, matrix, nullptr, one.data() + r * n, nullptr).ok());
    const std::vector<float> want = download(one, 64 * n);
    set_decode_rows(64);
    for (const int64_t m : widths) {
      ASSERT_EQ(std::string(engine.tile_name(m, n, k)), "decode 8 warps") << "N " << n << " K " << k << " m " << m;
      auto y = poisoned<float>(m * n);
      auto y_b16 = poisoned<bf16>(m * n);
      ASSERT_TRUE(engine.gemm(x.data(), m, matrix, nullptr, y.data(), nullptr).ok());
      ASSERT_TRUE(engine.gemm(x.data(), m, matrix, y_b16.data(), nullptr, nullptr).ok());
      EXPECT_EQ(first_differing_row(download(y, m * n), want, m, n), -1) << "N " << n << " K " << k << " m " << m;
      const std::vector<bf16> got_b16 = download(y_b16, m * n);
      size_t differ = 0;
      for (size_t i = 0; i < got_b16.size(); ++i) differ += got_b16[i].bits != float_to_bf16(want[i]).bits;
      EXPECT_EQ(differ, 0u) << "N " << n << " K " << k << " m " << m << " (bf16 out)";
    }
    GemmEngine faulty;
    faulty.set_fault_reverse_k_for_test(true);
    auto y = poisoned<float>(24 * n);
    ASSERT_TRUE(faulty.gemm(x.data(), 24, matrix, nullptr, y.data(), nullptr).ok());
    if (k > 64) {
      EXPECT_NE(first_differing_row(download(y, 24 * n), want, 24, n), -1) << "N " << n << " K " << k;
    }
  }
  // The fused launches against the verify tiles' GEMMs: gate_up (F = 1000 with bias, K = 2048) then swiglu; q / k / v.
  constexpr int64_t k = 2048, f = 1000;
  auto x = upload(to_bf16(random_values(64 * k, 121, 2.0f)));
  auto gate_up = upload(to_bf16(random_values(2 * f * k, 122, 0.5f)));
  auto gate_up_bias = upload(random_values(2 * f, 123));
  const DeviceMatrix gu{gate_up.data(), gate_up_bias.data(), 2 * f, k};
  std::vector<DeviceBuffer<bf16>> qkv_w;
  std::vector<DeviceMatrix> qkv;
  for (const int64_t n : {2048, 512, 264}) {
    qkv_w.push_back(upload(to_bf16(random_values(n * k, 124 + n, 0.5f))));
    qkv.push_back(DeviceMatrix{qkv_w.back().data(), nullptr, n, k});
  }
  for (const int64_t m : widths) {
    set_decode_rows(16);
    ASSERT_FALSE(decode_swiglu_fits(m, gu));
    auto wide = poisoned<bf16>(m * 2 * f), want = poisoned<bf16>(m * f), got = poisoned<bf16>(m * f);
    ASSERT_TRUE(engine.gemm(x.data(), m, gu, wide.data(), nullptr, nullptr).ok());
    ASSERT_TRUE(swiglu(wide.data(), wide.data() + f, m, static_cast<int>(f), 2 * f, want.data(), nullptr).ok());
    std::vector<std::vector<bf16>> want_qkv;
    for (const DeviceMatrix& w : qkv) {
      auto y = poisoned<bf16>(m * w.rows);
      ASSERT_TRUE(engine.gemm(x.data(), m, w, y.data(), nullptr, nullptr).ok());
      want_qkv.push_back(download(y, m * w.rows));
    }
    set_decode_rows(64);
    ASSERT_TRUE(decode_swiglu_fits(m, gu) && decode_group_fits(m, qkv));
    ASSERT_TRUE(gemm_decode_swiglu(engine, x.data(), m, gu, got.data(), nullptr).ok());
    const std::vector<bf16> a = download(got, m * f), b = download(want, m * f);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(bf16) * a.size()), 0) << "swiglu m " << m;
    std::vector<DeviceBuffer<bf16>> ys;
    std::vector<bf16*> y_ptr;
    for (const DeviceMatrix& w : qkv) {
      ys.push_back(poisoned<bf16>(m * w.rows));
      y_ptr.push_back(ys.back().data());
    }
    ASSERT_TRUE(gemm_decode_group(engine, x.data(), m, qkv, y_ptr, nullptr).ok());
    for (size_t i = 0; i < qkv.size(); ++i) {
      const std::vector<bf16> got_i = download(ys[i], m * qkv[i].rows);
      EXPECT_EQ(std::memcmp(got_i.data(), want_qkv[i].data(), sizeof(bf16) * got_i.size()), 0)
          << "q / k / v matrix " << i << " m " << m;
    }
  }
  set_decode_rows(64);
  auto act = poisoned<bf16>(65 * f);
  const Status refused = gemm_decode_swiglu(engine, x.data(), 65, gu, act.data(), nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message().find("m 65"), std::string::npos) << refused.message();
  EXPECT_FALSE(decode_group_fits(65, qkv));
}

// With the L2 weight prefetch (sm_90: bulk prefetches of each item's weight rows before the programmatic wait; a
// no-op elsewhere) every streaming variant, the fused SwiGLU and the q / k / v launch give the bits they give without
// it: the model's one-slice and sliced shapes, a three-slice K with a tail and an odd N, a one-tile K, outputs
// poisoned first.
TEST(CudaDecodeGemm, WithTheL2PrefetchEveryStreamingLaunchGivesTheBitsItGivesWithout) {
  LS_SKIP_WITHOUT_DEVICE();
  const DefaultPicksAtExit defaults;
  const GemmEngine engine;
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {2048, 2048}, {6144, 2048}, {16384, 2048}, {2048, 8192}, {1001, 2056}, {40, 72}}) {
    auto x = upload(to_bf16(random_values(16 * k, 91 + n, 2.0f)));
    auto w = upload(to_bf16(random_values(n * k, 92 + k, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, n, k};
    for (int variant = 1; variant < decode_variant_count() - decode_staged_config_count(); ++variant) {
      for (const int64_t m : {1, 9, 16}) {
        set_decode_l2_prefetch(false);
        auto want = poisoned<bf16>(m * n), got = poisoned<bf16>(m * n);
        ASSERT_TRUE(gemm_decode_variant(variant, x.data(), m, matrix, want.data(), nullptr, nullptr).ok());
        set_decode_l2_prefetch(true);
        ASSERT_TRUE(gemm_decode_variant(variant, x.data(), m, matrix, got.data(), nullptr, nullptr).ok());
        const std::vector<bf16> a = download(got, m * n), b = download(want, m * n);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(bf16) * a.size()), 0)
            << decode_variant_name(variant) << ": N " << n << " K " << k << " m " << m;
      }
    }
  }
  // The fused gate_up + SwiGLU (the model's F = 8192) and q / k / v (2048, 512, 512), K = 2048.
  constexpr int64_t k = 2048, f = 8192;
  auto x = upload(to_bf16(random_values(16 * k, 95, 2.0f)));
  auto gate_up = upload(to_bf16(random_values(2 * f * k, 96, 0.5f)));
  const DeviceMatrix gu{gate_up.data(), nullptr, 2 * f, k};
  std::vector<DeviceBuffer<bf16>> qkv_w;
  std::vector<DeviceMatrix> qkv;
  for (const int64_t n : {2048, 512, 512}) {
    qkv_w.push_back(upload(to_bf16(random_values(n * k, 97 + n, 0.5f))));
    qkv.push_back(DeviceMatrix{qkv_w.back().data(), nullptr, n, k});
  }
  for (const int64_t m : {1, 8, 16}) {
    std::vector<std::vector<bf16>> outputs[2];
    for (const bool prefetch : {false, true}) {
      set_decode_l2_prefetch(prefetch);
      auto act = poisoned<bf16>(m * f);
      ASSERT_TRUE(gemm_decode_swiglu(engine, x.data(), m, gu, act.data(), nullptr).ok());
      outputs[prefetch].push_back(download(act, m * f));
      std::vector<DeviceBuffer<bf16>> ys;
      std::vector<bf16*> y_ptr;
      for (const DeviceMatrix& w : qkv) {
        ys.push_back(poisoned<bf16>(m * w.rows));
        y_ptr.push_back(ys.back().data());
      }
      ASSERT_TRUE(gemm_decode_group(engine, x.data(), m, qkv, y_ptr, nullptr).ok());
      for (size_t i = 0; i < qkv.size(); ++i) outputs[prefetch].push_back(download(ys[i], m * qkv[i].rows));
    }
    for (size_t i = 0; i < outputs[0].size(); ++i)
      EXPECT_EQ(std::memcmp(outputs[0][i].data(), outputs[1][i].data(), sizeof(bf16) * outputs[0][i].size()), 0)
          << (i == 0 ? "swiglu" : "q / k / v matrix " + std::to_string(i - 1)) << " m " << m;
  }
}

TEST(CudaDecodeGemm, VariantsRefuseAnUnknownNumberAndMoreThanSixteenRowsByNumber) {
  LS_SKIP_WITHOUT_DEVICE();
  auto x = poisoned<bf16>(17 * 64);
  auto w = poisoned<bf16>(64 * 64);
  auto y = poisoned<float>(17 * 64);
  const DeviceMatrix matrix{w.data(), nullptr, 64, 64};
  const Status unknown = gemm_decode_variant(decode_variant_count(), x.data(), 1, matrix, nullptr, y.data(), nullptr);
  EXPECT_EQ(unknown.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(unknown.message().find(std::to_string(decode_variant_count())), std::string::npos) << unknown.message();
  const Status wide = gemm_decode_variant(0, x.data(), 17, matrix, nullptr, y.data(), nullptr);
  EXPECT_EQ(wide.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(wide.message().find("17"), std::string::npos) << wide.message();
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
