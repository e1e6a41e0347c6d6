// The weight-streaming pipeline decode GEMM (m <= 16, sm_90; issue 8, session 8): a producer warp keeps a ring of
// stages full with cp.async.bulk row copies under mbarriers (weights before the programmatic wait, x after it), and
// consumer warps only wait, ldmatrix, mma and hand the stage back. Each consumer warp owns one (column group, slice)
// item and runs its chain in the canonical order of gemm_device.cuh (16-wide K steps ascending from 0 per slice; the
// slice sums added in slice order), so every row has the bits of the other decode kernels at any m.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "compute/cuda/gemm_decode.cuh"

namespace ls::cuda::gemm_detail {
namespace {

// A stage row holds `chunk` 64-wide K tiles (set_decode_pipe_chunk: 1, 2, 4 or 8; default 2) of one x or W row, in
// chunk * 128 + 16 bytes: the 16-byte pad keeps any 8 rows' ldmatrix conflict-free.
constexpr int pitch_of(int chunk) { return chunk * kBlockK * 2 + 16; }
constexpr int kMaxStages = 16;
constexpr int kBarrierBytes = 2 * kMaxStages * 8;  // full[kMaxStages] then empty[kMaxStages] mbarriers
constexpr int kPipeGroupMax = 4;

// Up to kPipeGroupMax GEMMs of one x and one K in one launch: CTAs [first_block[i], first_block[i + 1]) run args[i].
struct PipeGroup {
  GemmArgs args[kPipeGroupMax];
  int first_block[kPipeGroupMax + 1];
  int count;
};

__device__ __forceinline__ void bar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void bar_expect(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16) from global `src` to shared `dst`, counted on `bar` when they land.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, int bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// CW consumer warps + one producer warp. SWIGLU (TILES = 2): an item's W rows are 8 gate columns c.. then the 8 up
// columns F + c.., stored as swiglu's bits. A stage of chunk t holds, per slice s of the CTA, x rows [m] of K chunk t
// of slice s, then per item its 8 * TILES W rows of that chunk; x rows m..15 that ldmatrix reads alias later rows of
// the stage: they feed only output rows >= m, which are never stored (mma rows are independent).
template <int CW, int TILES, int A_ROWS, bool SWIGLU>
__global__ void __launch_bounds__(32 * (CW + 1)) decode_pipe_kernel(PipeGroup group, int stages, int chunk) {
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
  const int groups = CW / slices;  // column groups per CTA (the host checks CW % slices == 0)
  const int k_tiles = args.k / kBlockK;  // the host checks K % 64 == 0
  const int slice_tiles = slices == 1 ? k_tiles : kSliceTiles;
  const int chunks = (slice_tiles + chunk - 1) / chunk;  // slice 0 is the longest
  const int pitch = pitch_of(chunk);
  const int out_n = SWIGLU ? args.n / 2 : args.n;
  const int cols = groups * kItemCols;
  const int col0 = block * cols;
  const int stage_rows = slices * m + CW * kWRows;
  const int stage_bytes = stage_rows * pitch;
  const uint32_t bars = smem_address(shared_raw);
  const uint32_t ring = bars + kBarrierBytes;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kMaxStages + s); };
  let_next_kernel_start();
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      bar_init(full(s), 1);
      bar_init(empty(s), CW);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  // Tiles of chunk t in slice s (0..chunk).
  auto chunk_tiles = [&](int s, int t) {
    const int tiles = min(slice_tiles, k_tiles - s * slice_tiles);
    return max(0, min(chunk, tiles - t * chunk));
  };

