// The pipeline decode GEMM with x copied once in K pieces or by the threads' loads (set_decode_pipe_x_pieces /
// set_decode_pipe_x_loads, session 12): every configuration gives each row of 1..16 the bits of its one-row streaming
// launch at every piece size (a piece of one tile, pieces that do not divide K, pieces raised to fit 16 barriers on K =
// 8192) and with loads, the fused SwiGLU configurations and the engine's routed launches keep their bits, and the
// planted faults (every piece copied from piece 0's K range; with loads, the K walk backwards) turn them red. With
// set_decode_pipe_norm, gemm_decode_norm on the pipeline (x made by each CTA from the residual add + RMSNorm) gives the
// bits of add_rms_norm then the GEMMs in both norm orders, and its planted K fault turns it red.
#ifdef LS_HAVE_CUDA

#include <string>
#include <utility>

#include "compute/cuda/gemm_decode_x.h"
#include "compute/cuda/norm_order.h"
#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

// The pipeline's switches for one scope, put back as they were however the test ends: the pipeline (off: the
// streaming kernels, the oracles), the copy mode, x once, and how x fills (piece tiles >= 0; kLoads: the loads).
constexpr int kLoads = -1;
struct PiecesScope {
  PiecesScope(bool pipeline, int copies, int x_mode, int fill)
      : was_on(decode_pipeline_on()), was_narrow(decode_pipe_narrow_on()), was_copies(decode_pipe_tma()),
        was_x(decode_pipe_x()), was_pieces(decode_pipe_x_pieces()), was_loads(decode_pipe_x_loads()) {
    set_decode_pipeline(pipeline);
    set_decode_pipe_narrow(pipeline);
    set_decode_pipe_tma(copies);
    set_decode_pipe_x(x_mode);
    set_decode_pipe_x_pieces(fill == kLoads ? 0 : fill);
    set_decode_pipe_x_loads(fill == kLoads);
  }
  ~PiecesScope() {
    set_decode_pipeline(was_on);
    set_decode_pipe_narrow(was_narrow);
    set_decode_pipe_tma(was_copies);
    set_decode_pipe_x(was_x);
    set_decode_pipe_x_pieces(was_pieces);
    set_decode_pipe_x_loads(was_loads);
    set_decode_pipe_fault_for_test(false);
  }
  bool was_on, was_narrow;
  int was_copies, was_x, was_pieces;
  bool was_loads;
};
std::string fill_name(int fill) {
  return fill == kLoads ? "x by loads" : "pieces of " + std::to_string(fill) + " tiles";
}

const char* copy_name(int mode) { return mode == 0 ? "row copies" : "3D tensor boxes"; }
int plain_configs() { return decode_pipe_config_count() - 2; }  // the last two are the fused SwiGLU ones

TEST(CudaDecodePipeX, EveryConfigurationPieceSizeAndTheLoadsGiveEachRowOfOneToSixteenTheBitsOfItsOneRowLaunch) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  // (N, K, bias): the narrow projection, the wide in_proj, N odd with a column tail, the down projection (8 slices:
  // pieces raised to 8 tiles), a K of 3 tiles (pieces of 2: a short last piece).
  const std::vector<std::tuple<int64_t, int64_t, bool>> shapes = {
      {2048, 2048, false}, {6144, 2048, true}, {1001, 2048, true}, {72, 8192, false}, {264, 192, false}};
  for (const auto& [n, k, with_bias] : shapes) {
    auto x = upload(to_bf16(random_values(16 * k, 161 + n + k, 2.0f)));
    auto w = upload(to_bf16(random_values(n * k, 162 + k, 0.5f)));
    auto bias = upload(with_bias ? random_values(n, 163) : std::vector<float>{0.0f});
    const DeviceMatrix matrix{w.data(), with_bias ? bias.data() : nullptr, n, k};
    std::vector<float> want;
    {
      const PiecesScope oracle(false, -1, -1, 0);
      auto one = poisoned<float>(16 * n);
      for (int64_t r = 0; r < 16; ++r)
        ASSERT_TRUE(engine.gemm(x.data() + r * k, 1, matrix, nullptr, one.data() + r * n, nullptr).ok());
      want = download(one, 16 * n);
    }
    for (const int copies : {0, 1})
      for (const int fill : {1, 2, 4, 8, kLoads}) {
        const PiecesScope pieces(false, copies, 1, fill);
        int ran = 0;
        for (int config = 0; config < plain_configs(); ++config)
          for (int64_t m = 1; m <= 16; ++m) {
            if (!decode_pipe_fits(config, m, matrix)) continue;  // more shared memory than the device has
            auto y = poisoned<float>(m * n);
            ASSERT_TRUE(gemm_decode_pipe(engine, config, x.data(), m, matrix, nullptr, y.data(), nullptr).ok())
                << decode_pipe_config_name(config) << " m " << m;
            ++ran;
            const int64_t differs = first_differing_row(download(y, m * n), want, m, n);
            ASSERT_EQ(differs, -1) << decode_pipe_config_name(config) << " (" << copy_name(copies) << ", "
                                   << fill_name(fill) << "): N " << n << " K " << k << " m " << m;
          }
        EXPECT_GE(ran, 16) << "N " << n << " K " << k << ": no configuration ran";
      }
  }
}

