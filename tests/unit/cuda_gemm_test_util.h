// What the GEMM bit tests share (cuda_gemm_test.cpp; session 11's narrow-slice order tests used it too): a launch into
// poisoned outputs and the invariance check (every row of every width bitwise the automatic one-row launch).
#pragma once
#ifdef LS_HAVE_CUDA

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_decode_test_util.h"

namespace ls::cuda::gemm_testing {

using namespace decode_testing;  // NOLINT: gtest, the kernels' API and the CUDA test helpers under short names

struct GemmCase {
  int64_t n, k;
};

// The GEMM of rows [0, m) of x into fp32 (or bf16) on the device.
inline std::vector<float> run_gemm(const GemmEngine& engine, const DeviceBuffer<bf16>& x, int64_t row0, int64_t m,
                                   const DeviceMatrix& w, bool bf16_out) {
  const size_t count = static_cast<size_t>(m * w.rows);
  if (bf16_out) {
    auto y = poisoned<bf16>(count);
    EXPECT_TRUE(engine.gemm(x.data() + row0 * w.cols, m, w, y.data(), nullptr, nullptr).ok());
    return to_float(download(y, count));
  }
  auto y = poisoned<float>(count);
  EXPECT_TRUE(engine.gemm(x.data() + row0 * w.cols, m, w, nullptr, y.data(), nullptr).ok());
  return download(y, count);
}

// Every row of every launch width of `engine` is bitwise the automatic one-row launch of that row; returns the
// first failure.
inline std::string invariance_failure(const GemmEngine& engine, const GemmCase& shape,
                                      const std::vector<int64_t>& widths) {
  const GemmEngine reference;
  const int64_t max_m = widths.back();
  auto x = upload(to_bf16(random_values(max_m * shape.k, 21 + shape.n)));
  auto w = upload(to_bf16(random_values(shape.n * shape.k, 22 + shape.k, 0.5f)));
  auto bias = upload(random_values(shape.n, 23));
  const DeviceMatrix matrix{w.data(), bias.data(), shape.n, shape.k};
  auto single = poisoned<float>(max_m * shape.n);
  for (int64_t r = 0; r < max_m; ++r)
    if (!reference.gemm(x.data() + r * shape.k, 1, matrix, nullptr, single.data() + r * shape.n, nullptr).ok())
      return "launch failed";
  const std::vector<float> one_row = download(single, max_m * shape.n);
  for (int64_t m : widths) {
    const std::vector<float> batch = run_gemm(engine, x, 0, m, matrix, false);
    for (int64_t r = 0; r < m; ++r)
      if (std::memcmp(batch.data() + r * shape.n, one_row.data() + r * shape.n, sizeof(float) * shape.n) != 0)
        return "m " + std::to_string(m) + " row " + std::to_string(r) + " (" + engine.tile_name(m, shape.n, shape.k) +
               ") differs from its one-row launch";
  }
  return "";
}

}  // namespace ls::cuda::gemm_testing

#endif  // LS_HAVE_CUDA
