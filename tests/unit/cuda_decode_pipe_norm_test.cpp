// The pipeline decode GEMM with its x made from the residual add + RMSNorm (set_decode_pipe_norm, session 12):
// gemm_decode_norm gives the bits of add_rms_norm (rms_norm without delta) then the GEMMs at 1..16 rows, on the narrow
// q / k / v group (row copies) and the wide in_proj (3D boxes), K 2048 / 512 / 64, in both norm orders (set_norm_sliced:
// the sliced order sums from registers where rows are whole slices); the planted K walk backwards, which reaches only
// the pipeline's launches, turns it red.
#ifdef LS_HAVE_CUDA

#include <utility>

#include "compute/cuda/gemm_decode_x.h"
#include "compute/cuda/norm_order.h"
#include "cuda_decode_test_util.h"

namespace ls::cuda {
namespace {

using namespace decode_testing;  // NOLINT: the decode tests' shared helpers

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

TEST(CudaDecodePipeNorm, TheNormFillGivesTheBitsOfTheNormLaunchThenTheGemmsInBothNormOrders) {
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
  // The planted K walk backwards reaches the pipeline's norm launches only: red means they ran there.
  EXPECT_GT(norm_fill_differences(engine, {2048, 512, 512}, 2048, 4, true, true, true), 0) << "the fault went unseen";
  EXPECT_GT(norm_fill_differences(engine, {6144}, 2048, 1, true, false, true), 0) << "the fault went unseen";
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