  if (warp == CW) {  // ---- producer: row copies; copy i of a stage: x rows (slice, row) first, then W rows
    const int copies = stage_rows;
    // W row j of item `item` (0 .. CW * kWRows - 1 over the CTA): its global row, or -1 past N.
    auto w_row = [&](int index) {
      const int item = index / kWRows, j = index % kWRows;
      const int out_c = col0 + (item / slices) * kItemCols + (SWIGLU ? (j & 7) : j);
      if (out_c >= out_n) return -1;
      return SWIGLU && j >= 8 ? out_n + out_c : out_c;
    };
    // Bytes of stage t's copies (W only, x only or both), summed over the warp.
    auto stage_bytes_of = [&](int t, bool with_w, bool with_x) {
      int bytes = 0;
      for (int i = lane; i < copies; i += 32) {
        if (i < slices * m) {
          if (with_x) bytes += chunk_tiles(i / m, t) * kBlockK * 2;
        } else if (with_w) {
          const int index = i - slices * m;
          if (w_row(index) >= 0) bytes += chunk_tiles((index / kWRows) % slices, t) * kBlockK * 2;
        }
      }
      return __reduce_add_sync(0xffffffffu, bytes);
    };
    auto issue = [&](int t, bool with_w, bool with_x) {
      const int s = t % stages;
      const uint32_t base = ring + s * stage_bytes;
      for (int i = lane; i < copies; i += 32) {
        if (i < slices * m) {
          if (!with_x) continue;
          const int slice = i / m, row = i % m;
          const int tiles = chunk_tiles(slice, t);
          if (tiles > 0)
            bulk_copy(base + i * pitch,
                      args.x + static_cast<int64_t>(row) * args.k + (slice * slice_tiles + t * chunk) * kBlockK,
                      tiles * kBlockK * 2, full(s));
        } else if (with_w) {
          const int index = i - slices * m;
          const int c = w_row(index);
          const int tiles = chunk_tiles((index / kWRows) % slices, t);
          if (c >= 0 && tiles > 0)
            bulk_copy(base + i * pitch,
                      args.w + static_cast<int64_t>(c) * args.k +
                          (((index / kWRows) % slices) * slice_tiles + t * chunk) * kBlockK,
                      tiles * kBlockK * 2, full(s));
        }
      }
    };
    const int first = min(stages, chunks);
    // Prologue: the weights of the first stages before the wait (no kernel writes them), x after it.
    for (int t = 0; t < first; ++t) {
      const int bytes = stage_bytes_of(t, true, true);
      if (lane == 0) bar_expect(full(t), bytes);
      __syncwarp();
      issue(t, true, false);
    }
    wait_for_previous_kernel();
    for (int t = 0; t < first; ++t) issue(t, false, true);
    for (int t = first; t < chunks; ++t) {
      const int s = t % stages;
      bar_wait(empty(s), ((t / stages) - 1) & 1);
      const int bytes = stage_bytes_of(t, true, true);
      if (lane == 0) bar_expect(full(s), bytes);
      __syncwarp();
      issue(t, true, true);
    }
  } else {  // ---- consumers: one item each
    const int group_index = warp / slices, slice = warp % slices;
    float acc[TILES][4];
#pragma unroll
    for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const uint32_t a_off = (slice * m + (A_ROWS == 8 ? (lane & 7) : (lane & 15))) * pitch +
                           (A_ROWS == 8 ? ((lane >> 3) & 1) : (lane >> 4)) * 16;
    const uint32_t b_off = (slices * m + warp * kWRows + (lane & 7) + (TILES == 2 ? ((lane >> 4) << 3) : 0)) * pitch +
                           ((lane >> 3) & 1) * 16;
    for (int t = 0; t < chunks; ++t) {
      const int s = t % stages;
      bar_wait(full(s), (t / stages) & 1);
      const int tiles = chunk_tiles(slice, t);
      const uint32_t base = ring + s * stage_bytes;
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
      __syncwarp();
      if (lane == 0) bar_arrive(empty(s));
    }
    wait_for_previous_kernel();  // returns at once: the producer waited before it copied x
    constexpr int kHalves = A_ROWS == 16 ? 2 : 1;
    const int c_first = col0 + group_index * kItemCols;
    float* partial = reinterpret_cast<float*>(shared_raw + kBarrierBytes + stages * stage_bytes);
#pragma unroll
    for (int half = 0; half < kHalves; ++half) {
      const int r = half * 8 + (lane >> 2);
      if constexpr (SWIGLU) {
        const int c = c_first + (lane & 3) * 2;
        for (int e = 0; e < 2; ++e) store_swiglu(args, r, c + e, out_n, acc[0][2 * half + e], acc[1][2 * half + e]);
      } else {
#pragma unroll
        for (int j = 0; j < TILES; ++j) {
          const int c = group_index * kItemCols + j * 8 + (lane & 3) * 2;  // column within the CTA
          if (slices == 1) {
            store_pair(args, r, col0 + c, acc[j][2 * half], acc[j][2 * half + 1]);
          } else {
            float* out = partial + static_cast<int64_t>(slice) * A_ROWS * cols;
            out[r * cols + c] = acc[j][2 * half];
            out[r * cols + c + 1] = acc[j][2 * half + 1];
          }
        }
      }
    }
    if (slices > 1) {
      asm volatile("bar.sync 1, %0;\n" ::"r"(32 * CW) : "memory");  // the consumers only
      for (int o = threadIdx.x; o < m * cols / 2; o += 32 * CW) {
        const int r = o / (cols / 2), c = (o % (cols / 2)) * 2;
        float v0 = partial[r * cols + c], v1 = partial[r * cols + c + 1];
        for (int s = 1; s < slices; ++s) {
          v0 = __fadd_rn(v0, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + c]);
          v1 = __fadd_rn(v1, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + c + 1]);
        }
        store_pair(args, r, col0 + c, v0, v1);
      }
    }
  }
