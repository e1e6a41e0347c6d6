// CPU double-gated short conv (LFM2 ShortConv): z = B*X, conv over the last `kernel` z's, y = C*conv.
// Channels are independent, so many-row calls split the channels over the pool (a value never depends on the split).
#include <algorithm>

#include "compute/ops.h"

namespace ls::compute {
namespace {

constexpr int64_t kChannelChunk = 64;      // channels per unit of thread work
constexpr int64_t kParallelRows = 8;       // calls with fewer rows stay on the calling thread

// z and y of channels [begin, end) for every row.
void short_conv_channels(const OpContext& ctx, const ShortConvInput& in, int64_t begin, int64_t end, float* z,
                         float* y) {
  const int64_t width = in.width;
  const int history_rows = in.kernel - 1;
  for (int64_t row = 0; row < in.rows; ++row) {
    const float* b = in.bcx + row * 3 * width;
    const float* x = b + 2 * width;
    for (int64_t i = begin; i < end; ++i) z[row * width + i] = ctx.store(b[i] * x[i]);
  }
  for (int64_t row = 0; row < in.rows; ++row) {
    const float* c = in.bcx + row * 3 * width + width;
    for (int64_t i = begin; i < end; ++i) {
      float sum = 0.0f;
      for (int tap = 0; tap < in.kernel; ++tap) {
        // Tap `kernel-1` is the current row; earlier taps reach back into this pass, earlier passes, then history.
        const int64_t source = row - (in.kernel - 1) + tap;
        float value;
        if (source >= 0) {
          value = z[source * width + i];
        } else if (source + in.rows_before >= 0) {
          value = in.z_before[(source + in.rows_before) * width + i];
        } else {
          value = in.history[(history_rows + source + in.rows_before) * width + i];
        }
        sum += in.conv_weight[i * in.kernel + tap] * value;
      }
      if (in.conv_bias) sum += in.conv_bias[i];
      y[row * width + i] = ctx.store(c[i] * ctx.store(sum));
    }
  }
}

}  // namespace

void short_conv(const OpContext& ctx, const ShortConvInput& in, float* z, float* y) {
  if (!ctx.pool || in.rows < kParallelRows) return short_conv_channels(ctx, in, 0, in.width, z, y);
  const int64_t chunks = (in.width + kChannelChunk - 1) / kChannelChunk;
  ctx.pool->parallel_for(chunks, [&](int, int64_t begin, int64_t end) {
    short_conv_channels(ctx, in, begin * kChannelChunk, std::min<int64_t>(in.width, end * kChannelChunk), z, y);
  });
}

}  // namespace ls::compute
