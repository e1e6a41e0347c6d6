// Device helpers shared by the CUDA target's state kernels (bf16 loads/stores, page lookup, grid sizes).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "base/bf16.h"

namespace ls::lfm2::gpu {

__device__ __forceinline__ float load(const bf16* p) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}
__device__ __forceinline__ void store(bf16* p, float v) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v);
}
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Key j of a stream: its row in the page pool.
__device__ __forceinline__ int64_t key_row(const int32_t* pages, int64_t j, int page_size) {
  return static_cast<int64_t>(pages[j / page_size]) * page_size + j % page_size;
}

inline unsigned blocks_for(int64_t count, int threads) { return static_cast<unsigned>((count + threads - 1) / threads); }

}  // namespace ls::lfm2::gpu