#else
  __trap();  // sm_90 only: the host never launches it elsewhere
#endif
}

// The configurations (consumer warps x 8-column tiles per item): kPipeConfigs plain ones, then the SwiGLU ones.
struct PipeShape {
  int cw, tiles;
  const char* name;
};
constexpr int kPlainConfigs = 5;
constexpr PipeShape kPipeShapes[kPipeConfigs] = {{2, 1, "pipe 2w 8c"},  {4, 1, "pipe 4w 8c"},  {8, 1, "pipe 8w 8c"},
                                                 {4, 2, "pipe 4w 16c"}, {8, 2, "pipe 8w 16c"}, {4, 2, "pipe 4w swiglu"},
                                                 {8, 2, "pipe 8w swiglu"}};

int optin_bytes_granted = 0;
// The switch starts from LS_DECODE_PIPE (set and not "0": on), so whole runs (lanes_bench, tests) can take it.
bool pipe_from_env() {
  const char* value = std::getenv("LS_DECODE_PIPE");
  return value != nullptr && value[0] != 0 && std::string(value) != "0";
}
std::atomic<bool> pipe_on{pipe_from_env()};
std::atomic<int> pipe_pinned{-1}, pipe_ring_kb{0}, pipe_chunk{2};
constexpr int kDefaultRingBytes = 96 * 1024;

int ring_bytes() {
  const int kb = pipe_ring_kb.load(std::memory_order_relaxed);
  return kb > 0 ? kb * 1024 : kDefaultRingBytes;
}

// Shared memory of a launch of configuration `config` over K with m rows and a ring of `ring` bytes; stages out.
int pipe_shared_bytes(int config, int m, int k, int ring, int* stages) {
  const PipeShape& shape = kPipeShapes[config];
  const int slices = slice_count(k);
  const int stage_bytes = (slices * m + shape.cw * 8 * shape.tiles) * pitch_of(pipe_chunk.load(std::memory_order_relaxed));
  const int count = std::clamp(ring / stage_bytes, 2, kMaxStages);
  if (stages) *stages = count;
  const int item_cols = config >= kPlainConfigs ? 8 : 8 * shape.tiles;
  const int a_rows = m <= 8 ? 8 : 16;
  const int partial = slices == 1 ? 0 : slices * a_rows * (shape.cw / slices) * item_cols * 4;
  return kBarrierBytes + count * stage_bytes + partial;
}

