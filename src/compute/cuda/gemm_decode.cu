// The decode GEMM kernels (m <= 16): every (column group, slice) item is one warp's own cp.async pipeline; the slice
// sums meet in shared memory and are added in slice order (the canonical order of gemm_device.cuh). The variants
// differ only in warps per CTA, pipeline depth, columns per item and the x rows staged (8 when m <= 8: the mma's
// rows 8..15 are zero registers); each output's chain (16-wide K steps ascending from 0 per slice) is the same in all.
#include <mutex>
#include <span>
#include <string>

#include "compute/cuda/gemm_device.cuh"

namespace ls::cuda::gemm_detail {
namespace {

constexpr int kDecodeWarps = 8;
constexpr int kDecodeStageBytes = (16 + 8) * 128;  // A rows [16, 64] then W rows [8, 64], swizzled

// The first decode kernel (variant 0): items of one CTA are `groups` column groups of 8 times `slices`; item =
// group * slices + slice.
template <int kDecodeStages>
__global__ void __launch_bounds__(32 * kDecodeWarps) gemm_decode_kernel(GemmArgs args, int slices, int groups) {
  constexpr int kDecodePipeBytes = kDecodeWarps * kDecodeStages * kDecodeStageBytes;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int slice_tiles = slices == 1 ? k_tiles : kSliceTiles;
  const int cols = groups * 8;
  const int col0 = blockIdx.x * cols;
  float* partial = reinterpret_cast<float*>(shared_raw + kDecodePipeBytes);  // [slices][16][cols]
  unsigned char* pipe = shared_raw + warp * kDecodeStages * kDecodeStageBytes;
  const uint32_t pipe_base = smem_address(pipe);

  // A rows past m stay zero in every stage: cleared once, never copied into.
  for (int i = lane; i < kDecodeStages * kDecodeStageBytes / 16; i += 32)
    reinterpret_cast<uint4*>(pipe)[i] = make_uint4(0, 0, 0, 0);
  __syncwarp();

  for (int item = warp; item < groups * slices; item += kDecodeWarps) {
    const int group = item / slices, slice = item % slices;
    const int c8 = col0 + group * 8;
    const int first_tile = slice * slice_tiles;
    const int tiles = min(slice_tiles, k_tiles - first_tile);
    auto load = [&](int t, int stage) {
      const int kt = first_tile + (args.reverse_k ? tiles - 1 - t : t);
      const uint32_t base = pipe_base + stage * kDecodeStageBytes;
      // A: rows < m only (8 chunks a row); W: 8 rows x 8 chunks.
      for (int index = lane; index < (args.m + 8) * 8; index += 32) {
        const int row = index >> 3, chunk = index & 7;
        const int k = kt * kBlockK + chunk * 8;
        if (row < args.m) {
          const bool inside = k < args.k;
          copy_chunk(base + swizzled(row, chunk), args.x + (static_cast<int64_t>(row) * args.k + (inside ? k : 0)),
                     inside);
        } else {
          const int w_row = row - args.m, c = c8 + w_row;
          const bool inside = c < args.n && k < args.k;
          copy_chunk(base + swizzled(16 + w_row, chunk),
                     args.w + (static_cast<int64_t>(inside ? c : 0) * args.k + (inside ? k : 0)), inside);
        }
      }
    };
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < kDecodeStages - 1; ++s) {
      if (s < tiles) load(s, s);
      commit_group();
    }
    for (int t = 0; t < tiles; ++t) {
      wait_group<kDecodeStages - 2>();
      __syncwarp();
      if (t + kDecodeStages - 1 < tiles) load(t + kDecodeStages - 1, (t + kDecodeStages - 1) % kDecodeStages);
      commit_group();
      const uint32_t a_base = pipe_base + (t % kDecodeStages) * kDecodeStageBytes;
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        uint32_t a[4], b[2];
        ldmatrix_x4(a_base + swizzled(lane & 15, kk * 2 + (lane >> 4)), a[0], a[1], a[2], a[3]);
        ldmatrix_x2(a_base + swizzled(16 + (lane & 7), kk * 2 + ((lane >> 3) & 1)), b[0], b[1]);
        mma_bf16(acc, a, b);
      }
    }
    wait_group<0>();
    __syncwarp();  // every lane is done reading the stages before the next item refills them
    float* out = partial + static_cast<int64_t>(slice) * 16 * cols;
    const int r = lane >> 2, c = group * 8 + (lane & 3) * 2;
    out[r * cols + c] = acc[0];
    out[r * cols + c + 1] = acc[1];
    out[(r + 8) * cols + c] = acc[2];
    out[(r + 8) * cols + c + 1] = acc[3];
  }
  __syncthreads();
  // Slice sums added in slice order, then bias and one rounding (store_pair), two columns per thread.
  for (int o = threadIdx.x; o < args.m * cols / 2; o += blockDim.x) {
    const int r = o / (cols / 2), c = (o % (cols / 2)) * 2;
    float v0 = partial[r * cols + c], v1 = partial[r * cols + c + 1];
    for (int s = 1; s < slices; ++s) {
      v0 = __fadd_rn(v0, partial[(static_cast<int64_t>(s) * 16 + r) * cols + c]);
      v1 = __fadd_rn(v1, partial[(static_cast<int64_t>(s) * 16 + r) * cols + c + 1]);
    }
    store_pair(args, r, col0 + c, v0, v1);
  }
}

