// The router GEMM of a route + plan CTA with the whole router preloaded into shared memory before the programmatic
// wait (expert_plan.cu's route_plan_kernel and expert_route.cu's lean kernel): the GemmEngine's canonical chain for
// K <= 2048 (one fp32 accumulator, mma.sync m16n8k16 steps over K ascending from zero, tail zero-filled), + bias,
// rounded to bf16; and the residual add + RMSNorm that makes x, where the norm runs inside. Included by CUDA sources
// only.
#pragma once

#include <cuda_bf16.h>

#include "compute/cuda/gemm_device.cuh"
#include "compute/cuda/pdl.cuh"
#include "compute/cuda/row_norm.cuh"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu::route_detail {

namespace gd = ls::cuda::gemm_detail;

// Bytes of the preloaded router (every K tile's router rows, experts rounded up to 8) and x rows (rounded up to 8).
__host__ __device__ inline int64_t preload_bytes(int64_t rows, int experts, int64_t hidden) {
  const int64_t k_tiles = (hidden + gd::kBlockK - 1) / gd::kBlockK;
  return k_tiles * ((experts + 7) / 8 * 8 + (rows + 7) / 8 * 8) * 128;
}

// A warp's mma accumulators (rows r0.., experts e0..e0+7) plus the router bias, rounded to bf16 router logits
// [rows, E] in a.logits; and, where logits_shared is set, the same values as floats in logits_shared [rows, E].
__device__ __forceinline__ void store_router_logits(const RoutePlan& a, const float (&acc)[4], int lane, int rows,
                                                    int64_t r0, int e0, int E, float* logits_shared) {
  const int r = lane >> 2;
  if (r >= rows) return;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int c = e0 + (lane & 3) * 2 + e;
    if (c >= E) continue;
    const float v = a.router_bias ? __fadd_rn(acc[e], a.router_bias[c]) : acc[e];
    const __nv_bfloat16 logit = __float2bfloat16_rn(v);
    reinterpret_cast<__nv_bfloat16*>(a.logits)[(r0 + r) * E + c] = logit;
    if (logits_shared) logits_shared[(r0 + r) * E + c] = __bfloat162float(logit);
  }
}

// Bytes a route + plan with the norm inside adds after its other shared memory: the norm weight [hidden] bf16 and
// each row's inverse rms.
__host__ __device__ inline int64_t norm_bytes(int64_t rows, int64_t hidden) { return 2 * hidden + 4 * rows; }

// The norm inside (RoutePlan::norm_*), run by the whole CTA after the programmatic wait, with row_norm_kernel's
// arithmetic: h = round(h + delta) in place, then x = round(weight * round(h * inverse_rms)) into norm_out and into
// the swizzled x tiles (x_tiles, rows8 rows a K tile), whose padding is zero already. weight: the norm weight staged
// in shared memory; inverse: [rows] floats of shared memory. Each row's sum of squares by one warp in
// warp_inverse_rms's order. Ends with every x tile written (block sync).
__device__ __forceinline__ void norm_rows_into_x(const RoutePlan& a, unsigned char* x_tiles, int rows8,
                                                 const uint4* weight, float* inverse) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int D = static_cast<int>(a.hidden), chunks = D / 8, items = static_cast<int>(a.rows) * chunks;
  auto tile_chunk = [&](int r, int q) {  // row r's 16-byte chunk q (elements 8q ..) in the x tiles
    return reinterpret_cast<uint4*>(x_tiles + gd::swizzled((q >> 3) * rows8 + r, q & 7));
  };
  constexpr int kBatch = 4;  // chunks a thread has in flight
  for (int base = threadIdx.x; base < items; base += kBatch * blockDim.x) {
    uint4 h[kBatch], d[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * blockDim.x;
      if (i >= items) continue;
      const int64_t at = static_cast<int64_t>(i / chunks) * D + (i % chunks) * 8;
      h[j] = *reinterpret_cast<const uint4*>(a.norm_h + at);
      d[j] = *reinterpret_cast<const uint4*>(a.norm_delta + at);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * blockDim.x;
      if (i >= items) continue;
      ls::cuda::add_chunk(h[j], d[j]);
      *reinterpret_cast<uint4*>(a.norm_h + static_cast<int64_t>(i / chunks) * D + (i % chunks) * 8) = h[j];
      *tile_chunk(i / chunks, i % chunks) = h[j];
    }
  }
  __syncthreads();
  for (int r = warp; r < a.rows; r += warps) {
    const float inv = ls::cuda::warp_inverse_rms_of(
        [&](int e) {
          return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(tile_chunk(r, e >> 3))[e & 7]);
        },
        D, a.norm_eps);
    if (lane == 0) inverse[r] = inv;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int r = i / chunks, q = i % chunks;
    const uint4 v = ls::cuda::norm_chunk(*tile_chunk(r, q), weight[q], inverse[r], a.norm_fault_for_test);
    *tile_chunk(r, q) = v;
    *reinterpret_cast<uint4*>(a.norm_out + static_cast<int64_t>(r) * D + q * 8) = v;
  }
  __syncthreads();
}

