// conv_rows (session 12: the prefill ShortConv, 8 channels and 8 rows a thread) against short_conv: z and y bitwise
// on random inputs, for kernels 2..4, two widths, with and without bias, over windows of 1..300 rows whose histories
// are in other slots (runs of 8 rows that cross window boundaries), outputs poisoned first; a planted reversed-taps
// fault in conv_rows turns the check red.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <vector>

#include "cuda_conv_test_util.h"
#include "model/lfm2/cuda/conv_rows.h"

namespace ls::lfm2::gpu {
namespace {

using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::poisoned;

// z and y outputs of conv_rows that differ from short_conv's, over kernels 2..4, two widths, bias on and off.
int conv_rows_differences(bool fault) {
  int differ = 0;
  for (const int K : {2, 3, 4})
    for (const int D : {2048, 264})
      for (const bool with_bias : {false, true}) {
        // one window per stream, histories in slots 4, 0, 2, 3, 1, 0
        testing::ConvCase c = testing::conv_case(K, D, {300, 1, 13, 2, 7, 133}, {4, 0, 2, 3, 1, 0}, with_bias);
        const int64_t n = c.rows * D;
        DeviceBuffer<bf16> z_want = poisoned<bf16>(n), y_want = poisoned<bf16>(n), z_got = poisoned<bf16>(n),
                           y_got = poisoned<bf16>(n);
        EXPECT_TRUE(conv_rows_fits(c.args));
        const int32_t* row_window = c.row_window.data();
        EXPECT_TRUE(short_conv(c.args, row_window, c.windows.data(), z_want.data(), y_want.data(), nullptr).ok());
        c.args.fault_reversed_taps_for_test = fault;
        EXPECT_TRUE(conv_rows(c.args, row_window, c.windows.data(), z_got.data(), y_got.data(), nullptr).ok());
        const int z_differ = testing::differing_bits(download(z_got, n), download(z_want, n));
        const int y_differ = testing::differing_bits(download(y_got, n), download(y_want, n));
        if (!fault) {
          EXPECT_EQ(z_differ, 0) << "K " << K << " D " << D << " bias " << with_bias << ": z";
          EXPECT_EQ(y_differ, 0) << "K " << K << " D " << D << " bias " << with_bias << ": y";
        }
        differ += z_differ + y_differ;
      }
  return differ;
}

TEST(CudaConvRows, ConvRowsGivesShortConvsBits) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_EQ(conv_rows_differences(false), 0);
}

TEST(CudaConvRows, APlantedReversedTapsFaultInConvRowsTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  EXPECT_GT(conv_rows_differences(true), 0);
}

TEST(CudaConvRows, RefusesWidthsNotAMultipleOf8AndKernelsOutside2To4) {
  ConvArgs args;
  args.rows = 256;
  args.width = 260;
  args.kernel = 3;
  EXPECT_FALSE(conv_rows_fits(args));
  args.width = 256;
  args.kernel = 5;
  EXPECT_FALSE(conv_rows_fits(args));
  args.kernel = 3;
  EXPECT_TRUE(conv_rows_fits(args));
  EXPECT_EQ(conv_rows(ConvArgs{.bcx = nullptr, .rows = 4, .width = 12, .kernel = 3}, nullptr, nullptr, nullptr,
                      nullptr, nullptr)
                .code(),
            ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
