// ShortConv's per-channel arithmetic, shared by the short_conv launch and the in_proj GEMM's conv tail
// (conv_tail.cu): y = C * round(sum over taps of w * z), z = round(B * X) of the row's window or the stream's
// history, in tap order. Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "model/lfm2/cuda/state_device.cuh"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {

constexpr int kConvMaxTaps = 4;  // conv kernels up to this many taps (LFM2: 3)

// A bf16 load; L2_ONLY: from L2 (data other CTAs of the same kernel wrote).
template <bool L2_ONLY>
__device__ __forceinline__ float conv_load(const bf16* p) {
  if constexpr (L2_ONLY) return __bfloat162float(__ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p))));
  return load(p);
}

// The outputs i = first, first + stride, ... < rows * D (row i / D, channel i % D), BATCH of them per thread with
// all their loads in flight before any arithmetic: z [rows, D] (the row's own z) and y [rows, D].
template <int BATCH, bool L2_ONLY>
__device__ __forceinline__ void conv_outputs(const ConvArgs& a, const int32_t* row_window, const WindowInfo* windows,
                                             bf16* z, bf16* y, int64_t first, int64_t stride) {
  const int D = a.width, K = a.kernel;
  const int64_t total = a.rows * D;
  for (int64_t base = first; base < total; base += BATCH * stride) {
    float p[BATCH][kConvMaxTaps], q[BATCH][kConvMaxTaps], c[BATCH];
    bool from_bcx[BATCH][kConvMaxTaps];
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int64_t i = base + j * stride;
      if (i >= total) continue;
      const int64_t row = i / D;
      const int d = static_cast<int>(i % D);
      const WindowInfo w = windows[row_window[row]];
      const int64_t in_window = row - w.first_row;
      const bf16* history = a.history + ((static_cast<int64_t>(w.slot) * a.conv_layers + a.conv_slot) * (K - 1)) * D;
#pragma unroll
      for (int tap = 0; tap < kConvMaxTaps; ++tap) {
        if (tap >= K) break;
        const int64_t source = in_window - (K - 1) + tap;
        from_bcx[j][tap] = source >= 0;
        if (source >= 0) {
          const bf16* bcx = a.bcx + (w.first_row + source) * 3 * D;
          p[j][tap] = conv_load<L2_ONLY>(bcx + d);
          q[j][tap] = conv_load<L2_ONLY>(bcx + 2 * D + d);
        } else {
          p[j][tap] = load(history + (K - 1 + source) * D + d);
          q[j][tap] = 0.0f;
        }
      }
      c[j] = conv_load<L2_ONLY>(a.bcx + row * 3 * D + D + d);
    }
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int64_t i = base + j * stride;
      if (i >= total) continue;
      const int64_t row = i / D;
      const int d = static_cast<int>(i % D);
      float sum = 0.0f;
      float own_z = 0.0f;
#pragma unroll
      for (int tap = 0; tap < kConvMaxTaps; ++tap) {
        if (tap >= K) break;
        const float value = from_bcx[j][tap] ? round_bf16(p[j][tap] * q[j][tap]) : p[j][tap];  // z = B * X
        if (tap == K - 1) own_z = value;
        sum = __fmaf_rn(a.conv_weight[d * K + tap], value, sum);
      }
      if (a.conv_bias) sum += a.conv_bias[d];
      store(z + row * D + d, own_z);
      store(y + row * D + d, c[j] * round_bf16(sum));
    }
  }
}

}  // namespace ls::lfm2::gpu
