// conv_rows (session 12: the prefill ShortConv, 8 channels and 8 rows a thread) against short_conv: z and y bitwise
// on random inputs, for kernels 2..4, two widths, with and without bias, over windows of 1..300 rows whose histories
// are in other slots (runs of 8 rows that cross window boundaries), outputs poisoned first; a planted reversed-taps
// fault in conv_rows turns the check red.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_util.h"
#include "model/lfm2/cuda/conv_rows.h"
#include "ops_test_util.h"

namespace ls::lfm2::gpu {
namespace {

using compute::testing::random_values;
using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::poisoned;
using cuda::testing::to_bf16;
using cuda::testing::upload;

// z and y outputs of conv_rows that differ from short_conv's, over kernels 2..4, two widths, bias on and off.
int conv_rows_differences(bool fault) {
  int differ = 0;
  for (const int K : {2, 3, 4})
    for (const int D : {2048, 264})
      for (const bool with_bias : {false, true}) {
        constexpr int kSlots = 5, kLayers = 3, kLayer = 1;
        const std::vector<int> widths = {300, 1, 13, 2, 7, 133};  // one window per stream
        const std::vector<int> slots = {4, 0, 2, 3, 1, 0};
        std::vector<WindowInfo> infos;
        std::vector<int32_t> row_window;
        for (size_t w = 0; w < widths.size(); ++w) {
          WindowInfo info;
          info.first_row = static_cast<int32_t>(row_window.size());
          info.rows = widths[w];
          info.committed = 10 + static_cast<int64_t>(w);
          info.slot = slots[w];
          infos.push_back(info);
          for (int r = 0; r < widths[w]; ++r) row_window.push_back(static_cast<int32_t>(w));
        }
        const int64_t rows = static_cast<int64_t>(row_window.size());
        DeviceBuffer<bf16> bcx = upload(to_bf16(random_values(rows * 3 * D, 7 + K + D, 2.0f)));
        DeviceBuffer<bf16> history =
            upload(to_bf16(random_values(int64_t{kSlots} * kLayers * (K - 1) * D, 8 + K + D, 2.0f)));
        DeviceBuffer<float> weight = upload(random_values(int64_t{D} * K, 9 + K, 1.0f));
        DeviceBuffer<float> bias = upload(random_values(D, 10 + K, 0.5f));
        DeviceBuffer<int32_t> rw = upload(row_window);
        DeviceBuffer<WindowInfo> windows;
        EXPECT_TRUE(windows.allocate(infos.size()).ok());
        EXPECT_EQ(cudaMemcpy(windows.data(), infos.data(), infos.size() * sizeof(WindowInfo), cudaMemcpyHostToDevice),
                  cudaSuccess);
        ConvArgs args;
        args.bcx = bcx.data();
        args.rows = rows;
        args.width = D;
        args.kernel = K;
        args.conv_layers = kLayers;
        args.conv_slot = kLayer;
        args.history = history.data();
        args.conv_weight = weight.data();
        args.conv_bias = with_bias ? bias.data() : nullptr;
        DeviceBuffer<bf16> z_want = poisoned<bf16>(rows * D), y_want = poisoned<bf16>(rows * D),
                           z_got = poisoned<bf16>(rows * D), y_got = poisoned<bf16>(rows * D);
        EXPECT_TRUE(conv_rows_fits(args));
        EXPECT_TRUE(short_conv(args, rw.data(), windows.data(), z_want.data(), y_want.data(), nullptr).ok());
        args.fault_reversed_taps_for_test = fault;
        EXPECT_TRUE(conv_rows(args, rw.data(), windows.data(), z_got.data(), y_got.data(), nullptr).ok());
        auto count = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
          int n = 0;
          for (size_t i = 0; i < a.size(); ++i) n += a[i].bits != b[i].bits;
          return n;
        };
        const int z_differ = count(download(z_got, rows * D), download(z_want, rows * D));
        const int y_differ = count(download(y_got, rows * D), download(y_want, rows * D));
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
