// Device pieces of the tile GEMM kernels (gemm.cu: mma.sync, gemm_wgmma.cu: wgmma): the pipeline stage load, the
// epilogues (one rounding per output; split mode's slice-order sum over a cluster) and the wgmma launch entry.
#pragma once

#include <cooperative_groups.h>

#include "compute/cuda/gemm_device.cuh"

namespace ls::cuda::gemm_detail {

// Loads K tile `kt` of the CTA's A rows and B rows into one pipeline stage.
template <class T>
__device__ __forceinline__ void load_stage(const GemmArgs& args, __nv_bfloat16* stage, int row0, int col0, int kt,
                                           int tid) {
  const int k0 = kt * kBlockK;
  const uint32_t base = smem_address(stage);
  constexpr int kChunks = (T::BM + T::BN) * (kBlockK / 8);
#pragma unroll
  for (int i = 0; i < (kChunks + T::THREADS - 1) / T::THREADS; ++i) {
    const int index = tid + i * T::THREADS;
    if (kChunks % T::THREADS != 0 && index >= kChunks) break;
    const int row = index >> 3, chunk = index & 7;
    const int k = k0 + chunk * 8;
    const __nv_bfloat16* src;
    bool inside;
    if (row < T::BM) {
      const int r = row0 + row;
      inside = r < args.m && k < args.k;
      src = args.x + (static_cast<int64_t>(inside ? r : 0) * args.k + (inside ? k : 0));
    } else {
      const int c = col0 + row - T::BM;
      inside = c < args.n && k < args.k;
      src = args.w + (static_cast<int64_t>(inside ? c : 0) * args.k + (inside ? k : 0));
    }
    copy_chunk(base + swizzled(row, chunk), src, inside);
  }
}

// Split mode: the slice a CTA computes is its rank in its cluster (cluster dims (1, 1, slices), so also blockIdx.z).
__device__ __forceinline__ int split_slice() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  return static_cast<int>(blockIdx.z);
#endif
}

// Split mode's sum, called by all `threads` threads of every CTA of the cluster once each CTA's slice sums [BM][BN]
// fp32 are in its shared memory at `part`: after a cluster barrier each CTA adds its share of the outputs over the
// cluster's CTAs in slice (= rank) order, then bias and one rounding.
template <class T>
__device__ __forceinline__ void split_sum(const GemmArgs& args, float* part, int row0, int col0, int threads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int slices = static_cast<int>(cluster.num_blocks()), rank = split_slice();
  const int pairs = min(T::BM, args.m - row0) * (T::BN / 2);
  const int share = (pairs + slices - 1) / slices;
  const int end = min(pairs, (rank + 1) * share);
  for (int p = rank * share + static_cast<int>(threadIdx.x); p < end; p += threads) {
    const int r = p / (T::BN / 2), c = (p % (T::BN / 2)) * 2;
    float2 v = *reinterpret_cast<const float2*>(cluster.map_shared_rank(part, 0) + r * T::BN + c);
    for (int s = 1; s < slices; ++s) {
      const float2 u = *reinterpret_cast<const float2*>(cluster.map_shared_rank(part, s) + r * T::BN + c);
      v.x = __fadd_rn(v.x, u.x);
      v.y = __fadd_rn(v.y, u.y);
    }
    store_pair(args, row0 + r, col0 + c, v.x, v.y);
  }
  cluster.sync();  // no CTA leaves while another still reads its shared memory
#else
  __trap();  // split mode runs only where the engine found clusters (sm_90+)
#endif
}

// This CTA's slice sums [BM][BN] fp32 to shared memory at `part`, from the accumulators of warps 0..WARPS_M*WARPS_N-1
// (the m16n8 layout of store_tile).
template <class T>
__device__ __forceinline__ void write_part(const float (&acc)[T::MI][T::NI][4], float* part) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = warp_m * T::WM + i * 16 + (lane >> 2) + half * 8;
        const int c = warp_n * T::WN + j * 8 + (lane & 3) * 2;
        *reinterpret_cast<float2*>(part + r * T::BN + c) = make_float2(acc[i][j][half * 2], acc[i][j][half * 2 + 1]);
      }
}

// Split mode's end: this CTA's slice sums go to its shared memory [BM][BN] fp32; after a cluster barrier each CTA
// adds its share of the outputs over the cluster's CTAs in slice (= rank) order, then bias and one rounding.
template <class T>
__device__ __forceinline__ void split_epilogue(const GemmArgs& args, const float (&acc)[T::MI][T::NI][4],
                                               unsigned char* shared_raw, int row0, int col0) {
  static_assert(T::BM * T::BN * 4 <= T::SMEM_BYTES, "the slice sums fit the pipeline's shared memory");
  __syncthreads();  // every warp is done reading the pipeline stages
  float* part = reinterpret_cast<float*>(shared_raw);
  write_part<T>(acc, part);
  split_sum<T>(args, part, row0, col0, T::THREADS);
}

// Plain: one chain over all of K (one slice). Sliced: the slices in turn, a second register set holds the running
// total. Split: this CTA computes slice split_slice() (its cluster rank) only; the cluster adds the slice sums.
enum class Mode { Plain, Sliced, Split };


// Plain / sliced epilogue: the accumulators of a tile in the mma.sync m16n8 layout (c0,c1 at (lane/4,
// 2*(lane%4)+{0,1}); c2,c3 8 rows down), bias added and rounded once.
template <class T>
__device__ __forceinline__ void store_tile(const GemmArgs& args, const float (&acc)[T::MI][T::NI][4], int row0,
                                           int col0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row0 + warp_m * T::WM + i * 16 + (lane >> 2) + half * 8;
        const int c = col0 + warp_n * T::WN + j * 8 + (lane & 3) * 2;
        store_pair(args, r, c, acc[i][j][half * 2], acc[i][j][half * 2 + 1]);
      }
}

// The wgmma tiles (gemm_wgmma.cu, sm_90a): 128 rows as two warpgroups of 64, BN = 256 or 128 columns (LargeDuo: two
// CTAs per SM, one slice only; LargePair / WidePair, TMA only: clusters of two row tiles multicasting W; WideLoop,
// TMA only: persistent 128x256 CTAs walking the output tiles).
enum class WgmmaTile { Wide, Large, LargeDuo, LargePair, WidePair, WideLoop };
constexpr int kMaxWgmmaColumnTiles = 65535;  // column tiles are the grid's y (row tiles its x)
// Launches tile `tile` in `mode` (Sliced: Large only); InvalidArgument where it cannot run.
Status launch_wgmma(WgmmaTile tile, Mode mode, const GemmArgs& args, cudaStream_t stream);
// Shared-memory opt-in of the wgmma kernels (once, outside capture).
void allow_wgmma_shared();
// The warp-specialised TMA wgmma tiles (gemm_tma.cu; Wide / WidePair 128x256 s4, Large / LargePair 128x128 s6):
// Plain (one slice), Sliced (Large, LargePair: the second register set) or Split (Wide, Large: a cluster of one CTA
// per slice).
Status launch_tma(WgmmaTile tile, Mode mode, const GemmArgs& args, cudaStream_t stream);
void allow_tma_shared();

}  // namespace ls::cuda::gemm_detail
