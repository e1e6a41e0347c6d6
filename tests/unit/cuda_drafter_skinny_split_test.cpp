// The skinny GEMM with K split over CTAs and its warps' pieces pipelined (session 15) against an fp64 reference of
// the same bf16 values on fresh random data, outputs and partials poisoned first.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/bf16.h"
#include "compute/cuda/cuda_util.h"
#include "cuda_drafter_kernel_util.h"
#include "cuda_drafter_skinny_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark {
namespace {

using ls::cuda::testing::download;
using ls::cuda::testing::poisoned;
using ls::cuda::testing::upload;
using testing::count_bitwise_equal;
using testing::random_values;

uint32_t bits_of(float value) { return std::bit_cast<uint32_t>(value); }

// For 1..16 rows, K with a tail piece and long K, n with a tail tile and 192 tiles (the 1.2B's q/k/v): every split
// count 1..8 and both loops give fp32 outputs within fp32 accumulation error of fp64 with the padding columns
// untouched; the same bits twice on one set of tickets (the fold's order is fixed, whichever CTA comes last; the
// tickets back at zero); the pipelined loop the bits of the plain one; one split the bits of the old kernel; the bf16
// and residual-norm epilogues on a split launch the bits of its fp32 sums rounded and of residual_norm after it.
// Planted: the fold leaving out the last split must put outputs outside the bound.
TEST(CudaDrafter, TheSkinnyGemmSplitOverCtasFoldsTheSplitsInOneOrderWithinFp32Error) {
  LS_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(1515);
  const struct {
    int rows;
    int64_t n, k;
  } cases[] = {{9, 272, 2048}, {1, 48, 10240}, {16, 40, 1032}, {5, 3072, 2048}, {9, 256, 8192}};
  for (const auto& shape : cases) {
    SCOPED_TRACE("rows " + std::to_string(shape.rows) + " n " + std::to_string(shape.n) + " k " +
                 std::to_string(shape.k));
    const std::vector<bf16> x_values = random_values(rng, shape.rows * shape.k, 2.0f);
    const std::vector<bf16> w_values = random_values(rng, shape.n * shape.k, 0.5f);
    auto x = upload(x_values), w = upload(w_values);
    const testing::SkinnyReference reference =
        testing::skinny_reference(x_values, w_values, shape.rows, shape.n, shape.k);
    const auto* xd = reinterpret_cast<const cuda::bf16_t*>(x.data());
    const auto* wd = reinterpret_cast<const cuda::bf16_t*>(w.data());
    const int64_t ldy = shape.n + 3, tiles = cuda::skinny_gemm_tiles(shape.n, cuda::SkinnyEpilogue::F32);
    auto tickets = upload(std::vector<unsigned int>(static_cast<size_t>(tiles), 0u));
    auto partials = poisoned<float>(cuda::skinny_split_floats(tiles, cuda::kSkinnyMaxSplits));
    // Runs the fp32 GEMM into a poisoned y and returns y [rows, ldy].
    auto run = [&](int splits, bool pipelined, bool planted) {
      auto y = poisoned<float>(shape.rows * ldy);
      cuda::SkinnyGemm args{xd, shape.rows, shape.k, wd, shape.n, y.data(), ldy, cuda::SkinnyEpilogue::F32};
      args.k_splits = splits;
      args.split_partials = partials.data();
      args.split_tickets = tickets.data();
      args.pipelined = pipelined;
      args.planted_fold = planted;
      EXPECT_TRUE(cuda::skinny_gemm(args, true, nullptr).ok());
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return download(y, shape.rows * ldy);
    };
    cuda::SkinnyGemm old_args{xd, shape.rows, shape.k, wd, shape.n, nullptr, ldy, cuda::SkinnyEpilogue::F32};
    auto old_y = poisoned<float>(shape.rows * ldy);
    old_args.y = old_y.data();
    ASSERT_TRUE(cuda::skinny_gemm(old_args, true, nullptr).ok());
    const std::vector<float> old_out = download(old_y, shape.rows * ldy);
    std::map<int, std::vector<float>> plain_by_splits;
    for (const bool pipelined : {false, true}) {
      for (int splits = 1; splits <= cuda::kSkinnyMaxSplits; ++splits) {
        SCOPED_TRACE("splits " + std::to_string(splits) + (pipelined ? " pipelined" : ""));
        const std::vector<float> first = run(splits, pipelined, false), second = run(splits, pipelined, false);
        int same = 0, within = 0, untouched = 0;
        for (int r = 0; r < shape.rows; ++r) {
          for (int64_t c = 0; c < ldy; ++c) {
            const float value = first[r * ldy + c];
            same += bits_of(value) == bits_of(second[r * ldy + c]);
            if (c >= shape.n) {
              untouched += bits_of(value) == 0xffffffffu;
              continue;
            }
            within += std::isfinite(value) &&
                      std::fabs(value - reference.sums[r * shape.n + c]) <= reference.bound[r * shape.n + c];
          }
        }
        EXPECT_EQ(same, static_cast<int>(shape.rows * ldy)) << "two runs on one set of tickets differ";
        EXPECT_EQ(within, static_cast<int>(shape.rows * shape.n)) << "outputs outside fp32 error (or unwritten)";
        EXPECT_EQ(untouched, static_cast<int>(shape.rows * 3)) << "padding columns written";
        const std::vector<unsigned int> after = download(tickets, tiles);
        EXPECT_EQ(std::count(after.begin(), after.end(), 0u), tiles) << "the last CTAs reset the tickets";
        if (!pipelined) plain_by_splits[splits] = first;
        const std::vector<float>& plain = plain_by_splits[splits];
        const std::vector<float>& want = splits == 1 ? old_out : plain;
        int equal = 0;
        for (size_t i = 0; i < first.size(); ++i) equal += bits_of(first[i]) == bits_of(want[i]);
        EXPECT_EQ(equal, static_cast<int>(first.size())) << (splits == 1 ? "one split: not the old kernel's bits"
                                                                         : "pipelined: not the plain loop's bits");
      }
    }
    // bf16 and residual norm on a 3-way split: its fp32 sums rounded once, then residual_norm's bits.
    const int splits = 3;
    std::vector<bf16> want16(static_cast<size_t>(shape.rows * shape.n));
    for (int r = 0; r < shape.rows; ++r) {
      for (int64_t c = 0; c < shape.n; ++c) {
        want16[r * shape.n + c] = float_to_bf16(plain_by_splits[splits][r * ldy + c]);
      }
    }
    auto y16 = poisoned<bf16>(shape.rows * shape.n);
    cuda::SkinnyGemm bf16_args{xd, shape.rows, shape.k, wd, shape.n, y16.data(), shape.n, cuda::SkinnyEpilogue::Bf16};
    bf16_args.k_splits = splits;
    bf16_args.split_partials = partials.data();
    bf16_args.split_tickets = tickets.data();
    ASSERT_TRUE(cuda::skinny_gemm(bf16_args, true, nullptr).ok());
    EXPECT_EQ(count_bitwise_equal(download(y16, shape.rows * shape.n), want16), static_cast<int>(shape.rows * shape.n));
    testing::expect_residual_norm_epilogue(bf16_args, want16, rng);
    // Planted: the fold without the last split (4 ways, where the last split holds pieces of K).
    const int64_t pieces = (shape.k + 127) / 128, per = (pieces + 3) / 4;
    if (3 * per < pieces) {
      const std::vector<float> planted = run(4, false, true);
      int outside = 0;
      for (int r = 0; r < shape.rows; ++r) {
        for (int64_t c = 0; c < shape.n; ++c) {
          const size_t cell = static_cast<size_t>(r * shape.n + c);
          outside += !(std::fabs(planted[r * ldy + c] - reference.sums[cell]) <= reference.bound[cell]);
        }
      }
      EXPECT_GT(outside, 0) << "the planted fold went unseen";
    }
  }
  // Refusals: no split, more than kSkinnyMaxSplits, a split without partials or tickets.
  for (const int splits : {0, cuda::kSkinnyMaxSplits + 1, 2}) {
    cuda::SkinnyGemm args{nullptr, 4, 64, nullptr, 16, nullptr, 16, cuda::SkinnyEpilogue::Bf16};
    args.k_splits = splits;
    EXPECT_EQ(cuda::skinny_gemm(args, true, nullptr).code(), ErrorCode::InvalidArgument) << splits;
  }
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
