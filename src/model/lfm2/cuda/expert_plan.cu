// CUDA MoE plumbing of the target: the expert plan (choices grouped by expert in slot order) and the weighted
// scatter back into slot order.
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

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

Status scatter_weighted(const bf16* out, const int32_t* order, const float* weights, int64_t slot_count, int width,
                        bf16* slots, cudaStream_t stream) {
  if (slot_count == 0) return ok_status();
  scatter_weighted_kernel<<<blocks_for(slot_count * width, 256), 256, 0, stream>>>(out, order, weights, slot_count,
                                                                                   width, slots);
  LS_CUDA_TRY_LAUNCH("scatter_weighted");
  return ok_status();
}

}  // namespace ls::lfm2::gpu
