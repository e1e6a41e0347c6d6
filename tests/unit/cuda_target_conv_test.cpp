// The target's ShortConv, launched early (step10: the window records, weights, bias and history taps loaded before the
// programmatic wait; the only launch for kernel 2..4 since s10final), against the plain kernel that other kernel sizes
// take (set_short_conv_early(false), tests only): z and y bitwise on random inputs, windows of 1..16 rows over streams
// whose histories are in other slots, outputs poisoned first; a planted reversed-taps fault turns the check red.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "ops_test_util.h"

namespace ls::lfm2::gpu {
namespace {

using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::poisoned;
using cuda::testing::to_bf16;
using cuda::testing::upload;
using compute::testing::random_values;

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
      constexpr int kSlots = 5, kLayers = 3, kLayer = 1;
      const std::vector<int> widths = {1, 16, 3, 1, 7};  // one window per stream, slots 4, 0, 2, 3, 1
      const std::vector<int> slots = {4, 0, 2, 3, 1};
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
      args.conv_bias = K == 3 ? nullptr : bias.data();
      DeviceBuffer<bf16> z_want = poisoned<bf16>(rows * D), y_want = poisoned<bf16>(rows * D),
                         z_got = poisoned<bf16>(rows * D), y_got = poisoned<bf16>(rows * D);
      {
        const EarlyScope off(false);
        EXPECT_TRUE(short_conv(args, rw.data(), windows.data(), z_want.data(), y_want.data(), nullptr).ok());
      }
      {
        const EarlyScope on(true);
        args.fault_reversed_taps_for_test = fault;
        EXPECT_TRUE(short_conv(args, rw.data(), windows.data(), z_got.data(), y_got.data(), nullptr).ok());
      }
      auto count = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
        int n = 0;
        for (size_t i = 0; i < a.size(); ++i) n += a[i].bits != b[i].bits;
        return n;
      };
      const int z_differ = count(download(z_got, rows * D), download(z_want, rows * D));
      const int y_differ = count(download(y_got, rows * D), download(y_want, rows * D));
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
