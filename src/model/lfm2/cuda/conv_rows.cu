// conv_rows (conv_rows.h): short_conv_kernel's arithmetic (state_kernels.cu) for 8 channels and kRows rows a thread.
#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "model/lfm2/cuda/conv_rows.h"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 8;            // rows a thread
constexpr int64_t kFromRows = 128;  // the target's threshold (conv_rows_takes)

// 8 bf16 values in 16 bytes.
__device__ __forceinline__ uint4 load_chunk(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ float at(const uint4& c, int e) {
  const __nv_bfloat162 pair = reinterpret_cast<const __nv_bfloat162*>(&c)[e >> 1];
  return e & 1 ? __high2float(pair) : __low2float(pair);
}

// Rows r0 .. r0 + kRows - 1, channels d .. d + 7. zs[i] holds z = round(B * X) of row r0 - (K - 1) + i (rows of
// other windows too: a tap reads one only where it is in the output row's window).
template <int K>
__global__ void __launch_bounds__(kThreads)
    conv_rows_kernel(ConvArgs a, const int32_t* row_window, const WindowInfo* windows, bf16* z, bf16* y) {
  const int d = (blockIdx.x * kThreads + threadIdx.x) * 8;
  if (d >= a.width) return;
  const int D = a.width;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRows;
  float weight[K][8], bias[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
#pragma unroll
    for (int tap = 0; tap < K; ++tap)
      weight[tap][e] = a.conv_weight[(d + e) * K + (a.fault_reversed_taps_for_test ? K - 1 - tap : tap)];
    bias[e] = a.conv_bias ? a.conv_bias[d + e] : 0.0f;
  }
  float zs[kRows + K - 1][8];
#pragma unroll
  for (int i = 0; i < kRows + K - 1; ++i) {
    const int64_t row = r0 - (K - 1) + i;
    if (row < 0 || row >= a.rows) continue;
    const bf16* bcx = a.bcx + row * 3 * D + d;
    const uint4 b = load_chunk(bcx), x = load_chunk(bcx + 2 * D);
#pragma unroll
    for (int e = 0; e < 8; ++e) zs[i][e] = round_bf16(__fmul_rn(at(b, e), at(x, e)));  // z = B * X
  }
  // The rows' window records and C chunks are loaded before the first store too: the compiler cannot move a load
  // past a store it may alias, so each row's loads after the previous row's stores would wait a round trip.
  int32_t window[kRows], first_row[kRows], slot[kRows];
  uint4 cs[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) window[i] = r0 + i < a.rows ? row_window[r0 + i] : 0;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t row = r0 + i;
    if (row >= a.rows) continue;
    const WindowInfo w = windows[window[i]];
    first_row[i] = w.first_row;
    slot[i] = w.slot;
    cs[i] = load_chunk(a.bcx + row * 3 * D + D + d);
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t row = r0 + i;
    if (row >= a.rows) break;
    const int64_t in_window = row - first_row[i];
    const bf16* history = a.history + ((static_cast<int64_t>(slot[i]) * a.conv_layers + a.conv_slot) * (K - 1)) * D + d;
    float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
    for (int tap = 0; tap < K; ++tap) {
      const int64_t source = in_window - (K - 1) + tap;
      float value[8];
      if (source >= 0) {
#pragma unroll
        for (int e = 0; e < 8; ++e) value[e] = zs[i + tap][e];
      } else {
        const uint4 h = load_chunk(history + (K - 1 + source) * D);
#pragma unroll
        for (int e = 0; e < 8; ++e) value[e] = at(h, e);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[e] = __fmaf_rn(weight[tap][e], value[e], sum[e]);
    }
    const uint4 c = cs[i];
    uint4 zo, yo;
    auto* zp = reinterpret_cast<__nv_bfloat162*>(&zo);
    auto* yp = reinterpret_cast<__nv_bfloat162*>(&yo);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      float out[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int e = 2 * p + h;
        const float s = a.conv_bias ? __fadd_rn(sum[e], bias[e]) : sum[e];
        out[h] = __fmul_rn(at(c, e), round_bf16(s));
      }
      zp[p] = __floats2bfloat162_rn(zs[i + K - 1][2 * p], zs[i + K - 1][2 * p + 1]);  // own z: tap K - 1
      yp[p] = __floats2bfloat162_rn(out[0], out[1]);
    }
    *reinterpret_cast<uint4*>(z + row * D + d) = zo;
    *reinterpret_cast<uint4*>(y + row * D + d) = yo;
  }
}

}  // namespace

bool conv_rows_fits(const ConvArgs& args) {
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(args.bcx) | reinterpret_cast<uintptr_t>(args.history);
  return args.kernel >= 2 && args.kernel <= 4 && args.width > 0 && args.width % 8 == 0 && addresses % 16 == 0 &&
         (args.rows + kRows - 1) / kRows <= 65535;
}

Status conv_rows(const ConvArgs& args, const int32_t* row_window, const WindowInfo* windows, bf16* z, bf16* y,
                 cudaStream_t stream) {
  if (args.rows == 0) return ok_status();
  if (!conv_rows_fits(args) || (reinterpret_cast<uintptr_t>(z) | reinterpret_cast<uintptr_t>(y)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "conv_rows: kernel " + std::to_string(args.kernel) + ", width " +
                                                  std::to_string(args.width) +
                                                  " (kernel 2..4, width a multiple of 8, 16-byte aligned rows)");
  const dim3 grid(blocks_for(args.width / 8, kThreads), static_cast<unsigned>((args.rows + kRows - 1) / kRows));
  auto kernel = args.kernel == 2 ? conv_rows_kernel<2> : args.kernel == 3 ? conv_rows_kernel<3> : conv_rows_kernel<4>;
  kernel<<<grid, kThreads, 0, stream>>>(args, row_window, windows, z, y);
  LS_CUDA_TRY_LAUNCH("conv_rows_kernel");
  return ok_status();
}

// H200 batch s12A (synth 1.2B prefill 2048, three alternated rounds): short conv 0.29 ms against 0.52 with
// short_conv; s12B (rows hoisted): 0.24 / 0.23 / 0.23 ms against 0.51 / 0.51 / 0.52, prefill 10.3 against 10.5-10.6.
bool conv_rows_takes(const ConvArgs& args) { return args.rows >= kFromRows && conv_rows_fits(args); }

}  // namespace ls::lfm2::gpu
