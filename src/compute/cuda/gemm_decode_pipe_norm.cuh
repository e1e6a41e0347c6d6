// The pipeline decode GEMM's x made from the residual add + RMSNorm (session 12, set_decode_pipe_norm): every CTA adds
// its chunks of h and delta into its x rows (CTA 0 also writes h_out), sums the squares and norms them in place, with
// add_rms_norm's bits in the order set_norm_sliced picks. Included by gemm_decode_pipe.cuh only.
#pragma once

#include <cuda_bf16.h>

#include "compute/cuda/decode_norm.cuh"
#include "compute/cuda/row_norm.cuh"

namespace ls::cuda::gemm_detail {

constexpr int kPipeNormScratch = (16 * 8 + 1) * 8 + 16 * 4;  // slice sums of 16 rows of 2048, then the inverses

// The norm weight's chunks a thread of `threads` normalizes when a row's chunks are a multiple of the threads (loaded
// before the programmatic wait: no kernel writes weights); K <= 2048.
template <int WARPS>
struct NormWeights {
  static constexpr int kCount = (2048 / 8 + 32 * WARPS - 1) / (32 * WARPS);
  uint4 w[kCount];
  __device__ void load(const StagedNorm& norm, int k) {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      const int q = threadIdx.x + j * 32 * WARPS;
      if (q < k / 8) w[j] = __ldg(reinterpret_cast<const uint4*>(norm.weight + q * 8));
    }
  }
};

// A lane's chain over its chunk's 8 squares in element order (the sliced order's lane chain).
__device__ __forceinline__ double chunk_square_sum(const uint4& chunk) {
  const auto* p = reinterpret_cast<const __nv_bfloat162*>(&chunk);
  double sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const double lo = __low2float(p[i]), hi = __high2float(p[i]);
    sum = __dadd_rn(sum, __dmul_rn(lo, lo));
    sum = __dadd_rn(sum, __dmul_rn(hi, hi));
  }
  return sum;
}

// x rows [m, k] at x_pitch bytes in shared memory = RMSNorm(round(h + delta)) * weight. scratch: kPipeNormScratch bytes
// of shared memory. With the sliced order and rows of whole slices (k % 256 == 0), 32 consecutive chunks are one slice of
// one row, so each warp's lanes chain their chunk's squares from registers and the tree gives the slice sum; else a warp
// a row sums from shared memory (warp_inverse_rms_of). Ends with the normed rows written (block sync).
template <int WARPS>
__device__ __forceinline__ void pipe_norm_x(const StagedNorm& norm, int m, int k, unsigned char* x_rows, int x_pitch,
                                            double* scratch, const NormWeights<WARPS>& weights) {
  constexpr int kThreads = 32 * WARPS, kInFlight = 8;
  const int row_chunks = k / 8, total = m * row_chunks, slices = row_chunks / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool from_registers = norm.sliced && k > kNormSlice && k % kNormSlice == 0;
  const bool write_h = norm.h_out != nullptr && blockIdx.x == 0;
  auto chunk_at = [&](int i) {
    return reinterpret_cast<uint4*>(x_rows + (i / row_chunks) * x_pitch + (i % row_chunks) * 16);
  };
  for (int first = threadIdx.x; first < total; first += kInFlight * kThreads) {
    uint4 v[kInFlight], d[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * kThreads;
      const int64_t at = static_cast<int64_t>(i / row_chunks) * k + (i % row_chunks) * 8;
      if (i < total) {
        v[j] = *reinterpret_cast<const uint4*>(norm.h + at);
        if (norm.delta) d[j] = *reinterpret_cast<const uint4*>(norm.delta + at);
      }
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * kThreads;  // with whole slices i < total is warp-uniform (total: 32 chunks a slice)
      if (i >= total) continue;
      if (norm.delta) add_chunk(v[j], d[j]);
      if (write_h)
        *reinterpret_cast<uint4*>(norm.h_out + static_cast<int64_t>(i / row_chunks) * k + (i % row_chunks) * 8) = v[j];
      *chunk_at(i) = v[j];
      if (from_registers) {
        const double sum = warp_tree_sum(chunk_square_sum(v[j]));
        if (lane == 0) scratch[i / 32] = sum;  // row i / row_chunks, slice (i % row_chunks) / 32
      }
    }
  }
  __syncthreads();
  float* inverse = reinterpret_cast<float*>(scratch + m * slices + 1);
  if (from_registers) {
    if (threadIdx.x < m) {
      double sum = 0;
      for (int s = 0; s < slices; ++s) sum = __dadd_rn(sum, scratch[threadIdx.x * slices + s]);
      inverse[threadIdx.x] = inverse_rms_from(sum, k, norm.eps);
    }
  } else {
    for (int r = warp; r < m; r += WARPS) {
      const auto* row = reinterpret_cast<const __nv_bfloat16*>(x_rows + r * x_pitch);
      const float inv = warp_inverse_rms_of([row](int i) { return __bfloat162float(row[i]); }, k, norm.eps, norm.sliced);
      if (lane == 0) inverse[r] = inv;
    }
  }
  __syncthreads();
  const bool held = row_chunks % kThreads == 0;  // each thread's weight chunks are the ones it loaded
  for (int i = threadIdx.x; i < total; i += kThreads) {
    const int q = i % row_chunks;
    uint4 w = weights.w[0];
#pragma unroll
    for (int j = 1; j < NormWeights<WARPS>::kCount; ++j)
      if (q / kThreads == j) w = weights.w[j];
    if (!held) w = __ldg(reinterpret_cast<const uint4*>(norm.weight + q * 8));
    *chunk_at(i) = norm_chunk(*chunk_at(i), w, inverse[i / row_chunks]);
  }
  __syncthreads();
}

}  // namespace ls::cuda::gemm_detail