// The router staged whole in shared memory (smem, preload_bytes) before the programmatic wait (it is constant), the
// x rows after it; then each warp runs its (row chunk of 8, 8 experts) items' chains from shared memory. Every CTA
// thread stages chunks. Returns after the wait with every item's logits stored by its warp
// (no block sync after). NORM: x is made by norm_rows_into_x instead of copied (norm_smem: norm_bytes of shared
// memory, 16-byte aligned; the weight staged before the wait and the x tiles' padding zeroed there).
template <bool NORM = false>
__device__ __forceinline__ void router_preloaded_in_block(const RoutePlan& a, unsigned char* smem,
                                                          float* logits_shared, unsigned char* norm_smem = nullptr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int E = a.experts, D = static_cast<int>(a.hidden), e8 = (E + 7) / 8 * 8;
  const int rows8 = static_cast<int>((a.rows + 7) / 8 * 8);
  const int groups = e8 / 8, k_tiles = (D + gd::kBlockK - 1) / gd::kBlockK;
  const uint32_t w_base = gd::smem_address(smem), x_base = w_base + k_tiles * e8 * 128;
  for (int i = threadIdx.x; i < k_tiles * e8 * 8; i += blockDim.x) {  // row t e8 + e: expert e's K tile t
    const int row = i >> 3, part = i & 7, t = row / e8, e = row % e8, k = t * gd::kBlockK + part * 8;
    const bool inside = e < E && k < D;
    const bf16* src = a.router + (inside ? static_cast<int64_t>(e) * D + k : 0);
    gd::copy_chunk(w_base + gd::swizzled(row, part), src, inside);
  }
  if constexpr (NORM) {
    for (int q = threadIdx.x; q < D / 8; q += blockDim.x)  // the norm weight (constant)
      gd::copy_chunk(gd::smem_address(norm_smem) + q * 16, a.norm_weight + q * 8, true);
    unsigned char* x_tiles = smem + k_tiles * e8 * 128;
    for (int i = threadIdx.x; i < k_tiles * rows8 * 8; i += blockDim.x) {  // zero the x tiles' padding
      const int row = i >> 3, part = i & 7, t = row / rows8, r = row % rows8;
      if (r >= a.rows || t * gd::kBlockK + part * 8 >= D)
        *reinterpret_cast<uint4*>(x_tiles + gd::swizzled(row, part)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  gd::commit_group();
  ls::cuda::wait_for_previous_kernel();  // the kernel before wrote x (NORM: h and delta)
  ls::cuda::let_next_kernel_start();
  if constexpr (NORM) {
    gd::wait_group<0>();
    __syncthreads();  // the norm weight is in shared memory
    norm_rows_into_x(a, smem + k_tiles * e8 * 128, rows8, reinterpret_cast<const uint4*>(norm_smem),
                     reinterpret_cast<float*>(norm_smem + 2 * a.hidden));
  } else {
    for (int i = threadIdx.x; i < k_tiles * rows8 * 8; i += blockDim.x) {  // row t rows8 + r: x row r's K tile t
      const int row = i >> 3, part = i & 7, t = row / rows8, r = row % rows8, k = t * gd::kBlockK + part * 8;
      const bool inside = r < a.rows && k < D;
      gd::copy_chunk(x_base + gd::swizzled(row, part), a.x + (inside ? static_cast<int64_t>(r) * D + k : 0), inside);
    }
    gd::commit_group();
    gd::wait_group<0>();
    __syncthreads();
  }
  const int items = groups * (rows8 / 8);
  for (int item = warp; item < items; item += warps) {
    const int e0 = (item % groups) * 8, r0 = (item / groups) * 8;
    const int rows = static_cast<int>(min(static_cast<int64_t>(8), a.rows - r0));
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int t = 0; t < k_tiles; ++t) {
#pragma unroll
      for (int step = 0; step < gd::kBlockK / 16; ++step) {  // the same mma steps as the GemmEngine's chain
        uint32_t fa[4], fb[2];
        const int chunk = step * 2 + ((lane >> 3) & 1);
        gd::ldmatrix_x2(x_base + gd::swizzled(t * rows8 + r0 + (lane & 7), chunk), fa[0], fa[2]);
        fa[1] = fa[3] = 0u;
        gd::ldmatrix_x2(w_base + gd::swizzled(t * e8 + e0 + (lane & 7), chunk), fb[0], fb[1]);
        gd::mma_bf16(acc, fa, fb);
      }
    }
    store_router_logits(a, acc, lane, rows, r0, e0, E, logits_shared);
  }
}

}  // namespace ls::lfm2::gpu::route_detail
