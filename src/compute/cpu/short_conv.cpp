// CPU double-gated short conv (LFM2 ShortConv): z = B*X, conv over the last `kernel` z's, y = C*conv.
#include "compute/ops.h"

namespace ls::compute {

void short_conv(const OpContext& ctx, const ShortConvInput& in, float* z, float* y) {
  const int64_t width = in.width;
  const int history_rows = in.kernel - 1;
  for (int64_t row = 0; row < in.rows; ++row) {
    const float* b = in.bcx + row * 3 * width;
    const float* x = b + 2 * width;
    for (int64_t i = 0; i < width; ++i) z[row * width + i] = ctx.store(b[i] * x[i]);
  }
  for (int64_t row = 0; row < in.rows; ++row) {
    const float* c = in.bcx + row * 3 * width + width;
    for (int64_t i = 0; i < width; ++i) {
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

}  // namespace ls::compute
