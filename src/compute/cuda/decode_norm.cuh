// The residual add + RMSNorm a decode GEMM runs in its prologue (add_rms_norm's arithmetic, bitwise), staging the
// normed rows into shared memory in the kernel's own layout: the staged kernel's padded rows, the streaming kernel's
// swizzled 64-wide K tiles. Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "compute/cuda/gemm_device.cuh"

namespace ls::cuda::gemm_detail {

struct StagedNorm {
  const __nv_bfloat16* h;       // [m, K] residual stream
  const __nv_bfloat16* delta;   // [m, K] added to h first, or null
  __nv_bfloat16* h_out;         // [m, K] round(h + delta), written by CTA 0, or null
  const __nv_bfloat16* weight;  // [K] RMSNorm weight; null: no prologue
  float eps;
};

// Layouts: the byte offset of element (row, k) in shared memory; a chunk of 8 at k % 8 == 0 is 16 contiguous bytes.
struct PitchedRows {  // the staged kernel: rows of `pitch` bytes
  int pitch;
  __device__ __forceinline__ int operator()(int row, int k) const { return row * pitch + k * 2; }
};
template <int ROWS>
struct SwizzledTiles {  // the streaming kernel: per 64-wide K tile ROWS swizzled 128-byte rows
  __device__ __forceinline__ int operator()(int row, int k) const {
    return (k / kBlockK) * ROWS * 128 + swizzled(row, (k % kBlockK) / 8) + (k % 8) * 2;
  }
};

union Chunk {
  uint4 raw;
  __nv_bfloat162 pairs[4];
};

// x_rows (rows [m, k_pad] placed by `layout`) = RMSNorm(round(h + delta)) * weight (add_rms_norm's arithmetic;
// rms_norm's without delta), inverse_rms [m] fp32 beside it in dynamic shared memory (static shared memory would lower the opt-in limit): the
// row values first (CTA 0 also writes them to h_out), then each row's inverse RMS by one warp in rms_norm_kernel's
// order (lane l chains elements l, l + 32, ... in double, then the xor tree; up to 4 rows interleaved per warp),
// then the normed values in place. Zero past K.
template <int THREADS, class Layout>
__device__ __forceinline__ void stage_normed_x(const StagedNorm& norm, int m, int k, int k_pad, unsigned char* x_rows,
                                               Layout layout, float* inverse_rms, bool write_h) {
  constexpr int WARPS = THREADS / 32;
  const int x_chunks = k_pad / 8, total = m * x_chunks;
  // kLoads chunks of h and delta per thread in flight before any store (a load-store loop waits one L2 round trip
  // per chunk: session 4's prologue cost).
  constexpr int kLoads = 4;
  for (int first = threadIdx.x; first < total; first += 32 * WARPS * kLoads) {
    Chunk v[kLoads], d[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * 32 * WARPS, row = index / x_chunks, at = (index % x_chunks) * 8;
      v[i].raw = d[i].raw = make_uint4(0, 0, 0, 0);
      if (index < total && at < k) {
        const int64_t offset = static_cast<int64_t>(row) * k + at;
        v[i].raw = *reinterpret_cast<const uint4*>(norm.h + offset);
        if (norm.delta) d[i].raw = *reinterpret_cast<const uint4*>(norm.delta + offset);
      }
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * 32 * WARPS, row = index / x_chunks, at = (index % x_chunks) * 8;
      if (index >= total) continue;
      if (norm.delta && at < k) {
#pragma unroll
        for (int p = 0; p < 4; ++p)
          v[i].pairs[p] = __floats2bfloat162_rn(__fadd_rn(__low2float(v[i].pairs[p]), __low2float(d[i].pairs[p])),
                                                __fadd_rn(__high2float(v[i].pairs[p]), __high2float(d[i].pairs[p])));
        if (write_h && norm.h_out) *reinterpret_cast<uint4*>(norm.h_out + static_cast<int64_t>(row) * k + at) = v[i].raw;
      }
      *reinterpret_cast<uint4*>(x_rows + layout(row, at)) = v[i].raw;
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int row0 = warp * 4; row0 < m; row0 += WARPS * 4) {
    double sum[4] = {0, 0, 0, 0};
    for (int i = lane; i < k; i += 32) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (row0 + r < m) {
          const double v = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(x_rows + layout(row0 + r, i - i % 8))[i % 8]);
          sum[r] = __dadd_rn(sum[r], __dmul_rn(v, v));
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1)
        sum[r] = __dadd_rn(sum[r], __shfl_xor_sync(0xffffffffu, sum[r], offset));
      if (lane == 0 && row0 + r < m) {
        const float mean = static_cast<float>(sum[r] / static_cast<double>(k));
        inverse_rms[row0 + r] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, norm.eps)));
      }
    }
  }
  __syncthreads();
  for (int first = threadIdx.x; first < total; first += 32 * WARPS * kLoads) {
    Chunk w[kLoads];  // the norm weight's chunks, all loads in flight first
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * 32 * WARPS, at = (index % x_chunks) * 8;
      w[i].raw = index < total && at < k ? __ldg(reinterpret_cast<const uint4*>(norm.weight + at)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * 32 * WARPS, row = index / x_chunks, at = (index % x_chunks) * 8;
      if (index >= total || at >= k) continue;
      const float inv = inverse_rms[row];
      Chunk v, out;
      v.raw = *reinterpret_cast<const uint4*>(x_rows + layout(row, at));
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float lo = __fmul_rn(__low2float(w[i].pairs[p]),
                                   __bfloat162float(__float2bfloat16_rn(__fmul_rn(__low2float(v.pairs[p]), inv))));
        const float hi = __fmul_rn(__high2float(w[i].pairs[p]),
                                   __bfloat162float(__float2bfloat16_rn(__fmul_rn(__high2float(v.pairs[p]), inv))));
        out.pairs[p] = __floats2bfloat162_rn(lo, hi);
      }
      *reinterpret_cast<uint4*>(x_rows + layout(row, at)) = out.raw;
    }
  }
}

}  // namespace ls::cuda::gemm_detail
