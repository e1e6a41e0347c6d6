// The streaming decode GEMM kernels (m <= 16): every (column group, slice) item is one warp's own cp.async
// pipeline of STAGES K tiles, weights staged before the programmatic wait; the fused gate_up GEMM + SwiGLU and the
// grouped q / k / v launch use the same body. Each output's chain is the canonical order of gemm_device.cuh.
#include <atomic>
#include <span>
#include <string>

#include "compute/cuda/gemm_decode.cuh"

namespace ls::cuda::gemm_detail {
namespace {

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
  // Slice sums added in slice order, then bias and one rounding (store_pair), two columns per thread.
  for (int o = threadIdx.x; o < args.m * cols / 2; o += blockDim.x) {
    const int r = o / (cols / 2), c = (o % (cols / 2)) * 2;
    float v0 = partial[r * cols + c], v1 = partial[r * cols + c + 1];
    for (int s = 1; s < slices; ++s) {
      v0 = __fadd_rn(v0, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + c]);
      v1 = __fadd_rn(v1, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + c + 1]);
    }
    store_pair(args, r, col0 + c, v0, v1);
  }
}

template <int WARPS, int STAGES, int TILES, int A_ROWS, bool SWIGLU = false>
__global__ void __launch_bounds__(32 * WARPS) decode_stream_kernel(GemmArgs args, int slices, int groups,
                                                                    int prefetch_tiles) {
  stream_body<WARPS, STAGES, TILES, A_ROWS, SWIGLU>(args, slices, groups, blockIdx.x, prefetch_tiles, StagedNorm{});
}

// The fused gate_up GEMM + SwiGLU with the norm prologue (one slice).
template <int WARPS, int STAGES, int A_ROWS>
__global__ void __launch_bounds__(32 * WARPS) decode_stream_norm_kernel(GemmArgs args, StagedNorm norm) {
  stream_body<WARPS, STAGES, 2, A_ROWS, true, true>(args, 1, WARPS, blockIdx.x, 0, norm);
}

// Up to kGroupMax one-slice GEMMs of the same x in one launch: CTAs [first_block[i], first_block[i + 1]) run args[i].
constexpr int kGroupMax = 4;
struct GemmGroup {
  GemmArgs args[kGroupMax];
  int first_block[kGroupMax + 1];
  int count;
  int prefetch_tiles;  // stream_body's L2 prefetch (0: none)
};

template <int WARPS, int STAGES, int A_ROWS>
__global__ void __launch_bounds__(32 * WARPS) decode_group_kernel(GemmGroup group) {
  int i = 0;
  while (i + 1 < group.count && static_cast<int>(blockIdx.x) >= group.first_block[i + 1]) ++i;
  stream_body<WARPS, STAGES, 1, A_ROWS, false>(group.args[i], 1, WARPS, blockIdx.x - group.first_block[i],
                                               group.prefetch_tiles, StagedNorm{});
}

int optin_shared_bytes = 0;  // the device's opt-in limit, set by allow_stream_shared

template <int WARPS, int STAGES, int TILES, int A_ROWS>
int stream_shared_bytes(const GemmArgs& args, int slices, int groups) {
  const int partial = slices == 1 ? 0 : slices * A_ROWS * groups * 8 * TILES * static_cast<int>(sizeof(float));
  return Stream<WARPS, STAGES, TILES, A_ROWS>::kPipeBytes + partial;
}

template <int WARPS, int STAGES, int TILES, int A_ROWS>
Status launch_stream_rows(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  const int groups = slices == 1 ? WARPS : (WARPS / slices > 1 ? WARPS / slices : 1);
  const int cols = groups * 8 * TILES;
  const int ctas = (args.n + cols - 1) / cols;
  const int smem = stream_shared_bytes<WARPS, STAGES, TILES, A_ROWS>(args, slices, groups);
  if (smem > optin_shared_bytes && args.m <= 16) return launch_first(args, sm_count, stream);  // very long K
  if (smem > optin_shared_bytes)
    return Status(ErrorCode::InvalidArgument, "streamed rows: " + std::to_string(smem) + " bytes of shared memory for K " +
                                                  std::to_string(args.k) + " at " + std::to_string(args.m) + " rows");
  return launch_programmatic(decode_stream_kernel<WARPS, STAGES, TILES, A_ROWS>, ctas, 32 * WARPS, smem, stream, args,
                             slices, groups, prefetch_tiles_for(args.n, args.k));
}

