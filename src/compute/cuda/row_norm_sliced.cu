// The CTA-per-row norms in the sliced order (session 12, issue 8; norm_order.h): row_norm_kernel's loads, add and
// outputs (elementwise.cu), but thread t holds chunks q = t + 256 c (elements 8 q ..), so warp w holds slices w + 8 c
// of 256 elements with lane l at chunk 32 s + l, exactly the slice's lane l of the sliced order: each lane chains
// its own chunk's 8 squares from registers, the xor tree gives the slice sum, one barrier, then every thread adds the
// slice sums in slice order. No row in shared memory and no warp walking the row (row_norm_kernel's warp 0 chains
// 64 elements per lane between two barriers: ~38-40 % of its stalls in session 11's ncu).
#include "compute/cuda/row_norm_sliced.h"

#include <cuda_bf16.h>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/norm_order.h"
#include "compute/cuda/pdl.cuh"
#include "compute/cuda/row_norm.cuh"

namespace ls::cuda {
namespace {

using b16 = __nv_bfloat16;
constexpr int kThreads = 256;  // row_norm_kernel's CTA
constexpr int kChunks = 4;     // 16-byte chunks a thread: widths up to 8192
constexpr int kMaxSlices = kThreads * kChunks * 8 / kNormSlice;

// A lane's chain over its chunk's 8 squares in element order, in double from 0 (the sliced order's lane chain).
__device__ __forceinline__ double chunk_squares(const uint4& chunk) {
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

// ADD: the row is round(in + delta), stored to h_out (when set) first. GATHER: CTA i reads row index[i].
// drop_last_slice: a planted fault for tests (the last slice's sum left out of the total).
template <bool ADD, bool GATHER>
__global__ void __launch_bounds__(kThreads)
    row_norm_sliced_kernel(const b16* in_rows, b16* h_out, const b16* __restrict__ delta, int width,
                           const b16* __restrict__ weight, float eps, b16* y, const int32_t* index,
                           bool drop_last_slice) {
  __shared__ double slice_sums[kMaxSlices];
  let_next_kernel_start();
  const int64_t at = static_cast<int64_t>(GATHER ? index[blockIdx.x] : blockIdx.x) * width;
  const int64_t out_at = static_cast<int64_t>(blockIdx.x) * width;
  const int chunks = width / 8, slices = (width + kNormSlice - 1) / kNormSlice;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint4 v[kChunks], w[kChunks], d[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int q = threadIdx.x + c * kThreads;
    if (q < chunks) w[c] = __ldg(reinterpret_cast<const uint4*>(weight + q * 8));  // weights: no kernel writes them
  }
  wait_for_previous_kernel();
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int q = threadIdx.x + c * kThreads;
    if (q < chunks) {
      v[c] = *reinterpret_cast<const uint4*>(in_rows + at + q * 8);
      if constexpr (ADD) d[c] = *reinterpret_cast<const uint4*>(delta + at + q * 8);
    }
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int q = threadIdx.x + c * kThreads, slice = warp + c * (kThreads / 32);
    if constexpr (ADD) {
      if (q < chunks) {
        add_chunk(v[c], d[c]);
        if (h_out) *reinterpret_cast<uint4*>(h_out + at + q * 8) = v[c];
      }
    }
    if (slice < slices) {  // warp-uniform: every lane of the slice takes part in the tree
      const double sum = warp_tree_sum(q < chunks ? chunk_squares(v[c]) : 0.0);
      if (lane == 0) slice_sums[slice] = sum;
    }
  }
  __syncthreads();
  double total = 0;
  for (int s = 0; s < slices - (drop_last_slice ? 1 : 0); ++s) total = __dadd_rn(total, slice_sums[s]);
  const float inverse = inverse_rms_from(total, width, eps);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int q = threadIdx.x + c * kThreads;
    if (q < chunks) *reinterpret_cast<uint4*>(y + out_at + q * 8) = norm_chunk(v[c], w[c], inverse);
  }
}

}  // namespace

bool row_norm_sliced_for(int width) { return width > kNormSlice && norm_sliced(); }

Status row_norm_sliced(const bf16* in, bf16* h_out, const bf16* delta, const int32_t* index, int64_t rows, int width,
                       const bf16* weight, float eps, bf16* y, cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  if (rows > 0x7fffffff || width % 8 != 0 || width > kThreads * kChunks * 8)
    return Status(ErrorCode::InvalidArgument, "row_norm_sliced: width " + std::to_string(width) + ", rows " +
                                                  std::to_string(rows));
  const auto* in_rows = reinterpret_cast<const b16*>(in);
  auto* h = reinterpret_cast<b16*>(h_out);
  const auto* d = reinterpret_cast<const b16*>(delta);
  const auto* w = reinterpret_cast<const b16*>(weight);
  auto* out = reinterpret_cast<b16*>(y);
  const bool fault = norm_sliced_fault_for_test();
  const dim3 grid(static_cast<unsigned>(rows));
  if (index)
    return delta ? launch_programmatic(row_norm_sliced_kernel<true, true>, grid, kThreads, 0, stream, in_rows,
                                       static_cast<b16*>(nullptr), d, width, w, eps, out, index, fault)
                 : launch_programmatic(row_norm_sliced_kernel<false, true>, grid, kThreads, 0, stream, in_rows,
                                       static_cast<b16*>(nullptr), d, width, w, eps, out, index, fault);
  return delta ? launch_programmatic(row_norm_sliced_kernel<true, false>, grid, kThreads, 0, stream, in_rows, h, d,
                                     width, w, eps, out, index, fault)
               : launch_programmatic(row_norm_sliced_kernel<false, false>, grid, kThreads, 0, stream, in_rows, h, d,
                                     width, w, eps, out, index, fault);
}

}  // namespace ls::cuda