// Column groups of 8 per decode CTA: enough that the CTA's 8 warps each get an item.
int decode_groups(int slices) { return slices >= kDecodeWarps ? 1 : kDecodeWarps / slices; }

template <int STAGES>
Status launch_decode_stages(const GemmArgs& args, int slices, int groups, int ctas, cudaStream_t stream) {
  const int smem = kDecodeWarps * STAGES * kDecodeStageBytes + slices * 16 * groups * 8 * static_cast<int>(sizeof(float));
  gemm_decode_kernel<STAGES><<<ctas, 32 * kDecodeWarps, smem, stream>>>(args, slices, groups);
  LS_CUDA_TRY_LAUNCH("gemm_decode_kernel");
  return ok_status();
}

// Variant 0: deep pipelines (one CTA per SM) when the CTAs fit one wave; else two CTAs per SM with 4 stages each.
Status launch_first(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  const int groups = decode_groups(slices);
  const int ctas = (args.n + groups * 8 - 1) / (groups * 8);
  if (ctas <= sm_count) return launch_decode_stages<8>(args, slices, groups, ctas, stream);
  return launch_decode_stages<4>(args, slices, groups, ctas, stream);
}

// ---- The streaming variants: WARPS warps, STAGES tiles of K in flight per warp, TILES x 8 columns per item, A_ROWS
// rows of x staged per tile (8 or 16). One slice: a CTA's items are WARPS column groups, one per warp, and each
// warp stores its outputs itself. Sliced K: groups = max(1, WARPS / slices), items group * slices + slice, the slice
// sums meet in shared memory [slices][A_ROWS][cols].
// Programmatic dependent launch (sm_90): the streaming kernels are launched to start while the kernel before them
// drains; each waits here for it (its completion and memory) before reading x or writing anything. Before the
// wait they only zero shared memory and stage weights, which no kernel writes.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel (if launched programmatically) start its prologue now.
__device__ __forceinline__ void let_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

// Launches `kernel` on `stream` allowed to overlap the previous kernel's tail (programmatic stream serialization).
template <typename... Params, typename... Args>
Status launch_programmatic(void (*kernel)(Params...), int ctas, int threads, int smem, cudaStream_t stream,
                           Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = cuda_features().pdl ? 1 : 0;  // the portable sm_80 path: an ordinary launch
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, args...));
  return ok_status();
}

// swiglu_kernel's arithmetic (elementwise.cu) on the GEMM's two outputs after their one rounding (+ bias): y [r, c] =
// round(round(silu(g)) * u), silu(g) = g / (1 + exp(-g)) with exp through double.
__device__ __forceinline__ void store_swiglu(const GemmArgs& args, int r, int c, int f, float gate, float up) {
  if (r >= args.m || c >= f) return;
  if (args.bias) {
    gate = __fadd_rn(gate, args.bias[c]);
    up = __fadd_rn(up, args.bias[f + c]);
  }
  const float g = __bfloat162float(__float2bfloat16_rn(gate)), u = __bfloat162float(__float2bfloat16_rn(up));
  const float e = static_cast<float>(exp(static_cast<double>(-g)));
  const float silu = __bfloat162float(__float2bfloat16_rn(__fdiv_rn(g, __fadd_rn(1.0f, e))));
  args.y_b16[static_cast<int64_t>(r) * f + c] = __float2bfloat16_rn(__fmul_rn(silu, u));
}

