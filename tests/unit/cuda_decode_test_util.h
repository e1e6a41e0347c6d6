// What the decode-GEMM tests share (cuda_decode_gemm_test.cpp, cuda_decode_staged_test.cpp, cuda_decode_pipe_test.cpp):
// gtest, the kernels' API, the CUDA test helpers under short names, the first row whose bits differ and the switches
// put back at a test's end.
#pragma once
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compute/cuda/kernels.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace ls::cuda::decode_testing {

using compute::testing::random_values;
using ls::cuda::testing::download;
using ls::cuda::testing::poisoned;
using ls::cuda::testing::to_bf16;
using ls::cuda::testing::to_float;
using ls::cuda::testing::upload;

// The first row whose bits differ between `got` [m, n] and `want` [m, n], or -1.
inline int64_t first_differing_row(const std::vector<float>& got, const std::vector<float>& want, int64_t m,
                                   int64_t n) {
  for (int64_t r = 0; r < m; ++r)
    if (std::memcmp(got.data() + r * n, want.data() + r * n, sizeof(float) * n) != 0) return r;
  return -1;
}

// Puts the bench switches back to their defaults when a test ends, however it ends (a failed ASSERT returns early,
// and the switches are process-wide: a pick left set would change every later test's GEMMs).
struct DefaultPicksAtExit {
  ~DefaultPicksAtExit() {
    set_decode_staged_pick(-1);
    set_decode_norm_configs(0, 2);
    set_decode_l2_prefetch(false);
    set_decode_rows(32);
  }
};

}  // namespace ls::cuda::decode_testing

#endif  // LS_HAVE_CUDA
