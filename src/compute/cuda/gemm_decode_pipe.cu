// The weight-streaming pipeline decode GEMM (m <= 16, sm_90; issue 8, session 8): a producer warp keeps a ring of
// stages full with cp.async.bulk row copies under mbarriers (weights before the programmatic wait, x after it), and
// consumer warps only wait, ldmatrix, mma and hand the stage back. Each consumer warp owns one (column group, slice)
// item and runs its chain in the canonical order of gemm_device.cuh (16-wide K steps ascending from 0 per slice; the
// slice sums added in slice order), so every row has the bits of the other decode kernels at any m.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "compute/cuda/gemm_async.cuh"
#include "compute/cuda/gemm_decode_pipe.cuh"

namespace ls::cuda::gemm_detail {
namespace {

// A stage row holds `chunk` 64-wide K tiles (set_decode_pipe_chunk: 4, 8 or 16; default 8) of one x or W row, in
// chunk * 128 + 16 bytes: the 16-byte pad keeps any 8 rows' ldmatrix conflict-free. Batch s8A: a cp.async.bulk row
// copy costs ~36 ns of an SM's copy issue whatever its size (128..512-byte copies ran 0.2-1.9 TB/s), so rows are
// copied in 0.5..2 KB pieces.
constexpr int pitch_of(int chunk) { return chunk * kBlockK * 2 + 16; }
constexpr int kMaxStages = 8;
constexpr int kMaxWarps = 8;
constexpr int kBarrierBytes = kMaxWarps * kMaxStages * 8;  // full[warp][stage] mbarriers
constexpr int kPipeGroupMax = 4;

// Up to kPipeGroupMax GEMMs of one x and one K in one launch: CTAs [first_block[i], first_block[i + 1]) run args[i].
struct PipeGroup {
  GemmArgs args[kPipeGroupMax];
  int first_block[kPipeGroupMax + 1];
  int count;
};

// WARPS warps, each its own producer and consumer: a warp walks its items (w, w + WARPS, .. of the CTA's groups x
// slices; item = group * slices + slice) chunk by chunk through its own ring of `stages` stages. A stage holds the
// unit's x rows [m] then its 8 * TILES W rows; lane l < m copies x row l, lane m + j W row j, all in one instruction
// (weights of the first stages before the programmatic wait, x after it). After a unit's mma the warp refills that
// stage with the unit `stages` ahead. x rows m..15 that ldmatrix reads alias the stage's W rows: they feed only
// output rows >= m, never stored (mma rows are independent). SWIGLU (TILES = 2): W rows 0..7 are gate columns c..,
// 8..15 the up columns F + c.., stored as swiglu's bits. Sliced K: the slice sums meet in shared memory and are
// added in slice order.
template <int WARPS, int TILES, int A_ROWS, bool SWIGLU>
__global__ void __launch_bounds__(32 * WARPS) decode_pipe_kernel(PipeGroup group, int groups, int stages, int chunk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  constexpr int kWRows = 8 * TILES;
  extern __shared__ __align__(128) unsigned char shared_raw[];
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
  const int pitch = pitch_of(chunk);
  const int out_n = SWIGLU ? args.n / 2 : args.n;
  const int cols = groups * kItemCols;
  const int col0 = block * cols;
  const int stage_bytes = (m + kWRows) * pitch;
  const uint32_t bars = smem_address(shared_raw) + warp * kMaxStages * 8;
  const uint32_t ring = smem_address(shared_raw) + kBarrierBytes + warp * stages * stage_bytes;
  const int active = min(WARPS, items);  // warps with items: only they have rings
  float* partial = reinterpret_cast<float*>(shared_raw + kBarrierBytes + active * stages * stage_bytes);
  let_next_kernel_start();
  if (threadIdx.x < WARPS * stages) barrier_init(smem_address(shared_raw) + ((threadIdx.x / stages) * kMaxStages +
                                                                         threadIdx.x % stages) * 8, 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();

  const PipeWalk walk{slices, k_tiles, slice_tiles, chunk, WARPS};
  // This lane's copy of unit (item, c) into stage `stage`: x row `lane` (lane < m) or W row lane - m; its bytes.
  auto lane_copy = [&](int item, int c, int stage, bool with_w, bool with_x, bool count_only) {
    const int tiles = walk.tiles(item, c);
    const int64_t k0 = static_cast<int64_t>(walk.first_tile(item, c)) * kBlockK;
    const uint32_t dst = ring + stage * stage_bytes + lane * pitch;
    if (lane < m) {
      if (!count_only && with_x) bulk_copy(dst, args.x + static_cast<int64_t>(lane) * args.k + k0, tiles * 128, bars + 8 * stage);
      return tiles * 128;
    }
    const int j = lane - m;
    if (j >= kWRows) return 0;
    const int out_c = col0 + (item / slices) * kItemCols + (SWIGLU ? (j & 7) : j);
    if (out_c >= out_n) return 0;
    const int64_t row = SWIGLU && j >= 8 ? out_n + out_c : out_c;
    if (!count_only && with_w) bulk_copy(dst, args.w + row * args.k + k0, tiles * 128, bars + 8 * stage);
    return tiles * 128;
  };
  // Unit cursors: (item, chunk) in the warp's order.
  int issue_item = warp, issue_c = 0;
  // Prologue: the weights of the first `stages` units, the wait for the kernel before, then their x.
  int primed = 0;
  for (; primed < stages && issue_item < items; ++primed) {
    const int bytes = __reduce_add_sync(0xffffffffu, lane_copy(issue_item, issue_c, primed, true, true, true));
    if (lane == 0) barrier_expect(bars + 8 * primed, bytes);
    __syncwarp();
    lane_copy(issue_item, issue_c, primed, true, false, false);
    walk.advance(issue_item, issue_c);
  }
  wait_for_previous_kernel();
  {
    int item = warp, c = 0;
    for (int u = 0; u < primed; ++u) {
      lane_copy(item, c, u, false, true, false);
      walk.advance(item, c);
    }
  }

  float acc[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const uint32_t a_off = (A_ROWS == 8 ? (lane & 7) : (lane & 15)) * pitch + (A_ROWS == 8 ? ((lane >> 3) & 1) : (lane >> 4)) * 16;
  const uint32_t b_off = (m + (lane & 7) + (TILES == 2 ? ((lane >> 4) << 3) : 0)) * pitch + ((lane >> 3) & 1) * 16;
  int item = warp, c = 0;
  for (int u = 0; item < items; ++u) {
    const int stage = u % stages;
    barrier_wait(bars + 8 * stage, (u / stages) & 1);
    const int tiles = walk.tiles(item, c);
    const uint32_t base = ring + stage * stage_bytes;
    for (int tile = 0; tile < tiles; ++tile) {
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        const uint32_t k_off = tile * 128 + kk * 32;
        uint32_t a[4], b[TILES][2];
        if constexpr (A_ROWS == 8) {
          ldmatrix_x2(base + a_off + k_off, a[0], a[2]);
          a[1] = a[3] = 0u;
        } else {
          ldmatrix_x4(base + a_off + k_off, a[0], a[1], a[2], a[3]);
        }
        if constexpr (TILES == 1) {
          ldmatrix_x2(base + b_off + k_off, b[0][0], b[0][1]);
        } else {
          ldmatrix_x4(base + b_off + k_off, b[0][0], b[0][1], b[1][0], b[1][1]);
        }
#pragma unroll
        for (int j = 0; j < TILES; ++j) mma_bf16(acc[j], a, b[j]);
      }
    }
    __syncwarp();  // every lane's ldmatrix of this stage is done before the refill lands in it
    if (issue_item < items) {
      fence_proxy_async_shared();
      const int bytes = __reduce_add_sync(0xffffffffu, lane_copy(issue_item, issue_c, stage, true, true, true));
      if (lane == 0) barrier_expect(bars + 8 * stage, bytes);
      __syncwarp();
      lane_copy(issue_item, issue_c, stage, true, true, false);
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

// The configurations (warps per CTA x 8-column tiles per item): kPlainConfigs plain ones, then the SwiGLU ones.
struct PipeShape {
  int warps, tiles;
  const char* name;
};
constexpr int kPlainConfigs = 5;
constexpr PipeShape kPipeShapes[kPipeConfigs] = {{4, 1, "pipe 4w 8c"},     {4, 2, "pipe 4w 16c"},
                                                 {2, 1, "pipe 2w 8c"},     {8, 1, "pipe 8w 8c"},
                                                 {8, 2, "pipe 8w 16c"},    {4, 2, "pipe 4w swiglu"},
                                                 {8, 2, "pipe 8w swiglu"}};

int optin_bytes_granted = 0;
int device_sms = 132;
// The switch starts from LS_DECODE_PIPE (set and not "0": on), so whole runs (lanes_bench, tests) can take it.
bool pipe_from_env() {
  const char* value = std::getenv("LS_DECODE_PIPE");
  return value != nullptr && value[0] != 0 && std::string(value) != "0";
}
std::atomic<bool> pipe_on{pipe_from_env()};
// The automatic narrow pick (batch s8B, us at m = 1, the streaming kernels -> the pipeline, chunk 16: 2048->2048
// 8.84 -> 5.92, 2048->3072 9.13 -> 6.44; wider and sliced shapes no better): one-row, one-slice GEMMs of N <= 4096
// (o_proj, conv out_proj, q / k / v) take the pipeline; LS_DECODE_PIPE=0 or set_decode_pipe_narrow(false): none.
bool narrow_from_env() {
  const char* value = std::getenv("LS_DECODE_PIPE");
  return value == nullptr || std::string(value) != "0";
}
std::atomic<bool> pipe_narrow{narrow_from_env()};
constexpr int kNarrowMaxN = 4096;
std::atomic<int> pipe_pinned{-1}, pipe_ring_kb{0}, pipe_chunk{16};
constexpr int kDefaultRingBytes = 128 * 1024;
// Tensor copies of the weights (gemm_decode_tma.cu; session 9): LS_DECODE_TMA=1 one 3D box a stage, =0 row copies, for
// every pipeline launch; unset (-1): one-row launches of the classes in tma_classes take 3D boxes (and the pipeline,
// with the automatic picks on), the others row copies.
int tma_from_env() {
  const char* value = std::getenv("LS_DECODE_TMA");
  if (value == nullptr || value[0] == 0) return -1;
  return std::string(value) == "1" ? 1 : 0;
}
std::atomic<int> pipe_tma{tma_from_env()};
// The classes taking 3D boxes by default (kDecodeTma* bits, kernels.h; LS_DECODE_TMA_CLASSES overrides): one-row
// wide and sliced launches (batch s9A, us at m = 1, old -> 3D boxes: 2048->6144 10.96 -> 9.32, 8192->2048 9.78 ->
// 9.56); narrow ones keep row copies (2048->2048 5.92 against 6.66 at best), SwiGLU the streaming kernel (17.50
// against 17.62).
int tma_classes_from_env() {
  const char* value = std::getenv("LS_DECODE_TMA_CLASSES");
  if (value == nullptr || value[0] == 0) return kDecodeTmaWide | kDecodeTmaSliced;
  return std::atoi(value) & 15;
}
std::atomic<int> tma_classes{tma_classes_from_env()};
constexpr int kDefaultTmaRingBytes = 192 * 1024;

// The copies a launch of m rows x K -> rows (SwiGLU: 2F) outputs takes: 0 rows, 1 3D boxes.
int copies_of(int m, int k, int64_t rows, bool swiglu) {
  const int mode = pipe_tma.load(std::memory_order_relaxed);
  if (mode >= 0) return mode;
  if (m != 1) return 0;
  const int shape_class = swiglu                ? kDecodeTmaSwiglu
                          : slice_count(k) > 1  ? kDecodeTmaSliced
                          : rows > kNarrowMaxN ? kDecodeTmaWide
                                               : kDecodeTmaNarrow;
  return (tma_classes.load(std::memory_order_relaxed) & shape_class) != 0 ? 1 : 0;
}
int ring_bytes(int copies) {
  const int kb = pipe_ring_kb.load(std::memory_order_relaxed);
  return kb > 0 ? kb * 1024 : copies != 0 ? kDefaultTmaRingBytes : kDefaultRingBytes;
}
int item_cols_of(int config) { return config >= kPlainConfigs ? 8 : 8 * kPipeShapes[config].tiles; }

// Column groups per CTA for `columns` output columns (SwiGLU: F): about one CTA per SM.
int groups_for(int config, int64_t columns) {
  const int64_t groups = (columns + item_cols_of(config) - 1) / item_cols_of(config);
  return static_cast<int>(std::max<int64_t>(1, (groups + device_sms - 1) / device_sms));
}

// Shared memory of a launch of configuration `config` (m rows, K, `groups` per CTA); stages per warp out.
int pipe_shared_bytes(int config, int m, int k, int groups, int* stages, int copies) {
  const PipeShape& shape = kPipeShapes[config];
  if (copies != 0)
    return tma_pipe_plan(shape.warps, shape.tiles, config >= kPlainConfigs, m, k, groups, ring_bytes(copies),
                         pipe_chunk.load(std::memory_order_relaxed), stages, nullptr);
  const int slices = slice_count(k);
  const int stage_bytes = (m + 8 * shape.tiles) * pitch_of(pipe_chunk.load(std::memory_order_relaxed));
  const int active = std::min(shape.warps, groups * slices);  // warps with items (the others have no ring)
  const int count = std::clamp(ring_bytes(0) / (active * stage_bytes), 2, kMaxStages);
  if (stages) *stages = count;
  const int a_rows = m <= 8 ? 8 : 16;
  const int partial = slices == 1 ? 0 : slices * a_rows * groups * item_cols_of(config) * 4;
  return kBarrierBytes + active * count * stage_bytes + partial;
}

template <int WARPS, int TILES, bool SWIGLU>
Status launch_shape(const PipeGroup& group, int ctas, int groups, int smem, int stages, cudaStream_t stream) {
  const int chunk = pipe_chunk.load(std::memory_order_relaxed);
  if (group.args[0].m <= 8)
    return launch_programmatic(decode_pipe_kernel<WARPS, TILES, 8, SWIGLU>, ctas, 32 * WARPS, smem, stream, group,
                               groups, stages, chunk);
  return launch_programmatic(decode_pipe_kernel<WARPS, TILES, 16, SWIGLU>, ctas, 32 * WARPS, smem, stream, group,
                             groups, stages, chunk);
}

template <int WARPS, int TILES, bool SWIGLU>
void allow_shape(int optin) {
  cudaFuncSetAttribute(decode_pipe_kernel<WARPS, TILES, 8, SWIGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  cudaFuncSetAttribute(decode_pipe_kernel<WARPS, TILES, 16, SWIGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin);
}

// The automatic configuration. Row copies: SwiGLU 4 warps; sliced K 8 warps x 8 columns; one slice 16 columns an
// item from 8192 outputs, else 8. Tensor copies (batch s9A, cuda_gemm_bench --pipe, us at m = 1 against the old
// kernels): SwiGLU 8 warps (17.6 / 17.5), sliced K 8 warps x 16 columns (8192->2048 9.56 / 9.78), one slice above
// 4096 outputs 4 warps x 16 columns (2048->6144 9.32 / 10.96, 2048->8192 9.62 / 11.82), narrower 4 x 8.
int auto_config(bool swiglu, int slices, int64_t rows, int copies) {
  if (copies != 0) {
    if (swiglu) return kPlainConfigs + 1;
    if (slices > 1) return 4;
    return rows > kNarrowMaxN ? 1 : 0;
  }
  if (swiglu) return kPlainConfigs;
  if (slices > 1) return 3;
  return rows >= 8192 ? 1 : 0;
}

bool shape_fits(int config, int m, int k, int64_t n) {
  if (config < 0 || config >= kPipeConfigs || m < 1 || m > 16 || k % kBlockK != 0 || k < kBlockK || n < 1) return false;
  if (config >= kPlainConfigs && slice_count(k) > 1) return false;
  if (!cuda_features().tma || !cuda_features().pdl) return false;
  const bool swiglu = config >= kPlainConfigs;
  const int groups = groups_for(config, swiglu ? n / 2 : n);
  return pipe_shared_bytes(config, m, k, groups, nullptr, copies_of(m, k, n, swiglu)) <= optin_bytes_granted;
}

Status launch_config(int config, const PipeGroup& group, int groups, cudaStream_t stream) {
  int stages = 0;
  const GemmArgs& a = group.args[0];
  int64_t rows = 0;
  for (int i = 0; i < group.count; ++i) rows += group.args[i].n;
  const int copies = copies_of(a.m, a.k, rows, config >= kPlainConfigs);
  const int smem = pipe_shared_bytes(config, a.m, a.k, groups, &stages, copies);
  const int ctas = group.first_block[group.count];
  if (copies != 0) {
    const PipeShape& shape = kPipeShapes[config];
    return launch_tma_pipe(shape.warps, shape.tiles, config >= kPlainConfigs, group.args, group.first_block,
                           group.count, groups, ring_bytes(copies), pipe_chunk.load(std::memory_order_relaxed),
                           stream);
  }
  switch (config) {
    case 0: return launch_shape<4, 1, false>(group, ctas, groups, smem, stages, stream);
    case 1: return launch_shape<4, 2, false>(group, ctas, groups, smem, stages, stream);
    case 2: return launch_shape<2, 1, false>(group, ctas, groups, smem, stages, stream);
    case 3: return launch_shape<8, 1, false>(group, ctas, groups, smem, stages, stream);
    case 4: return launch_shape<8, 2, false>(group, ctas, groups, smem, stages, stream);
    case 5: return launch_shape<4, 2, true>(group, ctas, groups, smem, stages, stream);
    default: return launch_shape<8, 2, true>(group, ctas, groups, smem, stages, stream);
  }
}

// Tensor copies: whether the driver makes the weight map(s) configuration `config` reads for `args` (cached).
bool maps_ok(int config, const GemmArgs* args, int count) {
  const PipeShape& shape = kPipeShapes[config];
  const bool swiglu = config >= kPlainConfigs;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  const int copies = copies_of(args[0].m, args[0].k, rows, swiglu);
  if (copies == 0) return true;
  int chunk = 0;
  tma_pipe_plan(shape.warps, shape.tiles, swiglu, args[0].m, args[0].k, groups_for(config, swiglu ? rows / 2 : rows),
                ring_bytes(copies), pipe_chunk.load(std::memory_order_relaxed), nullptr, &chunk);
  for (int i = 0; i < count; ++i)
    if (!tma_pipe_maps_ok(args[i], shape.tiles, swiglu, chunk)) return false;
  return true;
}

// The configuration a launch takes: the pinned one (when it fits and is of the launch's kind), else the automatic.
int config_for(bool swiglu, int m, int k, int64_t rows) {
  const int pinned = pipe_pinned.load(std::memory_order_relaxed);
  if (pinned >= 0 && (pinned >= kPlainConfigs) == swiglu && shape_fits(pinned, m, k, rows)) return pinned;
  return auto_config(swiglu, slice_count(k), rows, copies_of(m, k, rows, swiglu));
}

}  // namespace

const char* pipe_config_name(int config) {
  return config >= 0 && config < kPipeConfigs ? kPipeShapes[config].name : "?";
}

void allow_pipe_shared(int optin_bytes) {
  optin_bytes_granted = optin_bytes;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && sms > 0)
    device_sms = sms;
  allow_shape<4, 1, false>(optin_bytes);
  allow_shape<4, 2, false>(optin_bytes);
  allow_shape<2, 1, false>(optin_bytes);
  allow_shape<8, 1, false>(optin_bytes);
  allow_shape<8, 2, false>(optin_bytes);
  allow_shape<4, 2, true>(optin_bytes);
  allow_shape<8, 2, true>(optin_bytes);
  allow_tma_pipe_shared(optin_bytes);
}

bool pipe_enabled() { return pipe_on.load(std::memory_order_relaxed) || pipe_narrow.load(std::memory_order_relaxed); }

// The automatic picks (set_decode_pipe_narrow): one-row launches of one slice and at most kNarrowMaxN outputs, and
// with tensor copies by default those of the classes in tma_classes.
bool auto_pick(int m, int k, int64_t rows, bool swiglu) {
  if (!pipe_narrow.load(std::memory_order_relaxed) || m != 1) return false;
  if (!swiglu && slice_count(k) == 1 && rows <= kNarrowMaxN) return true;
  return pipe_tma.load(std::memory_order_relaxed) < 0 && copies_of(m, k, rows, swiglu) != 0;
}

bool pipe_fits(const GemmArgs& args, bool swiglu) {
  if (args.reverse_k) return false;
  if (!pipe_on.load(std::memory_order_relaxed) && !auto_pick(args.m, args.k, args.n, swiglu)) return false;
  const int config = config_for(swiglu, args.m, args.k, args.n);
  return shape_fits(config, args.m, args.k, args.n) && maps_ok(config, &args, 1);
}

Status launch_pipe(int config, const GemmArgs& args, cudaStream_t stream) {
  const bool swiglu = config >= kPlainConfigs;
  if (config < 0) config = config_for(false, args.m, args.k, args.n);
  const int out_n = swiglu ? args.n / 2 : args.n;
  if (!shape_fits(config, args.m, args.k, args.n) || (swiglu && args.n % 2 != 0))
    return Status(ErrorCode::InvalidArgument, std::string("decode pipeline ") + pipe_config_name(config) +
                                                  " does not take m " + std::to_string(args.m) + ", N " +
                                                  std::to_string(args.n) + ", K " + std::to_string(args.k) +
                                                  " (1..16 rows, K a multiple of 64, SwiGLU one slice and an even N, "
                                                  "sm_90)");
  PipeGroup group{};
  group.args[0] = args;
  group.count = 1;
  const int groups = groups_for(config, out_n);
  const int cols = groups * item_cols_of(config);
  group.first_block[1] = (out_n + cols - 1) / cols;
  return launch_config(config, group, groups, stream);
}

Status launch_pipe_swiglu(const GemmArgs& args, cudaStream_t stream) {
  return launch_pipe(config_for(true, args.m, args.k, args.n), args, stream);
}

bool pipe_group_fits(const GemmArgs* args, int count) {
  if (count < 1 || count > kPipeGroupMax) return false;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  if (!pipe_on.load(std::memory_order_relaxed) && !auto_pick(args[0].m, args[0].k, rows, false)) return false;
  const int config = config_for(false, args[0].m, args[0].k, rows);
  return shape_fits(config, args[0].m, args[0].k, rows) && slice_count(args[0].k) == 1 && maps_ok(config, args, count);
}

Status launch_pipe_group(const GemmArgs* args, int count, cudaStream_t stream) {
  PipeGroup group{};
  group.count = count;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  const int config = config_for(false, args[0].m, args[0].k, rows);
  const int groups = groups_for(config, rows);
  const int cols = groups * item_cols_of(config);
  for (int i = 0; i < count; ++i) {
    group.args[i] = args[i];
    group.first_block[i + 1] = group.first_block[i] + (args[i].n + cols - 1) / cols;
  }
  return launch_config(config, group, groups, stream);
}

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

void set_decode_pipeline(bool on, int pinned_config, int ring_kb) {
  gemm_detail::pipe_on.store(on, std::memory_order_relaxed);
  gemm_detail::pipe_pinned.store(pinned_config, std::memory_order_relaxed);
  gemm_detail::pipe_ring_kb.store(std::clamp(ring_kb, 0, 200), std::memory_order_relaxed);
}

bool decode_pipeline_on() { return gemm_detail::pipe_on.load(std::memory_order_relaxed); }

void set_decode_pipe_narrow(bool on) { gemm_detail::pipe_narrow.store(on, std::memory_order_relaxed); }
bool decode_pipe_narrow_on() { return gemm_detail::pipe_narrow.load(std::memory_order_relaxed); }

bool decode_pipe_fits(int config, int64_t m, const DeviceMatrix& w) {
  return m >= 1 && m <= 16 && w.rows >= 1 && w.rows <= (1LL << 30) && w.cols <= (1LL << 24) &&
         gemm_detail::shape_fits(config, static_cast<int>(m), static_cast<int>(w.cols), w.rows);
}

void set_decode_pipe_tma(int mode) {
  gemm_detail::pipe_tma.store(mode == 0 || mode == 1 ? mode : -1, std::memory_order_relaxed);
}
int decode_pipe_tma() { return gemm_detail::pipe_tma.load(std::memory_order_relaxed); }
void set_decode_pipe_tma_classes(int classes) { gemm_detail::tma_classes.store(classes & 15, std::memory_order_relaxed); }
int decode_pipe_tma_classes() { return gemm_detail::tma_classes.load(std::memory_order_relaxed); }

void set_decode_pipe_chunk(int tiles) {
  gemm_detail::pipe_chunk.store(tiles == 4 || tiles == 8 ? tiles : 16, std::memory_order_relaxed);
}

int decode_pipe_config_count() { return gemm_detail::kPipeConfigs; }

const char* decode_pipe_config_name(int config) { return gemm_detail::pipe_config_name(config); }

Status gemm_decode_pipe(const GemmEngine& engine, int config, const bf16* x, int64_t m, const DeviceMatrix& w,
                        bf16* y_b16, float* y_f32, cudaStream_t stream) {
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  const bool swiglu = config >= gemm_detail::kPlainConfigs;
  if (config < -1 || config >= gemm_detail::kPipeConfigs)
    return Status(ErrorCode::InvalidArgument, "decode pipeline config " + std::to_string(config) + " of " +
                                                  std::to_string(gemm_detail::kPipeConfigs));
  if ((y_b16 == nullptr) == (y_f32 == nullptr) || (swiglu && y_f32 != nullptr) || m < 1 || m > 16 ||
      w.rows < 1 || w.rows > (1LL << 30) || w.cols > (1LL << 24))
    return Status(ErrorCode::InvalidArgument, "decode pipeline: one output (bf16 for SwiGLU), 1..16 rows, got m " +
                                                  std::to_string(m));
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "decode pipeline: x and W 16-byte aligned");
  gemm_detail::GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w.w),
                             w.bias, reinterpret_cast<__nv_bfloat16*>(y_b16), y_f32, static_cast<int>(m),
                             static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
  return gemm_detail::launch_pipe(config, args, stream);
}

}  // namespace ls::cuda
