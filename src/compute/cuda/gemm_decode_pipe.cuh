// What the two pipeline decode kernels share (gemm_decode_pipe.cu: row copies; gemm_decode_tma.cu: tensor copies of
// the weights): a warp's walk over its units (items x chunks of K tiles), an item's outputs, and the slice sums added
// in slice order. Included by CUDA sources only.
#pragma once

#include "compute/cuda/gemm_decode.cuh"

namespace ls::cuda::gemm_detail {

// A warp's walk: items w, w + warps, .. (item = group * slices + slice), each cut in units of `chunk` K tiles.
struct PipeWalk {
  int slices, k_tiles, slice_tiles, chunk, warps;
  __device__ int item_tiles(int item) const { return min(slice_tiles, k_tiles - (item % slices) * slice_tiles); }
  __device__ int chunks(int item) const { return (item_tiles(item) + chunk - 1) / chunk; }
  __device__ int tiles(int item, int c) const { return min(chunk, item_tiles(item) - c * chunk); }
  __device__ int first_tile(int item, int c) const { return (item % slices) * slice_tiles + c * chunk; }
  __device__ void advance(int& item, int& c) const {
    if (++c == chunks(item)) {
      c = 0;
      item += warps;
    }
  }
};

// Item `item`'s outputs from this lane's mma accumulators (TILES 8-column tiles; SWIGLU: gate tile 0, up tile 1),
// then the accumulators zeroed: stored with one rounding (one slice) or its slice sum written to
// partial [slice][A_ROWS][cols] (cols: the CTA's columns, col0 its first).
template <int TILES, int A_ROWS, bool SWIGLU>
__device__ __forceinline__ void finish_item(const GemmArgs& args, float (&acc)[TILES][4], int item, int slices,
                                            int col0, int cols, int out_n, float* partial, int lane) {
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  constexpr int kHalves = A_ROWS == 16 ? 2 : 1;
  const int group_index = item / slices, slice = item % slices;
  const int c_first = col0 + group_index * kItemCols;
#pragma unroll
  for (int half = 0; half < kHalves; ++half) {
    const int r = half * 8 + (lane >> 2);
    if constexpr (SWIGLU) {
      for (int e = 0; e < 2; ++e)
        store_swiglu(args, r, c_first + (lane & 3) * 2 + e, out_n, acc[0][2 * half + e], acc[1][2 * half + e]);
    } else {
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        const int cc = group_index * kItemCols + j * 8 + (lane & 3) * 2;  // column within the CTA
        if (slices == 1) {
          store_pair(args, r, col0 + cc, acc[j][2 * half], acc[j][2 * half + 1]);
        } else {
          float* out = partial + static_cast<int64_t>(slice) * A_ROWS * cols;
          out[r * cols + cc] = acc[j][2 * half];
          out[r * cols + cc + 1] = acc[j][2 * half + 1];
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

// Sliced K, after every warp's items and a CTA barrier: each output's slice sums added in slice order
// (((s0 + s1) + s2) + ..), stored with one rounding; `threads` threads share the outputs.
template <int A_ROWS>
__device__ __forceinline__ void add_slices(const GemmArgs& args, const float* partial, int slices, int col0, int cols,
                                           int threads) {
  for (int o = threadIdx.x; o < args.m * cols / 2; o += threads) {
    const int r = o / (cols / 2), cc = (o % (cols / 2)) * 2;
    float v0 = partial[r * cols + cc], v1 = partial[r * cols + cc + 1];
    for (int s = 1; s < slices; ++s) {
      v0 = __fadd_rn(v0, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + cc]);
      v1 = __fadd_rn(v1, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + cc + 1]);
    }
    store_pair(args, r, col0 + cc, v0, v1);
  }
}

}  // namespace ls::cuda::gemm_detail