TEST(CudaDecodePipeX, TheFusedSwigluConfigurationsAndTheEnginesRoutedLaunchesKeepTheirBits) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  const int64_t f = 1001, k = 2048, n = 2 * f;
  auto x = upload(to_bf16(random_values(16 * k, 171, 2.0f)));
  auto w = upload(to_bf16(random_values(n * k, 172, 0.5f)));
  auto bias = upload(random_values(n, 173));
  const DeviceMatrix matrix{w.data(), bias.data(), n, k};
  // The 1.2B's one-slice decode shapes the automatic picks route at 2..16 rows (o_proj / out_proj, k / v, in_proj).
  std::vector<DeviceBuffer<bf16>> weights;
  std::vector<DeviceMatrix> decode_shapes;
  for (const int64_t rows : {2048, 512, 6144}) {
    weights.push_back(upload(to_bf16(random_values(rows * k, 174 + rows, 0.5f))));
    decode_shapes.push_back(DeviceMatrix{weights.back().data(), nullptr, rows, k});
  }
  for (const int64_t m : {1, 3, 8, 9, 16}) {
    std::vector<bf16> want_swiglu;
    std::vector<std::vector<bf16>> want;
    {
      const PiecesScope oracle(false, -1, -1, 0);
      auto out = poisoned<bf16>(m * f);
      ASSERT_TRUE(gemm_decode_swiglu(engine, x.data(), m, matrix, out.data(), nullptr).ok());
      want_swiglu = download(out, m * f);
      for (const DeviceMatrix& shape : decode_shapes) {
        auto y = poisoned<bf16>(m * shape.rows);
        ASSERT_TRUE(engine.gemm(x.data(), m, shape, y.data(), nullptr, nullptr).ok());
        want.push_back(download(y, m * shape.rows));
      }
    }
    for (const int copies : {0, 1})
      for (const int fill : {1, 4, kLoads}) {
        const PiecesScope pieces(false, copies, 1, fill);
        for (int config = plain_configs(); config < decode_pipe_config_count(); ++config) {
          if (!decode_pipe_fits(config, m, matrix)) continue;
          auto fused = poisoned<bf16>(m * f);
          ASSERT_TRUE(gemm_decode_pipe(engine, config, x.data(), m, matrix, fused.data(), nullptr, nullptr).ok());
          EXPECT_EQ(std::memcmp(download(fused, m * f).data(), want_swiglu.data(), sizeof(bf16) * m * f), 0)
              << decode_pipe_config_name(config) << " (" << copy_name(copies) << ", " << fill_name(fill) << ") m "
              << m;
        }
      }
    // The engine under the automatic picks and the default copies / x, with pieces, then loads.
    for (const int fill : {4, kLoads}) {
      const PiecesScope automatic(false, -1, -1, fill);
      set_decode_pipe_narrow(true);  // restored by the scope
      for (size_t i = 0; i < decode_shapes.size(); ++i) {
        const DeviceMatrix& shape = decode_shapes[i];
        bool x_once = false;
        EXPECT_TRUE(decode_pipe_routes(m, shape, false, &x_once)) << "N " << shape.rows << " m " << m;
        auto y = poisoned<bf16>(m * shape.rows);
        ASSERT_TRUE(engine.gemm(x.data(), m, shape, y.data(), nullptr, nullptr).ok());
        EXPECT_EQ(std::memcmp(download(y, m * shape.rows).data(), want[i].data(), sizeof(bf16) * m * shape.rows), 0)
            << "engine gemm N " << shape.rows << " m " << m << (x_once ? " (x once, " : " (x per stage, ")
            << fill_name(fill) << ")";
      }
    }
  }
}

