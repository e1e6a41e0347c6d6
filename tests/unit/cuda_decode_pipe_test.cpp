// The weight-streaming pipeline decode GEMM (gemm_decode_pipe.cu, with row copies or tensor copies of the weights:
// gemm_decode_tma.cu): every configuration under every copy mode gives each row of 1..16 the bits of the one-row
// streaming launch and of a 256-row launch, close to an fp64 reference; the fused SwiGLU and q / k / v launches and
// the engine's routing under set_decode_pipeline keep the bits; refusals carry the numbers.
#ifdef LS_HAVE_CUDA

#include <cmath>

#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

// set_decode_pipeline for one scope, the switch as it was after it (LS_DECODE_PIPE may have set it for the run; a
// failed assertion must not leave it changed for later tests).
struct PipelineScope {
  explicit PipelineScope(bool on, int config = -1, int ring_kb = 0, int chunk = 0)
      : was_on(decode_pipeline_on()), was_narrow(decode_pipe_narrow_on()) {
    set_decode_pipeline(on, config, ring_kb);
    set_decode_pipe_narrow(on);  // off: the streaming kernels everywhere (the oracles)
    set_decode_pipe_chunk(chunk);
  }
  ~PipelineScope() {
    set_decode_pipeline(was_on);
    set_decode_pipe_narrow(was_narrow);
    set_decode_pipe_chunk(0);  // the default
  }
  bool was_on, was_narrow;
};

// One of the pipeline's int switches (set_decode_pipe_tma / _tma_classes / _x / _rows) set for one scope, put back as
// it was after it however the test ends.
template <int (*GET)(), void (*SET)(int)>
struct SwitchScope {
  explicit SwitchScope(int value) : was(GET()) { SET(value); }
  ~SwitchScope() { SET(was); }
  int was;
};
using CopyScope = SwitchScope<decode_pipe_tma, set_decode_pipe_tma>;  // 0 row copies, 1 3D boxes, -1 by class
using ClassesScope = SwitchScope<decode_pipe_tma_classes, set_decode_pipe_tma_classes>;
using XScope = SwitchScope<decode_pipe_x, set_decode_pipe_x>;  // 0 x per stage, 1 x once, -1 by default
constexpr int kCopyModes[] = {0, 1};
constexpr int kXModes[] = {0, 1};
const char* x_name(int mode) { return mode == 0 ? "x per stage" : mode == 1 ? "x once" : "x by default"; }
const char* copy_name(int mode) {
  return mode == 0 ? "row copies" : mode == 1 ? "3D tensor boxes" : "automatic classes";
}

// The plain configurations (the last two are the fused SwiGLU ones).
int plain_configs() { return decode_pipe_config_count() - 2; }

// Normwise relative error of y [m, n] against x @ W^T (+ bias) in fp64.
double normwise_error(const std::vector<float>& y, const std::vector<bf16>& x, const std::vector<bf16>& w,
                      const std::vector<float>& bias, int64_t m, int64_t n, int64_t k) {
  const std::vector<float> xf = to_float(x), wf = to_float(w);
  double diff = 0, norm = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double sum = bias.empty() ? 0.0 : bias[c];
      for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(xf[r * k + i]) * wf[c * k + i];
      diff += (y[r * n + c] - sum) * (y[r * n + c] - sum);
      norm += sum * sum;
    }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

