// CPU double-gated short conv (LFM2 ShortConv): z = B*X, conv over the last `kernel` z's, y = C*conv.
// Channels are independent, so many-row calls split the channels over the pool (a value never depends on the split).
// AVX-512 runs 16 channels at a time with the scalar loop's operations in its order (a product, then a sum: never
// fused), so both give the same bits.
#include <algorithm>
#include <vector>

#include "compute/cpu/cpu_features.h"
#include "compute/cpu/fused_ops.h"
#include "compute/cpu/simd_avx512.h"
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

// The z row a tap reads: `source` rows before (negative) or inside this pass, as short_conv_channels picks it.
const float* tap_row(const ShortConvInput& in, const float* z, int64_t source) {
  const int64_t width = in.width;
  if (source >= 0) return z + source * width;
  if (source + in.rows_before >= 0) return in.z_before + (source + in.rows_before) * width;
  return in.history + (in.kernel - 1 + source + in.rows_before) * width;
}

// A product kept as it is (no fused multiply-add may absorb it: the scalar loop rounds it before the sum).
LS_TARGET_AVX512 inline __m512 unfused(__m512 product) {
  __asm__("" : "+v"(product));
  return product;
}

// short_conv_channels of channels [begin, end) 16 at a time: the same products and sums per channel, in the same order.
LS_TARGET_AVX512 void short_conv_channels_avx512(const OpContext& ctx, const ShortConvInput& in, int64_t begin,
                                                 int64_t end, float* z, float* y) {
  using namespace simd;
  const int64_t width = in.width;
  const int kernel = in.kernel;
  const bool round = ctx.rounds_to_bf16();
  for (int64_t row = 0; row < in.rows; ++row) {
    const float* b = in.bcx + row * 3 * width;
    const float* x = b + 2 * width;
    for (int64_t i = begin; i < end; i += 16) {
      const __mmask16 mask = first_lanes(end - i);
      const __m512 product = store16(round, unfused(_mm512_mul_ps(load16(b + i, mask), load16(x + i, mask))));
      _mm512_mask_storeu_ps(z + row * width + i, mask, product);
    }
  }
  // Each tap's weights as a row over the channels ([kernel, end - begin]), so 16 channels load at once.
  thread_local std::vector<float> taps;
  taps.resize(static_cast<size_t>(kernel * (end - begin)));
  for (int tap = 0; tap < kernel; ++tap)
    for (int64_t i = begin; i < end; ++i) taps[tap * (end - begin) + (i - begin)] = in.conv_weight[i * kernel + tap];
  for (int64_t row = 0; row < in.rows; ++row) {
    const float* c = in.bcx + row * 3 * width + width;
    for (int64_t i = begin; i < end; i += 16) {
      const __mmask16 mask = first_lanes(end - i);
      __m512 sum = _mm512_setzero_ps();
      for (int tap = 0; tap < kernel; ++tap) {
        const float* source = tap_row(in, z, row - (kernel - 1) + tap);
        const __m512 weight = load16(taps.data() + tap * (end - begin) + (i - begin), mask);
        sum = _mm512_add_ps(sum, unfused(_mm512_mul_ps(weight, load16(source + i, mask))));
      }
      if (in.conv_bias) sum = _mm512_add_ps(sum, load16(in.conv_bias + i, mask));
      _mm512_mask_storeu_ps(y + row * width + i, mask, store16(round, _mm512_mul_ps(load16(c + i, mask), store16(round, sum))));
    }
  }
}

// The kernel this CPU runs for channels [begin, end).
void run_channels(const OpContext& ctx, const ShortConvInput& in, int64_t begin, int64_t end, float* z, float* y) {
  if (cpu_features().avx512) return short_conv_channels_avx512(ctx, in, begin, end, z, y);
  short_conv_channels(ctx, in, begin, end, z, y);
}

}  // namespace

void short_conv_range(const OpContext& ctx, const ShortConvInput& input, int64_t begin, int64_t end, float* z,
                      float* y) {
  run_channels(ctx, input, begin, end, z, y);
}

void short_conv(const OpContext& ctx, const ShortConvInput& in, float* z, float* y) {
  if (!ctx.pool || in.rows < kParallelRows) return run_channels(ctx, in, 0, in.width, z, y);
  const int64_t chunks = (in.width + kChannelChunk - 1) / kChannelChunk;
  ctx.pool->parallel_for(chunks, [&](int, int64_t begin, int64_t end) {
    run_channels(ctx, in, begin * kChannelChunk, std::min<int64_t>(in.width, end * kChannelChunk), z, y);
  });
}

}  // namespace ls::compute
