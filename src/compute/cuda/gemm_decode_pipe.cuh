// The pipeline decode GEMM (m <= 16, sm_90; issue 8, sessions 8-10): one kernel, templated on how a stage's weights
// arrive (BOXES: one TMA tensor box [8 or 16 rows, chunk K tiles] with 128-byte swizzle; else one cp.async.bulk row
// copy per W row) and where x lives (X_ONCE: the CTA's x rows copied once into shared memory after the programmatic
// wait; else each stage brings its unit's x rows). Every warp is its own producer and consumer with its own ring; each
// output's chain is the canonical one (16-wide K steps ascending from 0 per slice, slice sums in slice order), so the
// bits are every other decode kernel's at any m. Included by gemm_decode_pipe.cu (the kernel's one instantiating
// file) and gemm_decode_tma.cu (the launch groups).
#pragma once

#include <cuda.h>

#include <type_traits>

#include "compute/cuda/gemm_async.cuh"
#include "compute/cuda/gemm_decode.cuh"

namespace ls::cuda::gemm_detail {

constexpr int kPipeMaxStages = 8;
constexpr int kPipeMaxWarps = 8;
constexpr int kPipeBarrierBytes = (kPipeMaxWarps * kPipeMaxStages + 1) * 8;  // full[warp][stage], then x's
constexpr int kPipeGroupMax = 4;

// Up to kPipeGroupMax GEMMs of one x and one K in one launch (q / k / v): CTAs [first_block[i], first_block[i + 1])
// run args[i]; with tensor copies each matrix has its weight map.
struct PipeGroup {
  GemmArgs args[kPipeGroupMax];
  int first_block[kPipeGroupMax + 1];
  int count;
};
struct BoxGroup : PipeGroup {
  CUtensorMap w[kPipeGroupMax];
};
template <bool BOXES>
using PipeLaunch = std::conditional_t<BOXES, BoxGroup, PipeGroup>;

// gemm_decode_tma.cu: the weight maps (boxes [64, box_rows, chunk]) of `count` matrices, made once and kept.
Status pipe_weight_maps(CUtensorMap* maps, const GemmArgs* args, int count, int box_rows, int chunk);

// A stage: the unit's W rows (row copies: 8 * TILES rows at a pitch of chunk * 128 + 16 bytes, the pad keeping any 8
// rows' ldmatrix conflict-free; boxes: [chunk tiles][8 * TILES rows][128 bytes], 128-byte swizzle), then (x per
// stage) its x rows at chunk * 128 + 16 bytes; boxes' stages are 1024-aligned for the swizzle. x once: m rows of K at
// a pitch of K * 2 + 16 bytes after the rings.
__host__ __device__ constexpr int pipe_row_pitch(int chunk) { return chunk * kBlockK * 2 + 16; }
__host__ __device__ constexpr int pipe_w_bytes(bool boxes, int tiles, int chunk) {
  return 8 * tiles * (boxes ? chunk * kBlockK * 2 : pipe_row_pitch(chunk));
}
__host__ __device__ constexpr int pipe_stage_bytes(bool boxes, bool x_once, int tiles, int chunk, int m) {
  const int bytes = pipe_w_bytes(boxes, tiles, chunk) + (x_once ? 0 : m * pipe_row_pitch(chunk));
  return boxes ? (bytes + 1023) / 1024 * 1024 : bytes;
}
__host__ __device__ constexpr int pipe_x_once_bytes(int m, int k) { return m * (2 * k + 16); }

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

// Item `item`'s outputs from this lane's mma accumulators (MT m16 tiles of rows x TILES 8-column tiles; SWIGLU: gate
// tile 0, up tile 1), then the accumulators zeroed: stored with one rounding (one slice) or its slice sum written to
// partial [slice][A_ROWS][cols] (cols: the CTA's columns, col0 its first).
template <int MT, int TILES, int A_ROWS, bool SWIGLU>
__device__ __forceinline__ void finish_item(const GemmArgs& args, float (&acc)[MT][TILES][4], int item, int slices,
                                            int col0, int cols, int out_n, float* partial, int lane) {
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  constexpr int kHalves = A_ROWS / 8;  // 8-row halves of the m16 tiles holding rows
  const int group_index = item / slices, slice = item % slices;
  const int c_first = col0 + group_index * kItemCols;
#pragma unroll
  for (int half = 0; half < kHalves; ++half) {
    const int r = half * 8 + (lane >> 2), mt = half / 2, h = half % 2;
    if constexpr (SWIGLU) {
      for (int e = 0; e < 2; ++e)
        store_swiglu(args, r, c_first + (lane & 3) * 2 + e, out_n, acc[mt][0][2 * h + e], acc[mt][1][2 * h + e]);
    } else {
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        const int cc = group_index * kItemCols + j * 8 + (lane & 3) * 2;  // column within the CTA
        if (slices == 1) {
          store_pair(args, r, col0 + cc, acc[mt][j][2 * h], acc[mt][j][2 * h + 1]);
        } else {
          float* out = partial + static_cast<int64_t>(slice) * A_ROWS * cols;
          out[r * cols + cc] = acc[mt][j][2 * h];
          out[r * cols + cc + 1] = acc[mt][j][2 * h + 1];
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int j = 0; j < TILES; ++j) acc[t][j][0] = acc[t][j][1] = acc[t][j][2] = acc[t][j][3] = 0.0f;
}

// WARPS warps walk their items (w, w + WARPS, .. of the CTA's groups x slices) unit by unit through their own rings of
// `stages` stages: the weights of the first units are issued before the programmatic wait, x after it; after a unit's
// mma the warp refills that stage with the unit `stages` ahead. Lane 0 sets each stage's expected bytes; boxes: lane 0
// copies the W box(es), row copies: lane j copies W row j. ldmatrix reads x rows >= m as row m - 1 (they feed only
// output rows >= m, never stored; mma rows are independent). SWIGLU (TILES = 2): W rows 0..7 are gate columns c..,
// 8..15 the up columns F + c.., stored as swiglu's bits. Sliced K: the slice sums meet in shared memory and are added
// in slice order.
template <bool BOXES, bool X_ONCE, int WARPS, int TILES, int A_ROWS, bool SWIGLU>
__global__ void __launch_bounds__(32 * WARPS)
    decode_pipe_kernel(const __grid_constant__ PipeLaunch<BOXES> group, int groups, int stages, int chunk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  constexpr int kWRows = 8 * TILES;
  constexpr int MT = A_ROWS == 32 ? 2 : 1;  // m16 tiles of rows (32: verify windows of 17..32 rows, x once only)
  static_assert(A_ROWS != 32 || (X_ONCE && !SWIGLU), "32 rows: x once, no SwiGLU");
  extern __shared__ __align__(128) unsigned char shared_raw[];
  unsigned char* aligned = shared_raw + ((1024 - (smem_address(shared_raw) & 1023)) & 1023);
  int gi = 0;
  while (gi + 1 < group.count && static_cast<int>(blockIdx.x) >= group.first_block[gi + 1]) ++gi;
  const GemmArgs args = group.args[gi];
  const int block = blockIdx.x - group.first_block[gi];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int m = args.m;
  const int slices = slice_count(args.k);
  const int items = groups * slices;
  const int k_tiles = args.k / kBlockK;  // the host checks K % 64 == 0
  const int slice_tiles = slices == 1 ? k_tiles : kSliceTiles;
  const int out_n = SWIGLU ? args.n / 2 : args.n;
  const int cols = groups * kItemCols;
  const int col0 = block * cols;
  const int pitch = pipe_row_pitch(chunk);
  const int w_bytes = pipe_w_bytes(BOXES, TILES, chunk);
  const int stage_bytes = pipe_stage_bytes(BOXES, X_ONCE, TILES, chunk, m);
  const int x_pitch = X_ONCE ? 2 * args.k + 16 : pitch;
  const int active = min(WARPS, items);  // warps with items: only they have rings
  const uint32_t rings = smem_address(aligned);
  const uint32_t ring = rings + warp * stages * stage_bytes;
  const uint32_t x_once = rings + active * stages * stage_bytes;
  const uint32_t bar_base = x_once + (X_ONCE ? pipe_x_once_bytes(m, args.k) : 0);
  const uint32_t bars = bar_base + warp * kPipeMaxStages * 8, x_bar = bar_base + kPipeMaxWarps * kPipeMaxStages * 8;
  float* partial = reinterpret_cast<float*>(aligned + (bar_base - rings) + kPipeBarrierBytes);
  let_next_kernel_start();
  if (threadIdx.x < WARPS * stages)
    barrier_init(bar_base + ((threadIdx.x / stages) * kPipeMaxStages + threadIdx.x % stages) * 8, 1);
  if (X_ONCE && threadIdx.x == 0) barrier_init(x_bar, 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  if constexpr (BOXES)
    if (lane == 0 && warp < items) tma_prefetch_map(&group.w[gi]);

  const PipeWalk walk{slices, k_tiles, slice_tiles, chunk, WARPS};
  // Unit (item, c) into stage `stage`: lane 0 expects its bytes (whole boxes: zeros outside W count too; row copies:
  // the W rows inside N; x per stage: its x rows) and copies the box(es); row copies: lane j < kWRows copies W row j.
  auto copy_w = [&](int item, int c, int stage) {
    const int tiles = walk.tiles(item, c);
    const uint32_t dst = ring + stage * stage_bytes, bar = bars + 8 * stage;
    const int tile0 = walk.first_tile(item, c);
    const int row0 = col0 + (item / slices) * kItemCols;  // SwiGLU: the gate rows; the up rows at out_n + row0
    if (lane == 0) {
      const int inside = SWIGLU ? 2 * max(0, min(8, out_n - row0)) : max(0, min(kWRows, out_n - row0));
      const int x_bytes = X_ONCE ? 0 : m * tiles * kBlockK * 2;
      barrier_expect(bar, (BOXES ? w_bytes : inside * tiles * kBlockK * 2) + x_bytes);
      if constexpr (BOXES) {
        tma_load_3d(dst, &group.w[gi], 0, row0, tile0, bar);
        if constexpr (SWIGLU) tma_load_3d(dst + w_bytes / 2, &group.w[gi], 0, out_n + row0, tile0, bar);
      }
    }
    if constexpr (!BOXES) {
      __syncwarp();  // the expectation is set before a copy can land
      const int out_c = row0 + (SWIGLU ? (lane & 7) : lane);
      if (lane < kWRows && out_c < out_n) {
        const int64_t row = SWIGLU && lane >= 8 ? out_n + out_c : out_c;
        bulk_copy(dst + lane * pitch, args.w + row * args.k + static_cast<int64_t>(tile0) * kBlockK, tiles * 128, bar);
      }
    }
  };
  // x per stage: lane l < m copies x row l of unit (item, c) into stage `stage`.
  auto copy_x = [&](int item, int c, int stage) {
    if (X_ONCE || lane >= m) return;
    const int64_t k0 = static_cast<int64_t>(walk.first_tile(item, c)) * kBlockK;
    bulk_copy(ring + stage * stage_bytes + w_bytes + lane * pitch, args.x + static_cast<int64_t>(lane) * args.k + k0,
              walk.tiles(item, c) * 128, bars + 8 * stage);
  };
  int issue_item = warp, issue_c = 0;
  // Prologue: the weights of the first `stages` units, the wait for the kernel before, then their x (or all of x).
  int primed = 0;
  for (; primed < stages && issue_item < items; ++primed) {
    copy_w(issue_item, issue_c, primed);
    walk.advance(issue_item, issue_c);
  }
  __syncwarp();  // the expectations are set before any x copy can land
  wait_for_previous_kernel();
  if constexpr (X_ONCE) {
    if (warp == 0) {
      if (lane == 0) barrier_expect(x_bar, m * args.k * 2);
      __syncwarp();
      if (lane < m) bulk_copy(x_once + lane * x_pitch, args.x + static_cast<int64_t>(lane) * args.k, args.k * 2, x_bar);
    }
    barrier_wait(x_bar, 0);
  } else {
    int item = warp, c = 0;
    for (int u = 0; u < primed; ++u) {
      copy_x(item, c, u);
      walk.advance(item, c);
    }
  }

  float acc[MT][TILES][4];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int j = 0; j < TILES; ++j) acc[t][j][0] = acc[t][j][1] = acc[t][j][2] = acc[t][j][3] = 0.0f;
  // ldmatrix rows: A (x) row min(r, m - 1) of each m16 tile; B (W) row n: row copies at n * pitch, boxes row n of each
  // K tile's box with its 16-byte chunks swizzled by n & 7 (a tile's box rows start on a 1024-byte boundary or 8 rows
  // after one). Every m16 tile meets the same W fragments in the same K steps: a row's chain is the one-row chain.
  uint32_t a_off[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const int a_row = min(A_ROWS == 8 ? (lane & 7) : t * 16 + (lane & 15), m - 1);
    a_off[t] = (X_ONCE ? x_once : w_bytes) + a_row * x_pitch + (A_ROWS == 8 ? ((lane >> 3) & 1) : (lane >> 4)) * 16;
  }
  const int n = (lane & 7) + (TILES == 2 ? ((lane >> 4) << 3) : 0);
  const uint32_t b_off = !BOXES ? n * pitch + ((lane >> 3) & 1) * 16
                                : SWIGLU && n >= 8 ? w_bytes / 2 + (n - 8) * 128 : n * 128;
  const uint32_t b_swizzle = ((lane >> 3) & 1) ^ (n & 7);
  int item = warp, c = 0;
  for (int u = 0; item < items; ++u) {
    const int stage = u % stages;
    barrier_wait(bars + 8 * stage, (u / stages) & 1);
    const int tiles = walk.tiles(item, c);
    const uint32_t base = ring + stage * stage_bytes;
    const uint32_t a_unit = X_ONCE ? walk.first_tile(item, c) * 128 : base;
    for (int step = 0; step < tiles; ++step) {
      const int tile = X_ONCE && args.reverse_k ? tiles - 1 - step : step;  // test-only fault: K backwards
      const uint32_t a_tile = a_unit + tile * 128;
      const uint32_t b_tile = base + b_off + tile * (BOXES ? (SWIGLU ? 8 : kWRows) * 128 : 128);
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        uint32_t a[MT][4], b[TILES][2];
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          if constexpr (A_ROWS == 8) {
            ldmatrix_x2(a_off[t] + a_tile + kk * 32, a[t][0], a[t][2]);
            a[t][1] = a[t][3] = 0u;
          } else {
            ldmatrix_x4(a_off[t] + a_tile + kk * 32, a[t][0], a[t][1], a[t][2], a[t][3]);
          }
        }
        const uint32_t b_address = BOXES ? b_tile + (((kk * 2) ^ b_swizzle) << 4) : b_tile + kk * 32;
        if constexpr (TILES == 1) {
          ldmatrix_x2(b_address, b[0][0], b[0][1]);
        } else {
          ldmatrix_x4(b_address, b[0][0], b[0][1], b[1][0], b[1][1]);
        }
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
          for (int j = 0; j < TILES; ++j) mma_bf16(acc[t][j], a[t], b[j]);
      }
    }
    __syncwarp();  // every lane's ldmatrix of this stage is done before the refill lands in it
    if (issue_item < items) {
      fence_proxy_async_shared();
      copy_w(issue_item, issue_c, stage);
      __syncwarp();
      copy_x(issue_item, issue_c, stage);
      walk.advance(issue_item, issue_c);
    }
    if (c + 1 == walk.chunks(item))  // the item's chain is done: its outputs
      finish_item<MT, TILES, A_ROWS, SWIGLU>(args, acc, item, slices, col0, cols, out_n, partial, lane);
    walk.advance(item, c);
  }
  if (slices == 1) return;
  __syncthreads();
  add_slices<A_ROWS>(args, partial, slices, col0, cols, 32 * WARPS);
#else
  __trap();  // sm_90 only: the host never launches it elsewhere
#endif
}

}  // namespace ls::cuda::gemm_detail