TEST(CudaDecodePipe, EveryConfigurationGivesEachRowOfOneToSixteenTheBitsOfItsOneRowAndTwoHundredFiftySixRowLaunches) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  const PipelineScope off(false);  // the oracles: the streaming kernels
  // (N, K, bias): the narrow projection, N odd, a column tail, the down projection (8 slices), 4 and 3 slices, a
  // chunk tail (K = 192), the smallest K, the wide in_proj (3 column groups a CTA).
  const std::vector<std::tuple<int64_t, int64_t, bool>> shapes = {
      {2048, 2048, false}, {6144, 2048, true}, {1001, 2048, true}, {72, 8192, false}, {136, 4096, true},
      {24, 3072, false},   {264, 192, false},  {40, 64, true}};
  constexpr int64_t kRows = 256;
  for (const auto& [n, k, with_bias] : shapes) {
    const std::vector<bf16> x_host = to_bf16(random_values(kRows * k, 61 + n + k, 2.0f));
    const std::vector<bf16> w_host = to_bf16(random_values(n * k, 62 + k, 0.5f));
    const std::vector<float> bias_host = with_bias ? random_values(n, 63) : std::vector<float>{};
    auto x = upload(x_host);
    auto w = upload(w_host);
    auto bias = upload(with_bias ? bias_host : std::vector<float>{0.0f});
    const DeviceMatrix matrix{w.data(), with_bias ? bias.data() : nullptr, n, k};
    // The oracles: each row's one-row launch (streaming kernels) and the 256-row launch (a tile kernel), fp32 out.
    auto one = poisoned<float>(16 * n);
    for (int64_t r = 0; r < 16; ++r)
      ASSERT_TRUE(engine.gemm(x.data() + r * k, 1, matrix, nullptr, one.data() + r * n, nullptr).ok());
    auto wide = poisoned<float>(kRows * n);
    ASSERT_TRUE(engine.gemm(x.data(), kRows, matrix, nullptr, wide.data(), nullptr).ok());
    const std::vector<float> want = download(one, 16 * n), want_wide = download(wide, kRows * n);
    ASSERT_EQ(std::memcmp(want.data(), want_wide.data(), sizeof(float) * 16 * n), 0) << "N " << n << " K " << k;
    for (const auto& [mode, x_mode] : std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}) {
      const CopyScope copies(mode);
      const XScope x_where(x_mode);
      int ran = 0;
      for (int config = 0; config < plain_configs(); ++config) {
        for (int64_t m = 1; m <= 16; ++m) {
          auto y = poisoned<float>(m * n);
          auto y16 = poisoned<bf16>(m * n);
          const Status status = gemm_decode_pipe(engine, config, x.data(), m, matrix, nullptr, y.data(), nullptr);
          if (!decode_pipe_fits(config, m, matrix)) {  // more shared memory than the device has: refused
            EXPECT_EQ(status.code(), ErrorCode::InvalidArgument) << decode_pipe_config_name(config) << " m " << m;
            continue;
          }
          ASSERT_TRUE(status.ok()) << decode_pipe_config_name(config) << " (" << copy_name(mode) << ", "
                                   << x_name(x_mode) << ") N " << n << " K " << k << ": " << status.message();
          ASSERT_TRUE(gemm_decode_pipe(engine, config, x.data(), m, matrix, y16.data(), nullptr, nullptr).ok());
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ++ran;
          const std::vector<float> got = download(y, m * n);
          for (int64_t r = 0; r < m; ++r)
            ASSERT_EQ(std::memcmp(got.data() + r * n, want.data() + r * n, sizeof(float) * n), 0)
                << decode_pipe_config_name(config) << " (" << copy_name(mode) << ", " << x_name(x_mode) << "): N " << n
                << " K " << k << " m " << m << " row " << r;
          const std::vector<bf16> got16 = download(y16, m * n);
          for (int64_t i = 0; i < m * n; ++i)
            ASSERT_EQ(got16[i].bits, float_to_bf16(want[i]).bits)
                << decode_pipe_config_name(config) << " (" << copy_name(mode) << ", " << x_name(x_mode) << "): N " << n
                << " K " << k << " m " << m << " bf16 output " << i;
          if (m == 16) {
            const std::vector<bf16> x16(x_host.begin(), x_host.begin() + 16 * k);
            EXPECT_LT(normwise_error(got, x16, w_host, bias_host, m, n, k), 1e-3)
                << decode_pipe_config_name(config) << ": N " << n << " K " << k;
          }
        }
      }
      EXPECT_GE(ran, 16) << "N " << n << " K " << k << " (" << copy_name(mode) << ", " << x_name(x_mode)
                         << "): no configuration ran";
    }
  }
}

