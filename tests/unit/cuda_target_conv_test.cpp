// The target's ShortConv, launched early (step10: the window records, weights, bias and history taps loaded before the
// programmatic wait; the only launch for kernel 2..4 since s10final), against the plain kernel that other kernel sizes
// take (set_short_conv_early(false), tests only): z and y bitwise on random inputs, windows of 1..16 rows over streams
// whose histories are in other slots, outputs poisoned first; a planted reversed-taps fault turns the check red.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <vector>

#include "cuda_conv_test_util.h"

namespace ls::lfm2::gpu {
namespace {

using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::poisoned;

struct EarlyScope {
  explicit EarlyScope(bool on) : before(short_conv_early()) { set_short_conv_early(on); }
  ~EarlyScope() { set_short_conv_early(before); }
  bool before;
};

// z and y outputs that differ between the early launch and the plain kernel, over kernels 2..4 and two widths.
int early_differences(bool fault) {
  int differ = 0;
  for (const int K : {2, 3, 4})
    for (const int D : {2048, 264}) {
      // one window per stream, histories in slots 4, 0, 2, 3, 1; no bias at K 3
      testing::ConvCase c = testing::conv_case(K, D, {1, 16, 3, 1, 7}, {4, 0, 2, 3, 1}, K != 3);
      const int64_t n = c.rows * D;
      DeviceBuffer<bf16> z_want = poisoned<bf16>(n), y_want = poisoned<bf16>(n), z_got = poisoned<bf16>(n),
                         y_got = poisoned<bf16>(n);
      const int32_t* row_window = c.row_window.data();
      {
        const EarlyScope off(false);
        EXPECT_TRUE(short_conv(c.args, row_window, c.windows.data(), z_want.data(), y_want.data(), nullptr).ok());
      }
      {
        const EarlyScope on(true);
        c.args.fault_reversed_taps_for_test = fault;
        EXPECT_TRUE(short_conv(c.args, row_window, c.windows.data(), z_got.data(), y_got.data(), nullptr).ok());
      }
      const int z_differ = testing::differing_bits(download(z_got, n), download(z_want, n));
      const int y_differ = testing::differing_bits(download(y_got, n), download(y_want, n));
      if (!fault) {
        EXPECT_EQ(z_differ, 0) << "K " << K << " D " << D << ": z";
        EXPECT_EQ(y_differ, 0) << "K " << K << " D " << D << ": y";
      }
      differ += z_differ + y_differ;
    }
  return differ;
}

TEST(CudaTargetConv, TheEarlyShortConvGivesThePlainKernelBits) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(early_differences(false), 0);
}

TEST(CudaTargetConv, APlantedReversedTapsFaultInTheEarlyShortConvTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_GT(early_differences(true), 0);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