template <int CW, int TILES, bool SWIGLU>
Status launch_shape(const PipeGroup& group, int ctas, int smem, int stages, cudaStream_t stream) {
  if (group.args[0].m <= 8)
    return launch_programmatic(decode_pipe_kernel<CW, TILES, 8, SWIGLU>, ctas, 32 * (CW + 1), smem, stream, group,
                               stages, pipe_chunk.load(std::memory_order_relaxed));
  return launch_programmatic(decode_pipe_kernel<CW, TILES, 16, SWIGLU>, ctas, 32 * (CW + 1), smem, stream, group,
                             stages, pipe_chunk.load(std::memory_order_relaxed));
}

template <int CW, int TILES, bool SWIGLU>
void allow_shape(int optin) {
  cudaFuncSetAttribute(decode_pipe_kernel<CW, TILES, 8, SWIGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  cudaFuncSetAttribute(decode_pipe_kernel<CW, TILES, 16, SWIGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
}

// The automatic configuration: SwiGLU 8 warps where that makes >= 128 CTAs, else 4; sliced K 8 warps x 8 columns;
// one slice the widest CTA (16..64 columns) that still makes >= 128 CTAs over all `rows` of the launch.
int auto_config(bool swiglu, int slices, int64_t rows) {
  if (swiglu) return rows / 2 / 64 >= 128 ? 6 : 5;
  if (slices > 1) return 2;
  if (rows / 64 >= 128) return 2;
  if (rows / 32 >= 128) return 1;
  return 0;
}

bool shape_fits(int config, int m, int k, int64_t n) {
  if (config < 0 || config >= kPipeConfigs || m < 1 || m > 16 || k % kBlockK != 0 || k < kBlockK || n < 1) return false;
  const int slices = slice_count(k);
  if (kPipeShapes[config].cw % slices != 0 || (config >= kPlainConfigs && slices > 1)) return false;
  if (!cuda_features().tma || !cuda_features().pdl) return false;
  return pipe_shared_bytes(config, m, k, ring_bytes(), nullptr) <= optin_bytes_granted;
}

Status launch_config(int config, const PipeGroup& group, cudaStream_t stream) {
  int stages = 0;
  const GemmArgs& a = group.args[0];
  const int smem = pipe_shared_bytes(config, a.m, a.k, ring_bytes(), &stages);
  const int ctas = group.first_block[group.count];
  switch (config) {
    case 0: return launch_shape<2, 1, false>(group, ctas, smem, stages, stream);
    case 1: return launch_shape<4, 1, false>(group, ctas, smem, stages, stream);
    case 2: return launch_shape<8, 1, false>(group, ctas, smem, stages, stream);
    case 3: return launch_shape<4, 2, false>(group, ctas, smem, stages, stream);
    case 4: return launch_shape<8, 2, false>(group, ctas, smem, stages, stream);
    case 5: return launch_shape<4, 2, true>(group, ctas, smem, stages, stream);
    default: return launch_shape<8, 2, true>(group, ctas, smem, stages, stream);
  }
}

// Columns (output columns; SwiGLU: F columns) one CTA of `config` covers for K.
int cta_columns(int config, int k) {
  const PipeShape& shape = kPipeShapes[config];
  const int item_cols = config >= kPlainConfigs ? 8 : 8 * shape.tiles;
  return shape.cw / slice_count(k) * item_cols;
}

// The configuration a launch takes: the pinned one (when it fits and is of the launch's kind), else the automatic.
int config_for(bool swiglu, int m, int k, int64_t rows) {
  const int pinned = pipe_pinned.load(std::memory_order_relaxed);
  if (pinned >= 0 && (pinned >= kPlainConfigs) == swiglu && shape_fits(pinned, m, k, rows)) return pinned;
  return auto_config(swiglu, slice_count(k), rows);
}

}  // namespace

const char* pipe_config_name(int config) {
  return config >= 0 && config < kPipeConfigs ? kPipeShapes[config].name : "?";
}

void allow_pipe_shared(int optin_bytes) {
  optin_bytes_granted = optin_bytes;
  allow_shape<2, 1, false>(optin_bytes);
  allow_shape<4, 1, false>(optin_bytes);
  allow_shape<8, 1, false>(optin_bytes);
  allow_shape<4, 2, false>(optin_bytes);
  allow_shape<8, 2, false>(optin_bytes);
  allow_shape<4, 2, true>(optin_bytes);
  allow_shape<8, 2, true>(optin_bytes);
}

bool pipe_enabled() { return pipe_on.load(std::memory_order_relaxed); }

bool pipe_fits(const GemmArgs& args, bool swiglu) {
  if (args.reverse_k) return false;
  const int config = config_for(swiglu, args.m, args.k, args.n);
  return shape_fits(config, args.m, args.k, args.n);
}

Status launch_pipe(int config, const GemmArgs& args, cudaStream_t stream) {
  const bool swiglu = config >= kPlainConfigs;
  if (config < 0) config = config_for(false, args.m, args.k, args.n);
  const int out_n = swiglu ? args.n / 2 : args.n;
  if (!shape_fits(config, args.m, args.k, args.n) || (swiglu && args.n % 2 != 0))
    return Status(ErrorCode::InvalidArgument, std::string("decode pipeline ") + pipe_config_name(config) +
                                                  " does not take m " + std::to_string(args.m) + ", N " +
                                                  std::to_string(args.n) + ", K " + std::to_string(args.k) +
                                                  " (1..16 rows, K a multiple of 64, slices dividing its warps, SwiGLU "
                                                  "one slice and an even N, sm_90)");
  PipeGroup group{};
  group.args[0] = args;
  group.count = 1;
  const int cols = cta_columns(config, args.k);
  group.first_block[1] = (out_n + cols - 1) / cols;
  return launch_config(config, group, stream);
}

Status launch_pipe_swiglu(const GemmArgs& args, cudaStream_t stream) {
  return launch_pipe(config_for(true, args.m, args.k, args.n), args, stream);
}

bool pipe_group_fits(const GemmArgs* args, int count) {
  if (count < 1 || count > kPipeGroupMax) return false;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  const int config = config_for(false, args[0].m, args[0].k, rows);
  return shape_fits(config, args[0].m, args[0].k, rows) && slice_count(args[0].k) == 1;
}

Status launch_pipe_group(const GemmArgs* args, int count, cudaStream_t stream) {
  PipeGroup group{};
  group.count = count;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  const int config = config_for(false, args[0].m, args[0].k, rows);
  const int cols = cta_columns(config, args[0].k);
  for (int i = 0; i < count; ++i) {
    group.args[i] = args[i];
    group.first_block[i + 1] = group.first_block[i] + (args[i].n + cols - 1) / cols;
  }
  return launch_config(config, group, stream);
}

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

void set_decode_pipeline(bool on, int pinned_config, int ring_kb) {
  gemm_detail::pipe_on.store(on, std::memory_order_relaxed);
  gemm_detail::pipe_pinned.store(pinned_config, std::memory_order_relaxed);
  gemm_detail::pipe_ring_kb.store(std::clamp(ring_kb, 0, 200), std::memory_order_relaxed);
}

bool decode_pipeline_on() { return gemm_detail::pipe_enabled(); }

void set_decode_pipe_chunk(int tiles) {
  gemm_detail::pipe_chunk.store(tiles == 1 || tiles == 4 || tiles == 8 ? tiles : 2, std::memory_order_relaxed);
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