TEST(CudaDecodePipe, TheFusedSwigluConfigurationsGiveTheBitsOfTheGemmThenSwiglu) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  const PipelineScope off(false);  // the oracles: the streaming kernels
  for (const auto& [f, k, with_bias] :
       std::vector<std::tuple<int64_t, int64_t, bool>>{{8192, 2048, false}, {1001, 2048, true}, {40, 192, false}}) {
    const int64_t n = 2 * f;
    for (const int64_t m : {1, 3, 8, 9, 16}) {
      auto x = upload(to_bf16(random_values(m * k, 71 + m + k, 2.0f)));
      auto w = upload(to_bf16(random_values(n * k, 72 + f, 0.5f)));
      auto bias = upload(random_values(n, 73));
      const DeviceMatrix matrix{w.data(), with_bias ? bias.data() : nullptr, n, k};
      auto gemm_out = poisoned<bf16>(m * n);
      auto plain = poisoned<bf16>(m * f);
      ASSERT_TRUE(engine.gemm(x.data(), m, matrix, gemm_out.data(), nullptr, nullptr).ok());
      ASSERT_TRUE(swiglu(gemm_out.data(), gemm_out.data() + f, m, static_cast<int>(f), n, plain.data(), nullptr).ok());
      const std::vector<bf16> want = download(plain, m * f);
      for (const int mode : kCopyModes) {
        const CopyScope copies(mode);
        for (int config = plain_configs(); config < decode_pipe_config_count(); ++config)
          for (const int x_mode : kXModes) {
            const XScope x_where(x_mode);
            if (!decode_pipe_fits(config, m, matrix)) continue;  // more shared memory than the device has
            auto fused = poisoned<bf16>(m * f);
            ASSERT_TRUE(gemm_decode_pipe(engine, config, x.data(), m, matrix, fused.data(), nullptr, nullptr).ok())
                << decode_pipe_config_name(config);
            const std::vector<bf16> got = download(fused, m * f);
            size_t differ = 0;
            for (size_t i = 0; i < want.size(); ++i) differ += want[i].bits != got[i].bits;
            EXPECT_EQ(differ, 0u) << decode_pipe_config_name(config) << " (" << copy_name(mode) << ", "
                                  << x_name(x_mode) << "): F " << f << " K " << k << " m " << m;
          }
        {  // the engine's fused launch routed to the pipeline, and (one row) by the automatic SwiGLU class
          const PipelineScope on(true);
          auto routed = poisoned<bf16>(m * f);
          ASSERT_TRUE(gemm_decode_swiglu(engine, x.data(), m, matrix, routed.data(), nullptr).ok());
          const std::vector<bf16> got = download(routed, m * f);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(bf16) * m * f), 0)
              << "routed (" << copy_name(mode) << "): F " << f << " m " << m;
        }
        if (mode == 0) {
          const PipelineScope off_but_auto(false);
          set_decode_pipe_narrow(true);  // restored by the scope
          const CopyScope by_class(-1);
          const ClassesScope classes(kDecodeTmaSwiglu);
          auto routed = poisoned<bf16>(m * f);
          ASSERT_TRUE(gemm_decode_swiglu(engine, x.data(), m, matrix, routed.data(), nullptr).ok());
          const std::vector<bf16> got = download(routed, m * f);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(bf16) * m * f), 0)
              << "routed by the automatic SwiGLU class: F " << f << " m " << m;
        }
      }
    }
  }
}

