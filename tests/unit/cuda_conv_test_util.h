// ShortConv inputs for the conv tests: one window per stream of the given widths, each stream's conv history in the
// given slot (of 5 slots, 3 conv layers, layer 1), random bcx / history / weights / bias on the device, and the
// ConvArgs over them; differing_bits (cuda_test_util.h) counts the bf16 outputs whose bits differ.
#pragma once
#ifdef LS_HAVE_CUDA

#include <cstdint>
#include <vector>

#include "cuda_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "ops_test_util.h"

namespace ls::lfm2::gpu::testing {

struct ConvCase {
  cuda::DeviceBuffer<bf16> bcx, history;
  cuda::DeviceBuffer<float> weight, bias;
  cuda::DeviceBuffer<int32_t> row_window;
  cuda::DeviceBuffer<WindowInfo> windows;
  ConvArgs args;
  int64_t rows = 0;
};

inline ConvCase conv_case(int K, int D, const std::vector<int>& widths, const std::vector<int>& slots,
                          bool with_bias) {
  using compute::testing::random_values;
  using cuda::testing::to_bf16;
  using cuda::testing::upload;
  constexpr int kSlots = 5, kLayers = 3, kLayer = 1;
  ConvCase c;
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
  c.rows = static_cast<int64_t>(row_window.size());
  c.bcx = upload(to_bf16(random_values(c.rows * 3 * D, 7 + K + D, 2.0f)));
  c.history = upload(to_bf16(random_values(int64_t{kSlots} * kLayers * (K - 1) * D, 8 + K + D, 2.0f)));
  c.weight = upload(random_values(int64_t{D} * K, 9 + K, 1.0f));
  c.bias = upload(random_values(D, 10 + K, 0.5f));
  c.row_window = upload(row_window);
  EXPECT_TRUE(c.windows.allocate(infos.size()).ok());
  EXPECT_EQ(cudaMemcpy(c.windows.data(), infos.data(), infos.size() * sizeof(WindowInfo), cudaMemcpyHostToDevice),
            cudaSuccess);
  c.args.bcx = c.bcx.data();
  c.args.rows = c.rows;
  c.args.width = D;
  c.args.kernel = K;
  c.args.conv_layers = kLayers;
  c.args.conv_slot = kLayer;
  c.args.history = c.history.data();
  c.args.conv_weight = c.weight.data();
  c.args.conv_bias = with_bias ? c.bias.data() : nullptr;
  return c;
}

using cuda::testing::differing_bits;

}  // namespace ls::lfm2::gpu::testing

#endif  // LS_HAVE_CUDA
