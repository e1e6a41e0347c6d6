// The pipeline decode GEMM with tensor copies (m <= 16, sm_90; issue 8, session 9; set_decode_pipe_tma): the items,
// rings and canonical chains of gemm_decode_pipe.cu, but a stage's weights arrive as one TMA box [8 or 16 rows,
// chunk K tiles] (128-byte swizzle, read by ldmatrix without bank conflicts; one 2D box per K tile lost everywhere in
// batch s9A and is gone), so a warp
// issues one or two weight copies a stage instead of one per row. x rows still come as bulk row copies after the
// programmatic wait. Same bits as every other decode kernel at any m.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "compute/cuda/gemm_async.cuh"
#include "compute/cuda/gemm_decode_pipe.cuh"

namespace ls::cuda::gemm_detail {
namespace {

constexpr int kTmaMaxStages = 8;
constexpr int kTmaMaxWarps = 8;
constexpr int kTmaBarrierBytes = kTmaMaxWarps * kTmaMaxStages * 8;  // full[warp][stage] mbarriers

// Up to kTmaGroupMax GEMMs of one x and one K in one launch (q / k / v), each with its weight map: CTAs
// [first_block[i], first_block[i + 1]) run args[i].
constexpr int kTmaGroupMax = 4;
struct TmaPipeGroup {
  CUtensorMap w[kTmaGroupMax];
  GemmArgs args[kTmaGroupMax];
  int first_block[kTmaGroupMax + 1];
  int count;
};

// W rows a box holds (SwiGLU: two boxes a stage, 8 gate rows and the matching 8 up rows).
constexpr int box_rows_of(int tiles, bool swiglu) { return swiglu ? 8 : 8 * tiles; }
// A stage: the W boxes ([chunk tiles][rows][128 bytes], 1024-aligned for the swizzle), then the x rows at a pitch of
// chunk * 128 + 16 bytes (16-byte pad: any 8 rows' ldmatrix conflict-free); a multiple of 1024 bytes.
__host__ __device__ constexpr int tma_w_bytes(int tiles, bool swiglu, int chunk) {
  return (swiglu ? 16 : 8 * tiles) * chunk * 128;
}
__host__ __device__ constexpr int tma_stage_bytes(int tiles, bool swiglu, int chunk, int m) {
  return (tma_w_bytes(tiles, swiglu, chunk) + m * (chunk * 128 + 16) + 1023) / 1024 * 1024;
}

// WARPS warps, each its own producer and consumer with its own ring of `stages` stages, walking its items (w, w +
// WARPS, .. of the CTA's groups x slices; item = group * slices + slice) chunk by chunk, as decode_pipe_kernel. Lane 0
// copies the unit's W box(es), lane l < m x row l. x rows >= m that ldmatrix reads are row m - 1 again (they feed only
// output rows >= m, never stored). SWIGLU (TILES = 2): gate columns c.. and up columns F + c.., stored as swiglu's
// bits. Sliced K: the slice sums meet in shared memory and are added in slice order.
template <int WARPS, int TILES, int A_ROWS, bool SWIGLU>
__global__ void __launch_bounds__(32 * WARPS)
    decode_tma_kernel(const __grid_constant__ TmaPipeGroup group, int groups, int stages, int chunk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  constexpr int kBoxRows = SWIGLU ? 8 : 8 * TILES;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  unsigned char* aligned = shared_raw + ((1024 - (smem_address(shared_raw) & 1023)) & 1023);
  int gi = 0;
  while (gi + 1 < group.count && static_cast<int>(blockIdx.x) >= group.first_block[gi + 1]) ++gi;
  const GemmArgs args = group.args[gi];
  const CUtensorMap* map = &group.w[gi];
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
  const int w_bytes = tma_w_bytes(TILES, SWIGLU, chunk);
  const int x_pitch = chunk * 128 + 16;
  const int stage_bytes = tma_stage_bytes(TILES, SWIGLU, chunk, m);
  const int active = min(WARPS, items);  // warps with items: only they have rings
  const uint32_t rings = smem_address(aligned);
  const uint32_t ring = rings + warp * stages * stage_bytes;
  const uint32_t bar_base = rings + active * stages * stage_bytes;
  const uint32_t bars = bar_base + warp * kTmaMaxStages * 8;
  float* partial = reinterpret_cast<float*>(aligned + active * stages * stage_bytes + kTmaBarrierBytes);
  let_next_kernel_start();
  if (threadIdx.x < WARPS * stages)
    barrier_init(bar_base + ((threadIdx.x / stages) * kTmaMaxStages + threadIdx.x % stages) * 8, 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  if (lane == 0 && warp < items) tma_prefetch_map(map);

  const PipeWalk walk{slices, k_tiles, slice_tiles, chunk, WARPS};
  // The bytes unit (item, c) brings: whole W boxes (zeros outside W count too), then its x rows.
  auto unit_bytes = [&](int item, int c) {
    const int tiles = walk.tiles(item, c);
    return w_bytes + m * tiles * 128;
  };
  // Lane 0: the expectation and the W box(es) of unit (item, c) into stage `stage`.
  auto copy_w = [&](int item, int c, int stage) {
    const uint32_t dst = ring + stage * stage_bytes, bar = bars + 8 * stage;
    const int tile0 = walk.first_tile(item, c);
    const int row0 = col0 + (item / slices) * kItemCols;  // SwiGLU: the gate rows; the up rows at out_n + row0
    barrier_expect(bar, unit_bytes(item, c));
    tma_load_3d(dst, map, 0, row0, tile0, bar);
    if constexpr (SWIGLU) tma_load_3d(dst + w_bytes / 2, map, 0, out_n + row0, tile0, bar);
  };
  // Lane l < m: x row l of unit (item, c) into stage `stage`.
  auto copy_x = [&](int item, int c, int stage) {
    if (lane >= m) return;
    const int64_t k0 = static_cast<int64_t>(walk.first_tile(item, c)) * kBlockK;
    bulk_copy(ring + stage * stage_bytes + w_bytes + lane * x_pitch, args.x + static_cast<int64_t>(lane) * args.k + k0,
              walk.tiles(item, c) * 128, bars + 8 * stage);
  };
  int issue_item = warp, issue_c = 0;
  // Prologue: the weights of the first `stages` units, the wait for the kernel before, then their x.
  int primed = 0;
  for (; primed < stages && issue_item < items; ++primed) {
    if (lane == 0) copy_w(issue_item, issue_c, primed);
    walk.advance(issue_item, issue_c);
  }
  __syncwarp();  // the expectations are set before any x copy can land
  wait_for_previous_kernel();
  {
    int item = warp, c = 0;
    for (int u = 0; u < primed; ++u) {
      copy_x(item, c, u);
      walk.advance(item, c);
    }
  }

  float acc[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // ldmatrix rows: A (x) row min(r, m - 1) of the padded rows; B (W) row n of each K tile's box, chunk swizzled by
  // n & 7 (the box rows of a tile start on a 1024-byte boundary or 8 rows after one).
  const int a_row = min(A_ROWS == 8 ? (lane & 7) : (lane & 15), m - 1);
  const uint32_t a_off = w_bytes + a_row * x_pitch + (A_ROWS == 8 ? ((lane >> 3) & 1) : (lane >> 4)) * 16;
  const int n = (lane & 7) + (TILES == 2 ? ((lane >> 4) << 3) : 0);
  const uint32_t b_off = SWIGLU && n >= 8 ? w_bytes / 2 + (n - 8) * 128 : n * 128;
  const uint32_t b_swizzle = ((lane >> 3) & 1) ^ (n & 7);
  int item = warp, c = 0;
  for (int u = 0; item < items; ++u) {
    const int stage = u % stages;
    barrier_wait(bars + 8 * stage, (u / stages) & 1);
    const int tiles = walk.tiles(item, c);
    const uint32_t base = ring + stage * stage_bytes;
    for (int tile = 0; tile < tiles; ++tile) {
      const uint32_t a_tile = base + a_off + tile * 128, b_tile = base + b_off + tile * kBoxRows * 128;
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        uint32_t a[4], b[TILES][2];
        if constexpr (A_ROWS == 8) {
          ldmatrix_x2(a_tile + kk * 32, a[0], a[2]);
          a[1] = a[3] = 0u;
        } else {
          ldmatrix_x4(a_tile + kk * 32, a[0], a[1], a[2], a[3]);
        }
        const uint32_t b_address = b_tile + (((kk * 2) ^ b_swizzle) << 4);
        if constexpr (TILES == 1) {
          ldmatrix_x2(b_address, b[0][0], b[0][1]);
        } else {
          ldmatrix_x4(b_address, b[0][0], b[0][1], b[1][0], b[1][1]);
        }
#pragma unroll
        for (int j = 0; j < TILES; ++j) mma_bf16(acc[j], a, b[j]);
      }
    }
    __syncwarp();  // every lane's ldmatrix of this stage is done before the refill lands in it
    if (issue_item < items) {
      fence_proxy_async_shared();
      if (lane == 0) copy_w(issue_item, issue_c, stage);
      __syncwarp();
      copy_x(issue_item, issue_c, stage);
      walk.advance(issue_item, issue_c);
    }
    if (c + 1 == walk.chunks(item))  // the item's chain is done: its outputs
      finish_item<TILES, A_ROWS, SWIGLU>(args, acc, item, slices, col0, cols, out_n, partial, lane);
    walk.advance(item, c);
  }
  if (slices == 1) return;
  __syncthreads();
  add_slices<A_ROWS>(args, partial, slices, col0, cols, 32 * WARPS);
#else
  __trap();  // sm_90 only: the host never launches it elsewhere
#endif
}

// The weight maps, made once per (matrix, box) and kept: a map is a function of the address, the shape and the box
// alone, so an entry stays right for any later matrix at the same address and shape.
using MapKey = std::tuple<const void*, int, int, int, int>;  // W, rows, K, box rows, chunk
std::mutex map_mutex;
std::map<MapKey, CUtensorMap> map_cache;

Status weight_map(CUtensorMap* out, const GemmArgs& args, int box_rows, int chunk) {
  const MapKey key{args.w, args.n, args.k, box_rows, chunk};
  std::lock_guard<std::mutex> lock(map_mutex);
  const auto found = map_cache.find(key);
  if (found != map_cache.end()) {
    *out = found->second;
    return ok_status();
  }
  CUtensorMap map;
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(args.k) * 2;
  // [K / 64 tiles][rows][64]: a box lands as [chunk][box rows][128 bytes]
  const cuuint64_t dims[3] = {kBlockK, static_cast<cuuint64_t>(args.n), static_cast<cuuint64_t>(args.k / kBlockK)};
  const cuuint64_t strides[2] = {row_bytes, kBlockK * 2};
  const cuuint32_t box[3] = {kBlockK, static_cast<cuuint32_t>(box_rows), static_cast<cuuint32_t>(chunk)};
  LS_RETURN_IF_ERROR(encode_bf16_map(&map, args.w, 3, dims, strides, box));
  map_cache.emplace(key, map);
  *out = map;
  return ok_status();
}

template <int WARPS, int TILES, bool SWIGLU>
Status launch_shape(const TmaPipeGroup& group, int ctas, int groups, int smem, int stages, int chunk,
                    cudaStream_t stream) {
  if (group.args[0].m <= 8)
    return launch_programmatic(decode_tma_kernel<WARPS, TILES, 8, SWIGLU>, ctas, 32 * WARPS, smem, stream, group,
                               groups, stages, chunk);
  return launch_programmatic(decode_tma_kernel<WARPS, TILES, 16, SWIGLU>, ctas, 32 * WARPS, smem, stream, group,
                             groups, stages, chunk);
}

template <int WARPS, int TILES, bool SWIGLU>
void allow_shape(int optin) {
  cudaFuncSetAttribute(decode_tma_kernel<WARPS, TILES, 8, SWIGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  cudaFuncSetAttribute(decode_tma_kernel<WARPS, TILES, 16, SWIGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin);
}

}  // namespace

int tma_pipe_plan(int warps, int tiles, bool swiglu, int m, int k, int groups, int ring_bytes, int chunk_asked,
                  int* stages, int* chunk) {
  const int slices = slice_count(k);
  const int active = std::min(warps, groups * slices);
  // The largest chunk of 16 / 8 / 4 K tiles (at most the one asked) that gives every active warp two stages.
  int c = chunk_asked >= 16 ? 16 : chunk_asked >= 8 ? 8 : 4;
  while (c > 4 && 2 * active * tma_stage_bytes(tiles, swiglu, c, m) > ring_bytes) c /= 2;
  const int stage = tma_stage_bytes(tiles, swiglu, c, m);
  const int count = std::clamp(ring_bytes / (active * stage), 2, kTmaMaxStages);
  if (stages) *stages = count;
  if (chunk) *chunk = c;
  const int a_rows = m <= 8 ? 8 : 16;
  const int item_cols = swiglu ? 8 : 8 * tiles;
  const int partial = slices == 1 ? 0 : slices * a_rows * groups * item_cols * 4;
  return 1024 + active * count * stage + kTmaBarrierBytes + partial;
}

bool tma_pipe_maps_ok(const GemmArgs& args, int tiles, bool swiglu, int chunk) {
  CUtensorMap map;
  return weight_map(&map, args, box_rows_of(tiles, swiglu), chunk).ok();
}

Status launch_tma_pipe(int warps, int tiles, bool swiglu, const GemmArgs* args, const int* first_block, int count,
                       int groups, int ring_bytes, int chunk_asked, cudaStream_t stream) {
  if (count < 1 || count > kTmaGroupMax)
    return Status(ErrorCode::InvalidArgument, "decode pipeline (tensor copies): " + std::to_string(count) +
                                                  " matrices in one launch, at most " + std::to_string(kTmaGroupMax));
  int stages = 0, chunk = 0;
  const int smem = tma_pipe_plan(warps, tiles, swiglu, args[0].m, args[0].k, groups, ring_bytes, chunk_asked, &stages,
                                 &chunk);
  TmaPipeGroup group{};
  group.count = count;
  for (int i = 0; i < count; ++i) {
    group.args[i] = args[i];
    LS_RETURN_IF_ERROR(weight_map(&group.w[i], args[i], box_rows_of(tiles, swiglu), chunk));
  }
  for (int i = 0; i <= count; ++i) group.first_block[i] = first_block[i];
  const int ctas = first_block[count];
  if (swiglu) {
    if (warps == 4) return launch_shape<4, 2, true>(group, ctas, groups, smem, stages, chunk, stream);
    return launch_shape<8, 2, true>(group, ctas, groups, smem, stages, chunk, stream);
  }
  if (warps == 4 && tiles == 1) return launch_shape<4, 1, false>(group, ctas, groups, smem, stages, chunk, stream);
  if (warps == 4) return launch_shape<4, 2, false>(group, ctas, groups, smem, stages, chunk, stream);
  if (warps == 2) return launch_shape<2, 1, false>(group, ctas, groups, smem, stages, chunk, stream);
  if (tiles == 1) return launch_shape<8, 1, false>(group, ctas, groups, smem, stages, chunk, stream);
  return launch_shape<8, 2, false>(group, ctas, groups, smem, stages, chunk, stream);
}

void allow_tma_pipe_shared(int optin_bytes) {
  allow_shape<4, 1, false>(optin_bytes);
  allow_shape<4, 2, false>(optin_bytes);
  allow_shape<2, 1, false>(optin_bytes);
  allow_shape<8, 1, false>(optin_bytes);
  allow_shape<8, 2, false>(optin_bytes);
  allow_shape<4, 2, true>(optin_bytes);
  allow_shape<8, 2, true>(optin_bytes);
}

}  // namespace ls::cuda::gemm_detail