template <int WARPS, int STAGES, int TILES>
Status launch_stream(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (args.m <= 8) return launch_stream_rows<WARPS, STAGES, TILES, 8>(args, sm_count, stream);
  return launch_stream_rows<WARPS, STAGES, TILES, 16>(args, sm_count, stream);
}

template <int WARPS, int STAGES, int TILES>
void allow_stream_kernel_shared(int optin_bytes) {
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
}

// The fused gate_up GEMM + SwiGLU (one slice), items of 8 gate + 8 up columns: 4 warps x 8 stages for m <= 8 (two
// CTAs per SM), 8 warps x 6 stages for more rows (one wave of one CTA per SM on 2048->16384: 31.2 -> ~20 us at m = 16
// on the H200, batch A).
// Verify windows: 4 warps, 8 stages at 32 rows, 4 at 64.
template <int A_ROWS>
Status launch_swiglu_rows(const GemmArgs& args, cudaStream_t stream) {
  constexpr int kWarps = A_ROWS == 16 ? 8 : 4;
  constexpr int kStages = A_ROWS == 16 ? 6 : A_ROWS == 64 ? 4 : 8;
  const int f = args.n / 2;
  const int cols = kWarps * 8;
  const int ctas = (f + cols - 1) / cols;
  constexpr int smem = Stream<kWarps, kStages, 2, A_ROWS>::kPipeBytes;
  return launch_programmatic(decode_stream_kernel<kWarps, kStages, 2, A_ROWS, true>, ctas, 32 * kWarps, smem, stream,
                             args, 1, kWarps, prefetch_tiles_for(args.n, args.k));
}

// The same with the norm prologue: W-only stages, x [A_ROWS, K] normed once per CTA after them, then inverse_rms.
template <int A_ROWS>
Status launch_norm_swiglu_rows(const GemmArgs& args, const StagedNorm& norm, cudaStream_t stream) {
  constexpr int kWarps = A_ROWS == 16 ? 8 : 4;
  constexpr int kStages = A_ROWS == 16 ? 6 : 8;
  const int f = args.n / 2, cols = kWarps * 8, ctas = (f + cols - 1) / cols;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int smem = Stream<kWarps, kStages, 2, A_ROWS, true>::kPipeBytes + k_tiles * A_ROWS * 128 +
                   16 * static_cast<int>(sizeof(float));
  return launch_programmatic(decode_stream_norm_kernel<kWarps, kStages, A_ROWS>, ctas, 32 * kWarps, smem, stream,
                             args, norm);
}

// The grouped launch (q / k / v of an attention layer): 2 warps, 16 stages (8 at 32 rows, 5 at 64: two CTAs an SM),
// 8 columns per item (many CTAs, deep pipelines for narrow outputs).
constexpr int kGroupWarps = 2;
constexpr int group_stages(int a_rows) { return a_rows == 64 ? 5 : a_rows == 32 ? 8 : 16; }

template <int A_ROWS>
Status launch_group_rows(const GemmGroup& group, cudaStream_t stream) {
  constexpr int kStages = group_stages(A_ROWS);
  constexpr int smem = Stream<kGroupWarps, kStages, 1, A_ROWS>::kPipeBytes;
  return launch_programmatic(decode_group_kernel<kGroupWarps, kStages, A_ROWS>, group.first_block[group.count],
                             32 * kGroupWarps, smem, stream, group);
}

// Verify windows (17..64 rows) on the streaming kernel, 16 columns an item: one slice 4 warps x 8 stages (32 rows)
// or x 4 (64 rows); sliced K 8 warps (a warp per slice) x 4 or 2 stages.
template <int A_ROWS>
Status launch_stream_window(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (slice_count(args.k) > 1) return launch_stream_rows<8, A_ROWS == 32 ? 4 : 2, 2, A_ROWS>(args, sm_count, stream);
  return launch_stream_rows<4, A_ROWS == 32 ? 8 : 4, 2, A_ROWS>(args, sm_count, stream);
}

}  // namespace