TEST(CudaDecodePipeX, ThePlantedFaultsAreCaughtOnOneSliceAndSlicedK) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  const int64_t n = 2048, m = 4;
  for (const int64_t k : {2048, 8192}) {
    auto x = upload(to_bf16(random_values(m * k, 181 + k, 2.0f)));
    auto w = upload(to_bf16(random_values(n * k, 182, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, n, k};
    std::vector<float> want;
    {
      const PiecesScope oracle(false, -1, -1, 0);
      auto y = poisoned<float>(m * n);
      ASSERT_TRUE(engine.gemm(x.data(), m, matrix, nullptr, y.data(), nullptr).ok());
      want = download(y, m * n);
    }
    for (const auto& [copies, fill] : std::vector<std::pair<int, int>>{{0, 4}, {1, 4}, {0, kLoads}, {1, kLoads}}) {
      const PiecesScope pieces(false, copies, 1, fill);
      if (copies == 0 && k > 2048) continue;  // the sliced shape's row copies do not fit with x once
      // Without the fault the bits; with it (pieces: every piece copied from piece 0's K range; loads: the K walk
      // backwards) a row differs.
      for (const bool fault : {false, true}) {
        set_decode_pipe_fault_for_test(fault);
        auto got = poisoned<float>(m * n);
        const Status status = gemm_decode_pipe(engine, -1, x.data(), m, matrix, nullptr, got.data(), nullptr);
        set_decode_pipe_fault_for_test(false);
        ASSERT_TRUE(status.ok()) << status.message();
        const int64_t differs = first_differing_row(download(got, m * n), want, m, n);
        if (fault) {
          EXPECT_GE(differs, 0) << copy_name(copies) << ", " << fill_name(fill) << " K " << k
                                << ": the planted fault went unseen";
        } else {
          EXPECT_EQ(differs, -1) << copy_name(copies) << ", " << fill_name(fill) << " K " << k << ": bits changed";
        }
      }
    }
  }
}

// The norm fill's switches for one scope: set_decode_pipe_norm and set_norm_sliced, put back however the test ends.
struct NormFillScope {
  NormFillScope(bool pipe_norm, bool sliced) : was_norm(decode_pipe_norm()), was_sliced(norm_sliced()) {
    set_decode_pipe_norm(pipe_norm);
    set_norm_sliced(sliced);
  }
  ~NormFillScope() {
    set_decode_pipe_norm(was_norm);
    set_norm_sliced(was_sliced);
    set_decode_pipe_fault_for_test(false);
  }
  bool was_norm, was_sliced;
};

// Elements of gemm_decode_norm's outputs (and h_out) that differ from add_rms_norm (rms_norm without delta) then the
// GEMMs, on fresh rows, outputs poisoned first; fault: the planted K walk backwards (on the pipeline only).
int64_t norm_fill_differences(const GemmEngine& engine, const std::vector<int64_t>& ns, int64_t k, int64_t m,
                              bool with_delta, bool sliced, bool fault) {
  auto h = upload(to_bf16(random_values(m * k, 191 + m + k, 3.0f)));
  auto delta = upload(to_bf16(random_values(m * k, 192 + m + k, 2.0f)));
  auto weight = upload(to_bf16(random_values(k, 193 + k, 1.0f)));
  std::vector<DeviceBuffer<bf16>> weights, want, got;
  std::vector<DeviceMatrix> ws;
  std::vector<bf16*> want_ptr, got_ptr;
  for (const int64_t n : ns) {
    weights.push_back(upload(to_bf16(random_values(n * k, 194 + n + k, 0.5f))));
    ws.push_back(DeviceMatrix{weights.back().data(), nullptr, n, k});
    want.push_back(poisoned<bf16>(m * n));
    got.push_back(poisoned<bf16>(m * n));
    want_ptr.push_back(want.back().data());
    got_ptr.push_back(got.back().data());
  }
  auto h_plain = upload(download(h, m * k));
  auto u = poisoned<bf16>(m * k);
  const NormFillScope order(false, sliced);
  EXPECT_TRUE((with_delta ? add_rms_norm(h_plain.data(), delta.data(), m, static_cast<int>(k), weight.data(), 1e-5f,
                                         u.data(), nullptr)
                          : rms_norm(h.data(), m, static_cast<int>(k), weight.data(), 1e-5f, u.data(), nullptr))
                  .ok());
  for (size_t i = 0; i < ns.size(); ++i)
    EXPECT_TRUE(engine.gemm(u.data(), m, ws[i], want_ptr[i], nullptr, nullptr).ok());
  auto h_out = poisoned<bf16>(m * k);
  DecodeNorm norm;
  norm.h = h.data();
  norm.delta = with_delta ? delta.data() : nullptr;
  norm.h_out = with_delta ? h_out.data() : nullptr;
  norm.weight = weight.data();
  norm.eps = 1e-5f;
  const NormFillScope pipe(true, sliced);
  set_decode_pipe_fault_for_test(fault);
  EXPECT_TRUE(gemm_decode_norm(engine, norm, m, ws, got_ptr, nullptr).ok());
  set_decode_pipe_fault_for_test(false);
  int64_t differ = 0;
  for (size_t i = 0; i < ns.size(); ++i) {
    const std::vector<bf16> a = download(got[i], m * ns[i]), b = download(want[i], m * ns[i]);
    for (size_t e = 0; e < a.size(); ++e) differ += a[e].bits != b[e].bits;
  }
  if (with_delta) {
    const std::vector<bf16> a = download(h_out, m * k), b = download(h_plain, m * k);
    for (size_t e = 0; e < a.size(); ++e) differ += a[e].bits != b[e].bits;
  }
  return differ;
}

// The same for gemm_decode_norm_swiglu (gate_up [2F, K] then SwiGLU) against add_rms_norm then gemm_decode_swiglu.
int64_t norm_swiglu_differences(const GemmEngine& engine, int64_t f, int64_t k, int64_t m, bool sliced, bool fault) {
  auto h = upload(to_bf16(random_values(m * k, 195 + m + k, 3.0f)));
  auto delta = upload(to_bf16(random_values(m * k, 196 + m + k, 2.0f)));
  auto weight = upload(to_bf16(random_values(k, 197 + k, 1.0f)));
  auto gate_up = upload(to_bf16(random_values(2 * f * k, 198 + f, 0.5f)));
  const DeviceMatrix gu{gate_up.data(), nullptr, 2 * f, k};
  auto h_plain = upload(download(h, m * k));
  auto u = poisoned<bf16>(m * k);
  auto want = poisoned<bf16>(m * f), got = poisoned<bf16>(m * f), h_out = poisoned<bf16>(m * k);
  const NormFillScope order(false, sliced);
  EXPECT_TRUE(
      add_rms_norm(h_plain.data(), delta.data(), m, static_cast<int>(k), weight.data(), 1e-5f, u.data(), nullptr).ok());
  EXPECT_TRUE(gemm_decode_swiglu(engine, u.data(), m, gu, want.data(), nullptr).ok());
  DecodeNorm norm;
  norm.h = h.data();
  norm.delta = delta.data();
  norm.h_out = h_out.data();
  norm.weight = weight.data();
  norm.eps = 1e-5f;
  const NormFillScope pipe(true, sliced);
  set_decode_pipe_fault_for_test(fault);
  EXPECT_TRUE(gemm_decode_norm_swiglu(engine, norm, m, gu, got.data(), nullptr).ok());
  set_decode_pipe_fault_for_test(false);
  int64_t differ = 0;
  const std::vector<bf16> a = download(got, m * f), b = download(want, m * f);
  for (size_t e = 0; e < a.size(); ++e) differ += a[e].bits != b[e].bits;
  const std::vector<bf16> ha = download(h_out, m * k), hb = download(h_plain, m * k);
  for (size_t e = 0; e < ha.size(); ++e) differ += ha[e].bits != hb[e].bits;
  return differ;
}

TEST(CudaDecodePipeX, TheNormFillGivesTheBitsOfTheNormLaunchThenTheGemmsInBothNormOrders) {
  LS_SKIP_WITHOUT_DEVICE();
  if (!cuda_features().tma || !cuda_features().pdl) GTEST_SKIP() << "the pipeline runs on sm_90 only";
  const GemmEngine engine;
  // q / k / v (narrow row copies), the conv in_proj (wide: 3D boxes), K 512 with an odd N, K 64 (one tile).
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> groups = {
      {{2048, 512, 512}, 2048}, {{6144}, 2048}, {{1001}, 512}, {{264}, 64}};
  for (const bool sliced : {false, true})
    for (const auto& [ns, k] : groups)
      for (const int64_t m : {1, 2, 7, 8, 9, 16})
        for (const bool with_delta : {true, false})
          EXPECT_EQ(norm_fill_differences(engine, ns, k, m, with_delta, sliced, false), 0)
              << "K " << k << " N " << ns[0] << " m " << m << (with_delta ? " with delta" : "")
              << (sliced ? ", sliced order" : ", one-warp order");
  // gate_up + SwiGLU: the 1.2B's F = 8192 and an F with a column tail.
  for (const bool sliced : {false, true})
    for (const int64_t f : {8192, 1001})
      for (const int64_t m : {1, 3, 8, 9, 16})
        EXPECT_EQ(norm_swiglu_differences(engine, f, 2048, m, sliced, false), 0)
            << "SwiGLU F " << f << " m " << m << (sliced ? ", sliced order" : ", one-warp order");
  // The planted K walk backwards reaches the pipeline's norm launches only: red means they ran there.
  EXPECT_GT(norm_fill_differences(engine, {2048, 512, 512}, 2048, 4, true, true, true), 0) << "the fault went unseen";
  EXPECT_GT(norm_fill_differences(engine, {6144}, 2048, 1, true, false, true), 0) << "the fault went unseen";
  EXPECT_GT(norm_swiglu_differences(engine, 8192, 2048, 1, true, true), 0) << "the fault went unseen (SwiGLU)";
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