template <int WARPS, int STAGES, int TILES, int A_ROWS>
struct Stream {
  static constexpr int kStageBytes = (A_ROWS + 8 * TILES) * 128;
  static constexpr int kPipeBytes = WARPS * STAGES * kStageBytes;
};

// SWIGLU (one slice, TILES = 2): W is gate_up [2F, K]; an item's first 8 rows are gate columns c.., its second 8
// the up columns F + c..; the epilogue writes y_b16 [m, F] = swiglu's bits of the two rounded outputs.
template <int WARPS, int STAGES, int TILES, int A_ROWS, bool SWIGLU>
__device__ __forceinline__ void stream_body(const GemmArgs& args, int slices, int groups, int block) {
  using S = Stream<WARPS, STAGES, TILES, A_ROWS>;
  static_assert(!SWIGLU || TILES == 2, "SwiGLU items pair 8 gate and 8 up columns");
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;  // output columns per item
  const int out_n = SWIGLU ? args.n / 2 : args.n;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int slice_tiles = slices == 1 ? k_tiles : kSliceTiles;
  const int cols = groups * kItemCols;
  const int col0 = block * cols;
  float* partial = reinterpret_cast<float*>(shared_raw + S::kPipeBytes);
  unsigned char* pipe = shared_raw + warp * STAGES * S::kStageBytes;
  const uint32_t pipe_base = smem_address(pipe);
  let_next_kernel_start();

  // x rows m .. A_ROWS-1 stay zero in every stage: cleared once, never copied into.
  for (int i = lane; i < STAGES * (A_ROWS - args.m) * 8; i += 32) {
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
    auto load_w = [&](int t, int stage) {
      const int k_base = (first_tile + (args.reverse_k ? tiles - 1 - t : t)) * kBlockK;
      const uint32_t base = pipe_base + stage * S::kStageBytes;
#pragma unroll
      for (int i = 0; i < 2 * TILES; ++i) {  // W: 8 * TILES rows x 8 chunks, 4 rows per instruction
        const int index = lane + 32 * i;
        const int w_row = index >> 3, chunk = index & 7;
        const int out_c = c_first + (SWIGLU ? (w_row & 7) : w_row), k = k_base + chunk * 8;
        const int c = SWIGLU && w_row >= 8 ? out_n + out_c : out_c;
        const bool inside = out_c < out_n && k < args.k;
        copy_chunk(base + swizzled(A_ROWS + w_row, chunk),
                   args.w + (static_cast<int64_t>(inside ? c : 0) * args.k + (inside ? k : 0)), inside);
      }
    };
    auto load_x = [&](int t, int stage) {
      const int k_base = (first_tile + (args.reverse_k ? tiles - 1 - t : t)) * kBlockK;
      const uint32_t base = pipe_base + stage * S::kStageBytes;
      for (int index = lane; index < args.m * 8; index += 32) {  // x: rows < m
        const int row = index >> 3, chunk = index & 7;
        const int k = k_base + chunk * 8;
        const bool inside = k < args.k;
        copy_chunk(base + swizzled(row, chunk), args.x + (static_cast<int64_t>(row) * args.k + (inside ? k : 0)),
                   inside);
      }
    };
    float acc[TILES][4];
#pragma unroll
    for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    // Prologue: the weights first (no kernel writes them), then wait for the kernel that writes x, then x; all of
    // it is group 0 (the first tile waits for the whole prologue), then empty groups keep the count.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < tiles) load_w(s, s);
    wait_for_previous_kernel();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < tiles) load_x(s, s);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) commit_group();
    for (int t = 0; t < tiles; ++t) {
      wait_group<STAGES - 2>();
      __syncwarp();
      if (t + STAGES - 1 < tiles) {
        load_w(t + STAGES - 1, (t + STAGES - 1) % STAGES);
        load_x(t + STAGES - 1, (t + STAGES - 1) % STAGES);
      }
      commit_group();
      const uint32_t a_base = pipe_base + (t % STAGES) * S::kStageBytes;
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        uint32_t a[4], b[TILES][2];
        if constexpr (A_ROWS == 16) {
          ldmatrix_x4(a_base + swizzled(lane & 15, kk * 2 + (lane >> 4)), a[0], a[1], a[2], a[3]);
        } else {  // rows 0..7 at k 0..7 and 8..15; the mma's rows 8..15 are zero
          ldmatrix_x2(a_base + swizzled(lane & 7, kk * 2 + ((lane >> 3) & 1)), a[0], a[2]);
          a[1] = a[3] = 0u;
        }
        if constexpr (TILES == 1) {
          ldmatrix_x2(a_base + swizzled(A_ROWS + (lane & 7), kk * 2 + ((lane >> 3) & 1)), b[0][0], b[0][1]);
        } else {
#pragma unroll
          for (int j = 0; j < TILES; j += 2)
            ldmatrix_x4(a_base + swizzled(A_ROWS + j * 8 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)),
                        b[j][0], b[j][1], b[j + 1][0], b[j + 1][1]);
        }
