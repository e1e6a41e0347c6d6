// The streaming decode GEMM body (m <= 16, and 32 / 64 x rows for verify windows): every (column group, slice) item
// is one warp's own cp.async pipeline of STAGES K tiles, weights staged before the programmatic wait (the streaming
// kernels of gemm_decode_stream.cu). Included by CUDA sources only.
#pragma once

#include "compute/cuda/gemm_decode.cuh"

namespace ls::cuda::gemm_detail {

// ---- The streaming variants: WARPS warps, STAGES tiles of K in flight per warp, TILES x 8 columns per item, A_ROWS
// rows of x staged per tile (8, 16, or 32 / 64 for verify windows: one m16 mma set per 16 rows on each weight
// fragment). One slice: a CTA's items are WARPS column groups, one per warp, and each warp stores its outputs itself.
// Sliced K: groups = max(1, WARPS / slices), items group * slices + slice, the slice sums meet in shared memory
// [slices][A_ROWS][cols]. Programmatic dependent launch (sm_90): the streaming kernels start while the kernel before
// them drains and stage their first weight tiles before waiting for it (its completion and memory).
template <int WARPS, int STAGES, int TILES, int A_ROWS, bool NORM = false>
struct Stream {
  static constexpr int kWRow0 = NORM ? 0 : A_ROWS;  // a stage's first weight row (NORM: x lives outside the stages)
  static constexpr int kStageBytes = (kWRow0 + 8 * TILES) * 128;
  static constexpr int kPipeBytes = WARPS * STAGES * kStageBytes;
};

// SWIGLU (one slice, TILES = 2): W is gate_up [2F, K]; an item's first 8 rows are gate columns c.., its second 8
// the up columns F + c..; the epilogue writes y_b16 [m, F] = swiglu's bits of the two rounded outputs.
// prefetch_tiles > 0: before the programmatic wait each warp asks L2 for its items' weight tiles STAGES-1 ..
// prefetch_tiles-1 (one bulk prefetch per weight row), so the weights stream in while the kernel before drains and
// the pipeline then reads them from L2. The order of the chain is untouched.
// NORM (one slice, one item per warp): after the wait the CTA stages x = RMSNorm(round(h + delta)) * weight [A_ROWS,
// K] once, as swizzled K tiles after the stages (decode_norm.cuh, add_rms_norm's bits; CTA 0 writes h_out), and the
// A fragments come from there; the stages hold weights only.
template <int WARPS, int STAGES, int TILES, int A_ROWS, bool SWIGLU, bool NORM = false>
__device__ __forceinline__ void stream_body(const GemmArgs& args, int slices, int groups, int block,
                                            int prefetch_tiles, const StagedNorm& norm) {
  using S = Stream<WARPS, STAGES, TILES, A_ROWS, NORM>;
  static_assert(!NORM || A_ROWS <= 16, "the norm prologue serves decode rows");
  static_assert(!SWIGLU || TILES == 2, "SwiGLU items pair 8 gate and 8 up columns");
  static_assert(A_ROWS == 8 || A_ROWS % 16 == 0, "x rows: 8, or whole m16 sets");
  constexpr int MI = A_ROWS >= 16 ? A_ROWS / 16 : 1;  // m16 mma sets per weight fragment
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;  // output columns per item
  const int out_n = SWIGLU ? args.n / 2 : args.n;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int slice_tiles = slices == 1 ? k_tiles : kSliceTiles;
  const int cols = groups * kItemCols;
  const int col0 = block * cols;
  float* partial = reinterpret_cast<float*>(shared_raw + S::kPipeBytes);
  unsigned char* x_tiles = shared_raw + S::kPipeBytes;  // NORM: [k_tiles][A_ROWS] swizzled rows (one slice: no partial)
  unsigned char* pipe = shared_raw + warp * STAGES * S::kStageBytes;
  const uint32_t pipe_base = smem_address(pipe);
  let_next_kernel_start();
  for (int item = warp; prefetch_tiles >= STAGES && item < groups * slices; item += WARPS) {
    const int first_tile = (item % slices) * slice_tiles;
    const int to = min(min(slice_tiles, k_tiles - first_tile), prefetch_tiles);
    if (to <= STAGES - 1) continue;
    const int k0 = (first_tile + STAGES - 1) * kBlockK, k1 = min((first_tile + to) * kBlockK, args.k);
    const int c_first = col0 + (item / slices) * kItemCols;
    for (int w_row = lane; w_row < 8 * TILES; w_row += 32) {
      const int out_c = c_first + (SWIGLU ? (w_row & 7) : w_row);
      const int c = SWIGLU && w_row >= 8 ? out_n + out_c : out_c;
      if (out_c < out_n) prefetch_l2(args.w + static_cast<int64_t>(c) * args.k + k0, (k1 - k0) * 2);
    }
  }

  // x rows m .. A_ROWS-1 stay zero in every stage: cleared once, never copied into.
  for (int i = lane; !NORM && i < STAGES * (A_ROWS - args.m) * 8; i += 32) {
    const int stage = i / ((A_ROWS - args.m) * 8), rest = i % ((A_ROWS - args.m) * 8);
    *reinterpret_cast<uint4*>(pipe + stage * S::kStageBytes + (args.m + rest / 8) * 128 + (rest % 8) * 16) =
        make_uint4(0, 0, 0, 0);
  }
  __syncwarp();

  for (int item = warp; item < groups * slices; item += WARPS) {
    const int group = item / slices, slice = item % slices;
    const int c_first = col0 + group * kItemCols;
    const int first_tile = slice * slice_tiles;
    const int tiles = min(slice_tiles, k_tiles - first_tile);
    // Fixed per lane and item: the W chunks the lane copies (rows (lane >> 3) + 4 i, chunk lane & 7: 8 * TILES rows
    // x 8 chunks, 4 rows per instruction) as pointers at the slice's first K element, their shared-memory offsets and
    // whether the row is inside N; the tile loop adds only the tile's K offset (a warp's loop is a serial instruction
    // stream, so its address arithmetic is paid in full).
    const int chunk = lane & 7;
    const int k_left = args.k - first_tile * kBlockK - chunk * 8;  // a chunk at tile offset koff is inside K below this
    const __nv_bfloat16* w_src[2 * TILES];
    uint32_t w_dst[2 * TILES];
    bool w_in[2 * TILES];
#pragma unroll
    for (int i = 0; i < 2 * TILES; ++i) {
      const int w_row = (lane >> 3) + 4 * i;
      const int out_c = c_first + (SWIGLU ? (w_row & 7) : w_row);
      const int c = SWIGLU && w_row >= 8 ? out_n + out_c : out_c;
      w_in[i] = out_c < out_n;
      w_src[i] = args.w + (w_in[i] ? static_cast<int64_t>(c) * args.k + first_tile * kBlockK + chunk * 8 : 0);
      w_dst[i] = swizzled(S::kWRow0 + w_row, chunk);
    }
    const __nv_bfloat16* x_src = args.x + static_cast<int64_t>(lane >> 3) * args.k + first_tile * kBlockK + chunk * 8;
    const int64_t x_step = 4 * static_cast<int64_t>(args.k);  // 4 rows of x
    auto tile_offset = [&](int t) { return (args.reverse_k ? tiles - 1 - t : t) * kBlockK; };
    // The fixed pointers are the 8-row launches' (decode, m <= 8: batch B 2048->2048 9.8 -> 8.8 us, the decode step
    // 1.220 -> 1.082 ms); with 16..64 x rows they were slower (2048->2048 at m = 16 14.0 -> 15.3 us, streamed 17 rows
    // 18.7 -> 23.7), so those keep the per-tile arithmetic. Same chunks either way.
    auto load_w = [&](int t, int stage) {
      const uint32_t base = pipe_base + stage * S::kStageBytes;
      if constexpr (A_ROWS == 8) {
        const int koff = tile_offset(t);
#pragma unroll
        for (int i = 0; i < 2 * TILES; ++i) {
          const bool inside = w_in[i] && koff < k_left;
          copy_chunk(base + w_dst[i], inside ? w_src[i] + koff : args.w, inside);
        }
      } else {
        const int k_base = (first_tile + (args.reverse_k ? tiles - 1 - t : t)) * kBlockK;
#pragma unroll
        for (int i = 0; i < 2 * TILES; ++i) {  // W: 8 * TILES rows x 8 chunks, 4 rows per instruction
          const int index = lane + 32 * i;
          const int w_row = index >> 3, k = k_base + (index & 7) * 8;
          const int out_c = c_first + (SWIGLU ? (w_row & 7) : w_row);
          const int c = SWIGLU && w_row >= 8 ? out_n + out_c : out_c;
          const bool inside = out_c < out_n && k < args.k;
          copy_chunk(base + swizzled(S::kWRow0 + w_row, index & 7),
                     args.w + (static_cast<int64_t>(inside ? c : 0) * args.k + (inside ? k : 0)), inside);
        }
      }
    };
    auto load_x = [&](int t, int stage) {
      if constexpr (NORM) return;  // x is staged once, normed, in x_tiles
      const uint32_t base = pipe_base + stage * S::kStageBytes;
      if constexpr (A_ROWS == 8) {
        const int koff = tile_offset(t);
        const bool inside = koff < k_left;
#pragma unroll
        for (int j = 0; j < A_ROWS / 4; ++j) {  // x: rows (lane >> 3) + 4 j, those < m
          const int row = (lane >> 3) + 4 * j;
          if (row < args.m) copy_chunk(base + swizzled(row, chunk), inside ? x_src + j * x_step + koff : args.x, inside);
        }
      } else {
        const int k_base = (first_tile + (args.reverse_k ? tiles - 1 - t : t)) * kBlockK;
        for (int index = lane; index < args.m * 8; index += 32) {  // x: rows < m
          const int row = index >> 3, k = k_base + (index & 7) * 8;
          const bool inside = k < args.k;
          copy_chunk(base + swizzled(row, index & 7),
                     args.x + (static_cast<int64_t>(row) * args.k + (inside ? k : 0)), inside);
        }
      }
    };
    float acc[MI][TILES][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < TILES; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    // Prologue: the weights first (no kernel writes them), then wait for the kernel that writes x, then x; all of
    // it is group 0 (the first tile waits for the whole prologue), then empty groups keep the count.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < tiles) load_w(s, s);
    wait_for_previous_kernel();
    if constexpr (NORM) {  // every warp has exactly one item (one slice, groups = WARPS): the CTA meets here once
      for (int i = threadIdx.x; i < k_tiles * (A_ROWS - args.m) * 8; i += 32 * WARPS) {  // rows m.. stay zero
        const int tile = i / ((A_ROWS - args.m) * 8), rest = i % ((A_ROWS - args.m) * 8);
        *reinterpret_cast<uint4*>(x_tiles + tile * A_ROWS * 128 + swizzled(args.m + rest / 8, rest % 8)) =
            make_uint4(0, 0, 0, 0);
      }
      stage_normed_x<32 * WARPS>(norm, args.m, args.k, k_tiles * kBlockK, x_tiles, SwizzledTiles<A_ROWS>{},
                                 reinterpret_cast<float*>(x_tiles + k_tiles * A_ROWS * 128), block == 0);
      __syncthreads();
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < tiles) load_x(s, s);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) commit_group();
    int read_stage = 0, write_stage = STAGES - 1;  // t % STAGES and (t + STAGES - 1) % STAGES without a division
    for (int t = 0; t < tiles; ++t) {
      wait_group<STAGES - 2>();
      __syncwarp();
      if (t + STAGES - 1 < tiles) {
        load_w(t + STAGES - 1, write_stage);
        load_x(t + STAGES - 1, write_stage);
      }
      commit_group();
      const uint32_t a_base = pipe_base + read_stage * S::kStageBytes;  // the stage: W (and x unless NORM)
      const uint32_t x_base =
          NORM ? smem_address(x_tiles) + (first_tile + (args.reverse_k ? tiles - 1 - t : t)) * A_ROWS * 128 : a_base;
      read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
      write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        uint32_t a[MI][4], b[TILES][2];
        if constexpr (A_ROWS >= 16) {
#pragma unroll
          for (int i = 0; i < MI; ++i)
            ldmatrix_x4(x_base + swizzled(i * 16 + (lane & 15), kk * 2 + (lane >> 4)), a[i][0], a[i][1], a[i][2],
                        a[i][3]);
        } else {  // rows 0..7 at k 0..7 and 8..15; the mma's rows 8..15 are zero
          ldmatrix_x2(x_base + swizzled(lane & 7, kk * 2 + ((lane >> 3) & 1)), a[0][0], a[0][2]);
          a[0][1] = a[0][3] = 0u;
        }
        if constexpr (TILES == 1) {
          ldmatrix_x2(a_base + swizzled(S::kWRow0 + (lane & 7), kk * 2 + ((lane >> 3) & 1)), b[0][0], b[0][1]);
        } else {
#pragma unroll
          for (int j = 0; j < TILES; j += 2)
            ldmatrix_x4(a_base + swizzled(S::kWRow0 + j * 8 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)),
                        b[j][0], b[j][1], b[j + 1][0], b[j + 1][1]);
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < TILES; ++j) mma_bf16(acc[i][j], a[i], b[j]);
      }
    }
    wait_group<0>();
    __syncwarp();  // every lane is done reading the stages before the next item refills them
    constexpr int kHalves = A_ROWS >= 16 ? 2 : 1;  // 8-row halves of an m16 set that hold rows
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int half = 0; half < kHalves; ++half) {
        const int r = i * 16 + half * 8 + (lane >> 2);
        if constexpr (SWIGLU) {
          const int c = c_first + (lane & 3) * 2;
          for (int e = 0; e < 2; ++e)
            store_swiglu(args, r, c + e, out_n, acc[i][0][2 * half + e], acc[i][1][2 * half + e]);
        } else {
#pragma unroll
          for (int j = 0; j < TILES; ++j) {
            const int c = group * kItemCols + j * 8 + (lane & 3) * 2;  // column within the CTA
            if (slices == 1) {
              store_pair(args, r, col0 + c, acc[i][j][2 * half], acc[i][j][2 * half + 1]);
            } else {
              float* out = partial + static_cast<int64_t>(slice) * A_ROWS * cols;
              out[r * cols + c] = acc[i][j][2 * half];
              out[r * cols + c + 1] = acc[i][j][2 * half + 1];
            }
          }
        }
      }
    }
  }
  if (slices == 1) return;
  __syncthreads();
  add_slices<A_ROWS>(args, partial, slices, col0, cols, blockDim.x);
}

}  // namespace ls::cuda::gemm_detail