TEST(CudaDecodePipe, UnderTheSwitchTheEnginesGemmsAndTheQKVLaunchKeepTheirBitsAtEveryRingAndChunkSize) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  const PipelineScope off(false);  // the oracles: the streaming kernels
  const int64_t k = 2048;
  const std::vector<int64_t> ns = {2048, 512, 512};
  auto x = upload(to_bf16(random_values(16 * k, 81, 2.0f)));
  std::vector<DeviceBuffer<bf16>> weights;
  std::vector<DeviceMatrix> matrices;
  for (size_t i = 0; i < ns.size(); ++i) {
    weights.push_back(upload(to_bf16(random_values(ns[i] * k, 82 + i, 0.5f))));
    matrices.push_back(DeviceMatrix{weights[i].data(), nullptr, ns[i], k});
  }
  auto down_w = upload(to_bf16(random_values(2048 * 8192, 85, 0.5f)));
  auto down_x = upload(to_bf16(random_values(16 * 8192, 86, 2.0f)));
  const DeviceMatrix down{down_w.data(), nullptr, 2048, 8192};
  for (const int64_t m : {1, 2, 7, 8, 9, 16}) {
    std::vector<std::vector<bf16>> want;
    for (size_t i = 0; i < ns.size(); ++i) {
      auto y = poisoned<bf16>(m * ns[i]);
      ASSERT_TRUE(engine.gemm(x.data(), m, matrices[i], y.data(), nullptr, nullptr).ok());
      want.push_back(download(y, m * ns[i]));
    }
    auto y_down = poisoned<bf16>(m * 2048);
    ASSERT_TRUE(engine.gemm(down_x.data(), m, down, y_down.data(), nullptr, nullptr).ok());
    const std::vector<bf16> want_down = download(y_down, m * 2048);
    for (const auto& [ring_kb, chunk] : std::vector<std::pair<int, int>>{{0, 8}, {24, 4}, {160, 16}, {96, 0}})
      for (const int mode : {0, 1, -2, -3}) {
        // mode -2: the pipeline switch off, the automatic picks on (up to 16 rows), the default classes; -3: the same
        // with every class on 3D boxes
        const PipelineScope on(mode >= 0, -1, ring_kb, chunk);
        if (mode < 0) set_decode_pipe_narrow(true);  // restored by the scope
        const CopyScope copies(std::max(mode, -1));
        const ClassesScope classes(mode == -3 ? 15 : mode == -2 ? decode_pipe_tma_classes() : 0);
        std::vector<DeviceBuffer<bf16>> outs;
        std::vector<bf16*> pointers;
        for (size_t i = 0; i < ns.size(); ++i) {
          outs.push_back(poisoned<bf16>(m * ns[i]));
          pointers.push_back(outs[i].data());
        }
        ASSERT_TRUE(gemm_decode_group(engine, x.data(), m, matrices, pointers, nullptr).ok());
        for (size_t i = 0; i < ns.size(); ++i) {
          const std::vector<bf16> got = download(outs[i], m * ns[i]);
          EXPECT_EQ(std::memcmp(got.data(), want[i].data(), sizeof(bf16) * m * ns[i]), 0)
              << "q / k / v matrix " << i << " m " << m << " ring " << ring_kb << " KB chunk " << chunk << " "
              << copy_name(mode);
          auto single = poisoned<bf16>(m * ns[i]);
          ASSERT_TRUE(engine.gemm(x.data(), m, matrices[i], single.data(), nullptr, nullptr).ok());
          const std::vector<bf16> got_single = download(single, m * ns[i]);
          EXPECT_EQ(std::memcmp(got_single.data(), want[i].data(), sizeof(bf16) * m * ns[i]), 0)
              << "engine gemm N " << ns[i] << " m " << m << " ring " << ring_kb << " KB chunk " << chunk << " "
              << copy_name(mode);
        }
        auto got_down = poisoned<bf16>(m * 2048);
        ASSERT_TRUE(engine.gemm(down_x.data(), m, down, got_down.data(), nullptr, nullptr).ok());
        const std::vector<bf16> got = download(got_down, m * 2048);
        EXPECT_EQ(std::memcmp(got.data(), want_down.data(), sizeof(bf16) * m * 2048), 0)
            << "engine gemm 8192->2048 m " << m << " ring " << ring_kb << " KB chunk " << chunk << " "
            << copy_name(mode);
      }
  }
}