#pragma unroll
        for (int j = 0; j < TILES; ++j) mma_bf16(acc[j], a, b[j]);
      }
    }
    wait_group<0>();
    __syncwarp();  // every lane is done reading the stages before the next item refills them
    const int r = lane >> 2;
    if constexpr (SWIGLU) {
      const int c = c_first + (lane & 3) * 2;
#pragma unroll
      for (int half = 0; half < A_ROWS / 8; ++half)
        for (int e = 0; e < 2; ++e)
          store_swiglu(args, r + 8 * half, c + e, out_n, acc[0][2 * half + e], acc[1][2 * half + e]);
    } else {
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        const int c = group * kItemCols + j * 8 + (lane & 3) * 2;  // column within the CTA
        if (slices == 1) {
          store_pair(args, r, col0 + c, acc[j][0], acc[j][1]);
          if constexpr (A_ROWS == 16) store_pair(args, r + 8, col0 + c, acc[j][2], acc[j][3]);
        } else {
          float* out = partial + static_cast<int64_t>(slice) * A_ROWS * cols;
          out[r * cols + c] = acc[j][0];
          out[r * cols + c + 1] = acc[j][1];
          if constexpr (A_ROWS == 16) {
            out[(r + 8) * cols + c] = acc[j][2];
            out[(r + 8) * cols + c + 1] = acc[j][3];
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
__global__ void __launch_bounds__(32 * WARPS) decode_stream_kernel(GemmArgs args, int slices, int groups) {
  stream_body<WARPS, STAGES, TILES, A_ROWS, SWIGLU>(args, slices, groups, blockIdx.x);
}

// Up to kGroupMax one-slice GEMMs of the same x in one launch: CTAs [first_block[i], first_block[i + 1]) run args[i].
constexpr int kGroupMax = 4;
struct GemmGroup {
  GemmArgs args[kGroupMax];
  int first_block[kGroupMax + 1];
  int count;
};

template <int WARPS, int STAGES, int A_ROWS>
__global__ void __launch_bounds__(32 * WARPS) decode_group_kernel(GemmGroup group) {
  int i = 0;
  while (i + 1 < group.count && static_cast<int>(blockIdx.x) >= group.first_block[i + 1]) ++i;
  stream_body<WARPS, STAGES, 1, A_ROWS, false>(group.args[i], 1, WARPS, blockIdx.x - group.first_block[i]);
}

int optin_shared_bytes = 0;  // the device's opt-in limit, set by allow_decode_shared

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
  if (smem > optin_shared_bytes) return launch_first(args, sm_count, stream);  // very long K: the first kernel
  return launch_programmatic(decode_stream_kernel<WARPS, STAGES, TILES, A_ROWS>, ctas, 32 * WARPS, smem, stream, args,
                             slices, groups);
}

template <int WARPS, int STAGES, int TILES>
Status launch_stream(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (args.m <= 8) return launch_stream_rows<WARPS, STAGES, TILES, 8>(args, sm_count, stream);
  return launch_stream_rows<WARPS, STAGES, TILES, 16>(args, sm_count, stream);
}

template <int WARPS, int STAGES, int TILES>
void allow_stream_shared(int optin_bytes) {
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
}

// The fused gate_up GEMM + SwiGLU (one slice), items of 8 gate + 8 up columns: 4 warps x 8 stages for m <= 8 (two
// CTAs per SM), 8 warps x 6 stages for more rows (one wave of one CTA per SM on 2048->16384: 31.2 -> ~20 us at m = 16
// on the H200, batch A).
template <int A_ROWS>
Status launch_swiglu_rows(const GemmArgs& args, cudaStream_t stream) {
  constexpr int kWarps = A_ROWS == 8 ? 4 : 8, kStages = A_ROWS == 8 ? 8 : 6;
  const int f = args.n / 2;
  const int cols = kWarps * 8;
  const int ctas = (f + cols - 1) / cols;
  constexpr int smem = Stream<kWarps, kStages, 2, A_ROWS>::kPipeBytes;
  return launch_programmatic(decode_stream_kernel<kWarps, kStages, 2, A_ROWS, true>, ctas, 32 * kWarps, smem, stream,
                             args, 1, kWarps);
}

// The grouped launch (q / k / v of an attention layer): 2 warps, 16 stages, 8 columns per item (many CTAs, deep
// pipelines for narrow outputs).
constexpr int kGroupWarps = 2, kGroupStages = 16;

template <int A_ROWS>
Status launch_group_rows(const GemmGroup& group, cudaStream_t stream) {
  constexpr int smem = Stream<kGroupWarps, kGroupStages, 1, A_ROWS>::kPipeBytes;
  return launch_programmatic(decode_group_kernel<kGroupWarps, kGroupStages, A_ROWS>, group.first_block[group.count],
                             32 * kGroupWarps, smem, stream, group);
}

// The variants by number (decode_variant_name): 0 the first kernel, then the streaming ones.
constexpr int kVariants = 7;
const char* const kVariantNames[kVariants] = {"decode 8w s4/8 8c", "stream 4w s8 16c", "stream 4w s12 8c",
                                              "stream 8w s6 16c",  "stream 8w s8 8c",  "stream 2w s16 8c",
                                              "stream 1w s32 8c"};

Status launch_variant(int variant, const GemmArgs& args, int sm_count, cudaStream_t stream) {
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

// The automatic variant for (m, N, K), from the H200 run of `gpu_bench --decode-gemm` (batch A, commit 9a0b7f6; us at
// m = 1 / 16, first kernel -> pick): sliced K (8192->2048) 12.5 / 15.4 -> 8w s6 16c 10.1 / 10.9; one slice, N >=
// 8192 (2048->16384) 21.7 -> 4w s8 16c 17.7 at m = 1, 8w s6 16c 19.9 at m = 16; narrower one-slice outputs
// (2048->6144 / 2048 / 512) 17.6 / 17.5 / 17.4 -> 4w s12 8c 12.0 / 9.6 / 9.5 at m <= 8, 4w s8 16c 12.2 / 11.3 /
// 11.3 at m = 16 (first kernel 22.3 / 22.1 / 21.9).
int pick_variant(const GemmArgs& args, int /*sm_count*/) {
  if (slice_count(args.k) > 1) return 3;
  if (args.n >= 8192) return args.m <= 8 ? 1 : 3;
  return args.m <= 8 ? 2 : 1;
}

}  // namespace

Status launch_decode(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  return launch_variant(pick_variant(args, sm_count), args, sm_count, stream);
}

void allow_decode_shared(int optin_bytes) {
  optin_shared_bytes = optin_bytes;
  cudaFuncSetAttribute(gemm_decode_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(gemm_decode_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  allow_stream_shared<4, 8, 2>(optin_bytes);
  allow_stream_shared<4, 12, 1>(optin_bytes);
  allow_stream_shared<8, 6, 2>(optin_bytes);
  allow_stream_shared<8, 8, 1>(optin_bytes);
  allow_stream_shared<2, 16, 1>(optin_bytes);
  allow_stream_shared<1, 32, 1>(optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, kGroupStages, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, kGroupStages, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<4, 8, 2, 8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<8, 6, 2, 16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
}

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

int decode_variant_count() { return gemm_detail::kVariants; }

const char* decode_variant_name(int variant) {
  return variant >= 0 && variant < gemm_detail::kVariants ? gemm_detail::kVariantNames[variant] : "?";
}

bool decode_swiglu_fits(int64_t m, const DeviceMatrix& gate_up) {
  return m >= 1 && m <= 16 && gate_up.rows >= 2 && gate_up.rows % 2 == 0 && gate_up.rows <= (1LL << 30) &&
         gate_up.cols % 8 == 0 && gate_up.cols <= gemm_detail::kUnslicedK;
}

Status gemm_decode_swiglu(const GemmEngine& engine, const bf16* x, int64_t m, const DeviceMatrix& gate_up, bf16* act,
                          cudaStream_t stream) {
  if (!decode_swiglu_fits(m, gate_up))
    return Status(ErrorCode::InvalidArgument, "gemm_decode_swiglu takes 1..16 rows, an even N and K <= " +
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
  return gemm_detail::launch_swiglu_rows<16>(args, stream);
}

bool decode_group_fits(int64_t m, std::span<const DeviceMatrix> ws) {
  if (m < 1 || m > 16 || ws.empty() || ws.size() > static_cast<size_t>(gemm_detail::kGroupMax)) return false;
  for (const DeviceMatrix& w : ws)
    if (w.cols != ws[0].cols || w.cols % 8 != 0 || w.cols > gemm_detail::kUnslicedK || w.rows < 1 ||
        w.rows > (1 << 24))
      return false;
  return true;
}

Status gemm_decode_group(const GemmEngine& engine, const bf16* x, int64_t m, std::span<const DeviceMatrix> ws,
                         std::span<bf16* const> ys, cudaStream_t stream) {
  if (!decode_group_fits(m, ws) || ys.size() != ws.size())
    return Status(ErrorCode::InvalidArgument, "gemm_decode_group takes 1..16 rows and 1.." +
                                                  std::to_string(gemm_detail::kGroupMax) +
                                                  " matrices of one K <= 2048 (a multiple of 8), got m " +
                                                  std::to_string(m) + ", " + std::to_string(ws.size()) + " matrices");
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  gemm_detail::GemmGroup group{};
  group.count = static_cast<int>(ws.size());
  constexpr int cols = gemm_detail::kGroupWarps * 8;
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
  }
  if (m <= 8) return gemm_detail::launch_group_rows<8>(group, stream);
  return gemm_detail::launch_group_rows<16>(group, stream);
}

Status gemm_decode_variant(int variant, const bf16* x, int64_t m, const DeviceMatrix& w, bf16* y_b16, float* y_f32,
                           cudaStream_t stream) {
  if (variant < 0 || variant >= gemm_detail::kVariants)
    return Status(ErrorCode::InvalidArgument, "decode variant " + std::to_string(variant) + " of " +
                                                  std::to_string(gemm_detail::kVariants));
  if (m < 1 || m > 16)
    return Status(ErrorCode::InvalidArgument, "decode variants take 1..16 rows, got " + std::to_string(m));
  if ((y_b16 == nullptr) == (y_f32 == nullptr) || w.cols % 8 != 0 || w.rows < 1 || w.rows > (1LL << 30) ||
      w.cols > (1LL << 24))
    return Status(ErrorCode::InvalidArgument, "decode variant: one output, K a multiple of 8, sizes in range");
  const uintptr_t y_address = y_f32 ? reinterpret_cast<uintptr_t>(y_f32) : reinterpret_cast<uintptr_t>(y_b16);
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0 || y_address % 8 != 0)
    return Status(ErrorCode::InvalidArgument, "decode variant: x and W 16-byte aligned, y 8-byte aligned");
  int sm_count = 132;
  {
    static std::once_flag once;
    static int device_sms = 0;
    std::call_once(once, [] {
      GemmEngine engine;  // sets the shared-memory opt-ins
      int device = 0;
      if (cudaGetDevice(&device) == cudaSuccess)
        cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, device);
      cudaGetLastError();
    });
    if (device_sms > 0) sm_count = device_sms;
  }
  gemm_detail::GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w.w),
                             w.bias, reinterpret_cast<__nv_bfloat16*>(y_b16), y_f32, static_cast<int>(m),
                             static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
  return gemm_detail::launch_variant(variant, args, sm_count, stream);
}

}  // namespace ls::cuda
