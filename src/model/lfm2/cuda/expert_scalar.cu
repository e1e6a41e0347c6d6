// The scalar fp32 grouped expert GEMM of the CUDA target (any K a multiple of 8): the pick for small K (the test and
// golden models) and where the tensor-core kernels do not apply.
#include <cuda_bf16.h>

#include <algorithm>

#include "compute/cuda/cuda_util.h"
#include "model/lfm2/cuda/expert_launch.h"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

constexpr int kExpertRows = 16;     // rows of one CTA
constexpr int kExpertWarps = 8;
constexpr int kExpertColsPerWarp = 2;
constexpr int kExpertChunk = 256;   // K elements per chunk: 8 per lane
constexpr int64_t kExpertMaxChunksInFlight = 16;  // row chunks of one expert run side by side (grid z)

// CTA (column block, expert, z) runs the expert's row chunks z, z + gridDim.z, ... (chunks of kExpertRows rows).
__global__ void __launch_bounds__(kExpertWarps * 32) expert_gemm_kernel(const bf16* x, const int32_t* offsets,
                                                                        const bf16* w, int64_t n, int64_t k, bf16* y) {
  const int expert = blockIdx.y;
  const int64_t end = offsets[expert + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kExpertWarps + warp) * kExpertColsPerWarp;
  const bf16* we = w + static_cast<int64_t>(expert) * n * k;
  __shared__ __align__(16) bf16 xs[kExpertRows][kExpertChunk];
  for (int64_t begin = offsets[expert] + static_cast<int64_t>(blockIdx.z) * kExpertRows; begin < end;
       begin += static_cast<int64_t>(gridDim.z) * kExpertRows) {
    const int rows = static_cast<int>(end - begin < kExpertRows ? end - begin : kExpertRows);
    float acc[kExpertColsPerWarp][kExpertRows];
#pragma unroll
    for (int c = 0; c < kExpertColsPerWarp; ++c)
#pragma unroll
      for (int r = 0; r < kExpertRows; ++r) acc[c][r] = 0.0f;
    for (int64_t chunk = 0; chunk < k; chunk += kExpertChunk) {
      __syncthreads();
      for (int i = threadIdx.x; i < kExpertRows * kExpertChunk / 8; i += blockDim.x) {
        const int r = i / (kExpertChunk / 8), e8 = (i % (kExpertChunk / 8)) * 8;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (r < rows && chunk + e8 < k) value = *reinterpret_cast<const uint4*>(x + (begin + r) * k + chunk + e8);
        *reinterpret_cast<uint4*>(&xs[r][e8]) = value;
      }
      __syncthreads();
      const int64_t kk = chunk + lane * 8;
      if (kk >= k) continue;
#pragma unroll
      for (int c = 0; c < kExpertColsPerWarp; ++c) {
        const int64_t col = col0 + c;
        if (col >= n) continue;
        const uint4 packed = *reinterpret_cast<const uint4*>(we + col * k + kk);
        const bf16* wv = reinterpret_cast<const bf16*>(&packed);
        float wf[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) wf[j] = load(wv + j);
#pragma unroll
        for (int r = 0; r < kExpertRows; ++r) {
          if (r < rows) {
            float a = acc[c][r];
#pragma unroll
            for (int j = 0; j < 8; ++j) a = __fmaf_rn(load(&xs[r][lane * 8 + j]), wf[j], a);
            acc[c][r] = a;
          }
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kExpertColsPerWarp; ++c) {
      const int64_t col = col0 + c;
#pragma unroll
      for (int r = 0; r < kExpertRows; ++r) {
        float a = acc[c][r];
        for (int offset = 16; offset > 0; offset >>= 1) a += __shfl_xor_sync(0xffffffffu, a, offset);
        if (lane == 0 && r < rows && col < n) store(y + (begin + r) * n + col, a);
      }
    }
  }
}

}  // namespace

Status launch_expert_scalar(const bf16* x, const int32_t* offsets, int experts, int64_t max_rows_per_expert,
                            const bf16* w, int64_t n, int64_t k, bf16* y, cudaStream_t stream) {
  const int64_t cols_per_cta = kExpertWarps * kExpertColsPerWarp;
  const dim3 grid(static_cast<unsigned>((n + cols_per_cta - 1) / cols_per_cta), static_cast<unsigned>(experts),
                  static_cast<unsigned>(std::min<int64_t>(kExpertMaxChunksInFlight,
                                                          (max_rows_per_expert + kExpertRows - 1) / kExpertRows)));
  expert_gemm_kernel<<<grid, kExpertWarps * 32, 0, stream>>>(x, offsets, w, n, k, y);
  LS_CUDA_TRY_LAUNCH("expert_gemm");
  return ok_status();
}

}  // namespace ls::lfm2::gpu
