// The skinny GEMM's residual-norm epilogue against residual_norm after the bf16 GEMM it extends (shared by the skinny
// GEMM tests).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "cuda_drafter_kernel_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::testing {

// y = x W^T in fp64 from the bf16 values, and the bound of fp32 accumulation's error.
struct SkinnyReference {
  std::vector<double> sums;   // [rows, n] fp64 of the bf16 values
  std::vector<double> bound;  // fp32 accumulation's error bound (k roundings of at most 2^-24 of the running |sum|)
};

inline SkinnyReference skinny_reference(const std::vector<bf16>& x, const std::vector<bf16>& w, int rows, int64_t n,
                                        int64_t k) {
  const size_t cells = static_cast<size_t>(rows * n);
  SkinnyReference reference{std::vector<double>(cells), std::vector<double>(cells)};
  for (int r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, magnitude = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double product = static_cast<double>(bf16_to_float(x[r * k + j])) * bf16_to_float(w[c * k + j]);
        sum += product;
        magnitude += std::fabs(product);
      }
      reference.sums[r * n + c] = sum;
      reference.bound[r * n + c] = magnitude * k * 0x1p-24 + 1e-30;
    }
  }
  return reference;
}

// `gemm`: a bf16 skinny GEMM [rows, n] (ldy = n) whose output bits are `want16`. Runs it with the residual-norm
// epilogue twice on one ticket (hidden from fresh random values, y and normed poisoned each time): y the bits of
// want16, hidden and normed the bits of residual_norm(hidden, want16), the ticket back at zero after each run.
inline void expect_residual_norm_epilogue(cuda::SkinnyGemm gemm, const std::vector<bf16>& want16, std::mt19937& rng) {
  using ls::cuda::testing::download;
  using ls::cuda::testing::poisoned;
  using ls::cuda::testing::upload;
  const int64_t cells = gemm.rows * gemm.n;
  const std::vector<bf16> hidden_start = random_values(rng, cells, 3.0f);
  auto weight = upload(random_floats(rng, gemm.n, 0.5f, 1.5f));
  auto y16 = upload(want16);
  auto reference_hidden = upload(hidden_start);
  auto reference_normed = poisoned<bf16>(cells);
  ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(reference_hidden.data()),
                                  reinterpret_cast<const cuda::bf16_t*>(y16.data()), gemm.rows, gemm.n, weight.data(),
                                  1e-5f, reinterpret_cast<cuda::bf16_t*>(reference_normed.data()), nullptr)
                  .ok());
  const std::vector<bf16> want_hidden = download(reference_hidden, cells);
  const std::vector<bf16> want_normed = download(reference_normed, cells);
  auto ticket = upload(std::vector<unsigned int>{0u});
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE("residual norm run " + std::to_string(run));
    auto hidden = upload(hidden_start);
    auto projected = poisoned<bf16>(cells), normed = poisoned<bf16>(cells);
    cuda::SkinnyGemm norm_args = gemm;
    norm_args.y = projected.data();
    norm_args.ldy = gemm.n;
    norm_args.epilogue = cuda::SkinnyEpilogue::ResidualNorm;
    norm_args.hidden = reinterpret_cast<cuda::bf16_t*>(hidden.data());
    norm_args.norm_weight = weight.data();
    norm_args.eps = 1e-5f;
    norm_args.normed = reinterpret_cast<cuda::bf16_t*>(normed.data());
    norm_args.ticket = ticket.data();
    ASSERT_TRUE(cuda::skinny_gemm(norm_args, true, nullptr).ok());
    EXPECT_EQ(count_bitwise_equal(download(projected, cells), want16), static_cast<int>(cells));
    EXPECT_EQ(count_bitwise_equal(download(hidden, cells), want_hidden), static_cast<int>(cells));
    EXPECT_EQ(count_bitwise_equal(download(normed, cells), want_normed), static_cast<int>(cells));
    EXPECT_EQ(download(ticket, 1)[0], 0u) << "the last CTA resets the ticket";
  }
}

}  // namespace ls::dspark::testing