TEST(CudaDecodePipe, UpToSixteenRowsTheOneSliceDecodeShapesTakeThePipelineKeepTheirBitsAndAPlantedKFaultIsCaught) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  const PipelineScope off(false);  // the oracles: the streaming kernels
  // The 1.2B's decode shapes (N, K, SwiGLU): o_proj / out_proj, k / v, conv in_proj, down (8 slices), gate_up.
  const std::vector<std::tuple<int64_t, int64_t, bool>> shapes = {
      {2048, 2048, false}, {512, 2048, false}, {6144, 2048, false}, {2048, 8192, false}, {16384, 2048, true}};
  for (const auto& [n, k, swiglu] : shapes) {
    auto x = upload(to_bf16(random_values(16 * k, 91 + n + k, 2.0f)));
    auto w = upload(to_bf16(random_values(n * k, 92 + n, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, n, k};
    const int64_t out_n = swiglu ? n / 2 : n;
    auto run = [&](int64_t m, bf16* y) {
      return swiglu ? gemm_decode_swiglu(engine, x.data(), m, matrix, y, nullptr)
                    : engine.gemm(x.data(), m, matrix, y, nullptr, nullptr);
    };
    for (const int64_t m : {2, 3, 4, 8, 9, 16}) {
      auto y = poisoned<bf16>(m * out_n);
      ASSERT_TRUE(run(m, y.data()).ok());
      const std::vector<bf16> want = download(y, m * out_n);
      for (const int classes : {decode_pipe_tma_classes(), 15}) {
        const PipelineScope automatic(false);
        set_decode_pipe_narrow(true);  // restored by the scope
        const ClassesScope by_class(classes);
        bool x_once = false;
        const bool routed = decode_pipe_routes(m, matrix, swiglu, &x_once);
        if (swiglu || k > 2048) {  // above one row sliced K and SwiGLU stay on the streaming kernels
          EXPECT_FALSE(routed) << "N " << n << " K " << k << " m " << m << " classes " << classes;
        } else {  // one slice: always the pipeline; x once with row copies (narrow by default), boxes above 2 rows
          EXPECT_TRUE(routed) << "N " << n << " m " << m << " classes " << classes;
          const bool boxes = classes == 15 || n > 4096;
          EXPECT_EQ(x_once, !boxes || m > 2) << "N " << n << " m " << m << " classes " << classes;
        }
        auto got = poisoned<bf16>(m * out_n);
        ASSERT_TRUE(run(m, got.data()).ok());
        EXPECT_EQ(std::memcmp(download(got, m * out_n).data(), want.data(), sizeof(bf16) * m * out_n), 0)
            << "N " << n << " K " << k << (swiglu ? " SwiGLU" : "") << " m " << m << " classes " << classes
            << (routed ? x_once ? " (pipeline, x once)" : " (pipeline, x per stage)" : " (streaming)");
      }
    }
  }
  // The planted fault (each unit's K tiles walked backwards with x once) turns the one-slice and the sliced chains red
  // (3D boxes: the sliced shape's row copies do not fit); x per stage never reads the flag.
  const CopyScope boxes(1);
  for (const int64_t k : {2048, 8192}) {
    auto x = upload(to_bf16(random_values(4 * k, 97 + k, 2.0f)));
    auto w = upload(to_bf16(random_values(2048 * k, 98, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, 2048, k};
    auto y = poisoned<float>(4 * 2048);
    ASSERT_TRUE(engine.gemm(x.data(), 4, matrix, nullptr, y.data(), nullptr).ok());
    const std::vector<float> want = download(y, 4 * 2048);
    for (const int x_mode : kXModes) {
      const XScope x_where(x_mode);
      set_decode_pipe_fault_for_test(true);
      auto got = poisoned<float>(4 * 2048);
      const Status status = gemm_decode_pipe(engine, -1, x.data(), 4, matrix, nullptr, got.data(), nullptr);
      set_decode_pipe_fault_for_test(false);
      ASSERT_TRUE(status.ok()) << status.message();
      const int64_t differs = first_differing_row(download(got, 4 * 2048), want, 4, 2048);
      if (x_mode == 1) {
        EXPECT_GE(differs, 0) << "K " << k << ": the planted fault went unseen";
      } else {
        EXPECT_EQ(differs, -1) << "K " << k << ": x per stage read the fault flag";
      }
    }
  }
}

TEST(CudaDecodePipe, RefusesSeventeenRowsKOffSixtyFourSlicedSwigluAndAnUnknownConfigurationByNumber) {
  LS_SKIP_WITHOUT_DEVICE();
  const GemmEngine engine;
  auto x = poisoned<bf16>(17 * 3072);
  auto w = poisoned<bf16>(64 * 3072);
  auto y = poisoned<bf16>(17 * 64);
  struct Case {
    int config;
    int64_t m, k;
    std::string says;
  };
  const std::vector<Case> cases = {
      {0, 17, 64, "m 17"},
      {0, 1, 72, "K 72"},
      {plain_configs(), 1, 3072, "K 3072"},  // SwiGLU takes one slice only
      {decode_pipe_config_count(), 1, 64, "config " + std::to_string(decode_pipe_config_count())}};
  for (const Case& c : cases) {
    const DeviceMatrix matrix{w.data(), nullptr, 64, c.k};
    const Status refused = gemm_decode_pipe(engine, c.config, x.data(), c.m, matrix, y.data(), nullptr, nullptr);
    EXPECT_EQ(refused.code(), ErrorCode::InvalidArgument) << c.says;
    EXPECT_NE(refused.message().find(c.says), std::string::npos) << refused.message();
  }
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