Status launch_stream_variant(int variant, const GemmArgs& args, int sm_count, cudaStream_t stream) {
  switch (variant) {
    case 1: return launch_stream<4, 8, 2>(args, sm_count, stream);
    case 2: return launch_stream<4, 12, 1>(args, sm_count, stream);
    case 3: return launch_stream<8, 6, 2>(args, sm_count, stream);
    case 4: return launch_stream<8, 8, 1>(args, sm_count, stream);
    case 5: return launch_stream<2, 16, 1>(args, sm_count, stream);
    case 6: return launch_stream<1, 32, 1>(args, sm_count, stream);  // a whole K = 2048 item in flight at once
    default: return launch_first(args, sm_count, stream);
  }
}

Status launch_stream_norm_swiglu(const GemmArgs& args, const StagedNorm& norm, cudaStream_t stream) {
  if (args.m <= 8) return launch_norm_swiglu_rows<8>(args, norm, stream);
  return launch_norm_swiglu_rows<16>(args, norm, stream);
}

Status launch_stream_many_rows(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (args.m <= 32) return launch_stream_window<32>(args, sm_count, stream);
  return launch_stream_window<64>(args, sm_count, stream);
}

template <int WARPS, int STAGES, int TILES, int A_ROWS, bool SWIGLU = false>
void allow_one_stream_kernel(int optin_bytes) {
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, A_ROWS, SWIGLU>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
}

void allow_stream_shared(int optin_bytes) {
  optin_shared_bytes = optin_bytes;
  allow_one_stream_kernel<8, 4, 2, 32>(optin_bytes);
  allow_one_stream_kernel<8, 2, 2, 64>(optin_bytes);
  allow_one_stream_kernel<4, 8, 2, 32>(optin_bytes);
  allow_one_stream_kernel<4, 4, 2, 64>(optin_bytes);
  allow_one_stream_kernel<4, 8, 2, 32, true>(optin_bytes);
  allow_one_stream_kernel<4, 4, 2, 64, true>(optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(32), 32>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(64), 64>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  allow_stream_kernel_shared<4, 8, 2>(optin_bytes);
  allow_stream_kernel_shared<4, 12, 1>(optin_bytes);
  allow_stream_kernel_shared<8, 6, 2>(optin_bytes);
  allow_stream_kernel_shared<8, 8, 1>(optin_bytes);
  allow_stream_kernel_shared<2, 16, 1>(optin_bytes);
  allow_stream_kernel_shared<1, 32, 1>(optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(8), 8>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(16), 16>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<4, 8, 2, 8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<8, 6, 2, 16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_norm_kernel<4, 8, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_stream_norm_kernel<8, 6, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
}

// Verify windows take the streaming kernels up to this many rows (set_decode_rows: 16, 32 or 64).
std::atomic<int> decode_rows{32};
int decode_rows_max() { return decode_rows.load(std::memory_order_relaxed); }
// The fused launches' row limits: q / k / v up to 32 rows at the default, SwiGLU (2048->16384 streamed loses) only
// when every window is streamed.
int group_rows_max() { return decode_rows_max(); }
int swiglu_rows_max() { return decode_rows_max() == 64 ? 64 : 16; }

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

void set_decode_rows(int max_rows) {
  gemm_detail::decode_rows.store(max_rows > 32 ? 64 : max_rows > 16 ? 32 : 16, std::memory_order_relaxed);
}

bool decode_swiglu_fits(int64_t m, const DeviceMatrix& gate_up) {
  return m >= 1 && m <= gemm_detail::swiglu_rows_max() && gate_up.rows >= 2 && gate_up.rows % 2 == 0 && gate_up.rows <= (1LL << 30) &&
         gate_up.cols % 8 == 0 && gate_up.cols <= gemm_detail::kUnslicedK;
}

Status gemm_decode_swiglu(const GemmEngine& engine, const bf16* x, int64_t m, const DeviceMatrix& gate_up, bf16* act,
                          cudaStream_t stream) {
  if (!decode_swiglu_fits(m, gate_up))
    return Status(ErrorCode::InvalidArgument, "gemm_decode_swiglu takes 1.." + std::to_string(gemm_detail::swiglu_rows_max()) +
                                                  " rows, an even N and K <= " +
                                                  std::to_string(gemm_detail::kUnslicedK) + " (a multiple of 8), got m " +
                                                  std::to_string(m) + ", N " + std::to_string(gate_up.rows) + ", K " +
                                                  std::to_string(gate_up.cols));
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(gate_up.w)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "gemm_decode_swiglu needs 16-byte aligned x and W");
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  gemm_detail::GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x),
                             reinterpret_cast<const __nv_bfloat16*>(gate_up.w), gate_up.bias,
                             reinterpret_cast<__nv_bfloat16*>(act), nullptr, static_cast<int>(m),
                             static_cast<int>(gate_up.rows), static_cast<int>(gate_up.cols), 0};
  if (m <= 8) return gemm_detail::launch_swiglu_rows<8>(args, stream);
  if (m <= 16) return gemm_detail::launch_swiglu_rows<16>(args, stream);
  if (m <= 32) return gemm_detail::launch_swiglu_rows<32>(args, stream);
  return gemm_detail::launch_swiglu_rows<64>(args, stream);
}

