// CUDA MoE expert kernels of the target: the expert plan, the grouped expert GEMM and the weighted scatter.
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "compute/cuda/cuda_util.h"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

// One warp per expert (looping when experts > warps): a ballot scan keeps slot order inside the expert.
__global__ void plan_experts_kernel(const int32_t* chosen, int64_t slot_count, int experts, int32_t* offsets,
                                    int32_t* order) {
  extern __shared__ int32_t counts[];  // [experts]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int e = warp; e < experts; e += warps) {
    int count = 0;
    for (int64_t base = 0; base < slot_count; base += 32) {
      const int64_t s = base + lane;
      const unsigned mask = __ballot_sync(0xffffffffu, s < slot_count && chosen[s] == e);
      count += __popc(mask);
    }
    if (lane == 0) counts[e] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int running = 0;
    for (int e = 0; e < experts; ++e) {
      offsets[e] = running;
      running += counts[e];
      counts[e] = offsets[e];
    }
    offsets[experts] = running;
  }
  __syncthreads();
  for (int e = warp; e < experts; e += warps) {
    int next = counts[e];
    for (int64_t base = 0; base < slot_count; base += 32) {
      const int64_t s = base + lane;
      const bool mine = s < slot_count && chosen[s] == e;
      const unsigned mask = __ballot_sync(0xffffffffu, mine);
      if (mine) order[next + __popc(mask & ((1u << lane) - 1u))] = static_cast<int32_t>(s);
      next += __popc(mask);
    }
  }
}

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

__global__ void scatter_weighted_kernel(const bf16* out, const int32_t* order, const float* weights,
                                        int64_t slot_count, int width, bf16* slots) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= slot_count * width) return;
  const int64_t p = i / width;
  const int d = static_cast<int>(i % width);
  const int32_t slot = order[p];
  store(slots + static_cast<int64_t>(slot) * width + d, load(out + i) * weights[slot]);
}
}  // namespace

Status plan_experts(const int32_t* chosen, int64_t slot_count, int experts, int32_t* offsets, int32_t* order,
                    cudaStream_t stream) {
  const int warps = experts < 32 ? experts : 32;
  plan_experts_kernel<<<1, warps * 32, sizeof(int32_t) * experts, stream>>>(chosen, slot_count, experts, offsets,
                                                                            order);
  LS_CUDA_TRY_LAUNCH("plan_experts");
  return ok_status();
}

Status expert_gemm(const bf16* x, const int32_t* offsets, int experts, int64_t max_rows_per_expert, const bf16* w,
                   int64_t n, int64_t k, bf16* y, cudaStream_t stream) {
  if (k % 8 != 0)
    return Status(ErrorCode::InvalidArgument, "expert_gemm: K " + std::to_string(k) + " is not a multiple of 8");
  if (max_rows_per_expert == 0) return ok_status();
  const int64_t cols_per_cta = kExpertWarps * kExpertColsPerWarp;
  const dim3 grid(static_cast<unsigned>((n + cols_per_cta - 1) / cols_per_cta), static_cast<unsigned>(experts),
                  static_cast<unsigned>(std::min<int64_t>(kExpertMaxChunksInFlight,
                                                          (max_rows_per_expert + kExpertRows - 1) / kExpertRows)));
  expert_gemm_kernel<<<grid, kExpertWarps * 32, 0, stream>>>(x, offsets, w, n, k, y);
  LS_CUDA_TRY_LAUNCH("expert_gemm");
  return ok_status();
}

Status scatter_weighted(const bf16* out, const int32_t* order, const float* weights, int64_t slot_count, int width,
                        bf16* slots, cudaStream_t stream) {
  if (slot_count == 0) return ok_status();
  scatter_weighted_kernel<<<blocks_for(slot_count * width, 256), 256, 0, stream>>>(out, order, weights, slot_count,
                                                                                   width, slots);
  LS_CUDA_TRY_LAUNCH("scatter_weighted");
  return ok_status();
}

}  // namespace ls::lfm2::gpu