bool decode_group_fits(int64_t m, std::span<const DeviceMatrix> ws) {
  if (m < 1 || m > gemm_detail::group_rows_max() || ws.empty() || ws.size() > static_cast<size_t>(gemm_detail::kGroupMax)) return false;
  for (const DeviceMatrix& w : ws)
    if (w.cols != ws[0].cols || w.cols % 8 != 0 || w.cols > gemm_detail::kUnslicedK || w.rows < 1 ||
        w.rows > (1 << 24))
      return false;
  return true;
}

Status gemm_decode_group(const GemmEngine& engine, const bf16* x, int64_t m, std::span<const DeviceMatrix> ws,
                         std::span<bf16* const> ys, cudaStream_t stream) {
  if (!decode_group_fits(m, ws) || ys.size() != ws.size())
    return Status(ErrorCode::InvalidArgument, "gemm_decode_group takes 1.." + std::to_string(gemm_detail::group_rows_max()) +
                                                  " rows and 1.." +
                                                  std::to_string(gemm_detail::kGroupMax) +
                                                  " matrices of one K <= 2048 (a multiple of 8), got m " +
                                                  std::to_string(m) + ", " + std::to_string(ws.size()) + " matrices");
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  gemm_detail::GemmGroup group{};
  group.count = static_cast<int>(ws.size());
  constexpr int cols = gemm_detail::kGroupWarps * 8;
  int64_t rows = 0;  // weight rows of the whole launch
  for (int i = 0; i < group.count; ++i) {
    const DeviceMatrix& w = ws[i];
    if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0 ||
        (w.rows % 2 == 0 && reinterpret_cast<uintptr_t>(ys[i]) % 4 != 0))
      return Status(ErrorCode::InvalidArgument, "gemm_decode_group needs 16-byte aligned x and W, y aligned to pairs");
    group.args[i] = gemm_detail::GemmArgs{reinterpret_cast<const __nv_bfloat16*>(x),
                                          reinterpret_cast<const __nv_bfloat16*>(w.w), w.bias,
                                          reinterpret_cast<__nv_bfloat16*>(ys[i]), nullptr, static_cast<int>(m),
                                          static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
    group.first_block[i + 1] = group.first_block[i] + static_cast<int>((w.rows + cols - 1) / cols);
    rows += w.rows;
  }
  const int staged = gemm_detail::staged_config_for(static_cast<int>(m));  // all weights before the wait
  if (staged >= 0 && gemm_detail::staged_group_fits(staged, static_cast<int>(m), static_cast<int>(ws[0].cols)))
    return gemm_detail::launch_staged_group(staged, group.args, group.count, stream);
  group.prefetch_tiles = gemm_detail::prefetch_tiles_for(rows, ws[0].cols);
  if (m <= 8) return gemm_detail::launch_group_rows<8>(group, stream);
  if (m <= 16) return gemm_detail::launch_group_rows<16>(group, stream);
  if (m <= 32) return gemm_detail::launch_group_rows<32>(group, stream);
  return gemm_detail::launch_group_rows<64>(group, stream);
}

}  // namespace ls::cuda
