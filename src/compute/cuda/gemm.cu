// The batch-invariant bf16 GEMM: mma.sync m16n8k16 tensor cores, ldmatrix from swizzled shared memory, cp.async
// multi-stage pipelines. One reduction order for every m (the canonical order, a function of K alone): K above
// kUnslicedK is cut into slices of kSliceK; each slice is one fp32 accumulator fed with its 16-wide K steps in
// ascending order; the slice sums are added in slice order, ((s0 + s1) + s2) + ..., then the bias. The decode kernel (m <= 16) gives each slice to its own warp
// for bandwidth; the tile kernel walks the slices in turn with a second register set; both add alike.
#include <cuda_bf16.h>

#include <string>

#include "compute/cuda/kernels.h"

namespace ls::cuda {
namespace {

constexpr int kBlockK = 64;  // one 128-byte shared-memory row of bf16 per tile row; swizzled in 16-byte chunks
constexpr int kSliceK = 1024;     // K per slice of the canonical order (a multiple of kBlockK)
constexpr int kUnslicedK = 2048;  // K up to this is one slice
constexpr int kSliceTiles = kSliceK / kBlockK;

__host__ __device__ inline int slice_count(int k) { return k <= kUnslicedK ? 1 : (k + kSliceK - 1) / kSliceK; }

// A tile configuration: BM x BN outputs per CTA, WARPS_M x WARPS_N warps, STAGES tiles of K in flight.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
  static constexpr int MI = WM / 16, NI = WN / 8;              // mma tiles per warp
  static constexpr int STAGE_ELEMS = (BM + BN) * kBlockK;
  static constexpr int SMEM_BYTES = STAGES * STAGE_ELEMS * 2;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are whole 16x16 blocks");
};

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Byte offset of 16-byte chunk `chunk` of tile row `row` (XOR swizzle: ldmatrix reads 8 rows without bank conflicts).
__device__ __forceinline__ int swizzled(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

// 16 bytes global -> shared, zero-filled when `inside` is false (rows past m or N, K past the end).
__device__ __forceinline__ void copy_chunk(uint32_t dst, const void* src, bool inside) {
  const int bytes = inside ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void commit_group() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t address, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(address));
}

// D = A(16x16 bf16) * B(16x8 bf16) + D, fp32. Not volatile: a pure register op the scheduler may sink below the
// next step's ldmatrix (which stay in order behind the pipeline's waits).
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

struct GemmArgs {
  const __nv_bfloat16* x;  // [m, K]
  const __nv_bfloat16* w;  // [N, K]
  const float* bias;       // [N] or null
  __nv_bfloat16* y_b16;    // [m, N] or null
  float* y_f32;            // [m, N] or null
  int m, n, k;
  int reverse_k;  // test-only fault: walk K tiles backwards
};

__device__ __forceinline__ void ldmatrix_x2(uint32_t address, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(address));
}

// Writes one output pair (acc + bias, rounded once) at row r, columns c and c + 1 (when inside).
__device__ __forceinline__ void store_pair(const GemmArgs& args, int r, int c, float v0, float v1) {
  if (r >= args.m || c >= args.n) return;
  const bool second = c + 1 < args.n;
  if (args.bias) {
    v0 = __fadd_rn(v0, args.bias[c]);
    if (second) v1 = __fadd_rn(v1, args.bias[c + 1]);
  }
  const int64_t at = static_cast<int64_t>(r) * args.n + c;
  const bool pairs = (args.n & 1) == 0;
  if (args.y_f32) {
    if (pairs) {
      *reinterpret_cast<float2*>(args.y_f32 + at) = make_float2(v0, v1);
    } else {
      args.y_f32[at] = v0;
      if (second) args.y_f32[at + 1] = v1;
    }
  } else if (pairs) {
    *reinterpret_cast<__nv_bfloat162*>(args.y_b16 + at) = __floats2bfloat162_rn(v0, v1);
  } else {
    args.y_b16[at] = __float2bfloat16_rn(v0);
    if (second) args.y_b16[at + 1] = __float2bfloat16_rn(v1);
  }
}

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

template <class T, bool SLICED>
__global__ void __launch_bounds__(T::THREADS) gemm_kernel(GemmArgs args) {
  extern __shared__ __align__(128) unsigned char shared_raw[];
  __nv_bfloat16* shared = reinterpret_cast<__nv_bfloat16*>(shared_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
  const int row0 = blockIdx.y * T::BM, col0 = blockIdx.x * T::BN;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;

  float acc[T::MI][T::NI][4];
  float total[SLICED ? T::MI : 1][SLICED ? T::NI : 1][4];  // slice sums so far, in slice order
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  auto tile_at = [&](int step) { return args.reverse_k ? k_tiles - 1 - step : step; };
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < k_tiles) load_stage<T>(args, shared + s * T::STAGE_ELEMS, row0, col0, tile_at(s), tid);
    commit_group();
  }

  for (int step = 0; step < k_tiles; ++step) {
    wait_group<T::STAGES - 2>();
    __syncthreads();
    const int next = step + T::STAGES - 1;
    if (next < k_tiles) load_stage<T>(args, shared + (next % T::STAGES) * T::STAGE_ELEMS, row0, col0, tile_at(next), tid);
    commit_group();

    const uint32_t a_base = smem_address(shared + (step % T::STAGES) * T::STAGE_ELEMS);
    const uint32_t b_base = a_base + T::BM * 128;
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      uint32_t a[T::MI][4], b[T::NI][2];
#pragma unroll
      for (int i = 0; i < T::MI; ++i) {
        const int row = warp_m * T::WM + i * 16 + (lane & 15);
        ldmatrix_x4(a_base + swizzled(row, kk * 2 + (lane >> 4)), a[i][0], a[i][1], a[i][2], a[i][3]);
      }
#pragma unroll
      for (int j = 0; j < T::NI; j += 2) {
        const int row = warp_n * T::WN + j * 8 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(b_base + swizzled(row, kk * 2 + ((lane >> 3) & 1)), b[j][0], b[j][1], b[j + 1][0], b[j + 1][1]);
      }
#pragma unroll
      for (int i = 0; i < T::MI; ++i)
#pragma unroll
        for (int j = 0; j < T::NI; ++j) mma_bf16(acc[i][j], a[i], b[j]);
    }
    if constexpr (SLICED) {
      // End of a slice: fold its sum into the running total (the first slice is copied, not added to +0).
      if ((step + 1) % kSliceTiles == 0 || step + 1 == k_tiles) {
        const bool first = step < kSliceTiles;
#pragma unroll
        for (int i = 0; i < T::MI; ++i)
#pragma unroll
          for (int j = 0; j < T::NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              total[i][j][e] = first ? acc[i][j][e] : __fadd_rn(total[i][j][e], acc[i][j][e]);
              acc[i][j][e] = 0.0f;
            }
      }
    }
  }
  wait_group<0>();

  // Epilogue: c0,c1 at (lane/4, 2*(lane%4)+{0,1}); c2,c3 8 rows down.
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row0 + warp_m * T::WM + i * 16 + (lane >> 2) + half * 8;
        const int c = col0 + warp_n * T::WN + j * 8 + (lane & 3) * 2;
        if constexpr (SLICED)
          store_pair(args, r, c, total[i][j][half * 2], total[i][j][half * 2 + 1]);
        else
          store_pair(args, r, c, acc[i][j][half * 2], acc[i][j][half * 2 + 1]);
      }
}

// ---- decode kernel (m <= 16): every (8 columns, slice) item is one warp's own cp.async pipeline ----

constexpr int kDecodeWarps = 8;
constexpr int kDecodeStageBytes = (16 + 8) * 128;  // A rows [16, 64] then W rows [8, 64], swizzled

// Items of one CTA: `groups` column groups of 8 times `slices`; item = group * slices + slice.
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

template <class T>
Status launch(const GemmArgs& args, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  const dim3 grid((args.n + T::BN - 1) / T::BN, (args.m + T::BM - 1) / T::BM);
  // Tiles above 128x128 have no registers for a second set: valid() gives them unsliced K only.
  constexpr bool kCanSlice = T::BM * T::BN <= 128 * 128;
  if (!kCanSlice && slices > 1)
    return Status(ErrorCode::InvalidArgument, "gemm: a " + std::to_string(T::BM) + "x" + std::to_string(T::BN) +
                                                  " tile cannot add K = " + std::to_string(args.k) + " in slices");
  if (slices > 1)
    gemm_kernel<T, kCanSlice><<<grid, T::THREADS, T::SMEM_BYTES, stream>>>(args);
  else
    gemm_kernel<T, false><<<grid, T::THREADS, T::SMEM_BYTES, stream>>>(args);
  LS_CUDA_TRY_LAUNCH("gemm_kernel");
  return ok_status();
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

// Deep pipelines (one CTA per SM) when the CTAs fit one wave; else two CTAs per SM with 4 stages each.
Status launch_decode(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  const int groups = decode_groups(slices);
  const int ctas = (args.n + groups * 8 - 1) / (groups * 8);
  if (ctas <= sm_count) return launch_decode_stages<8>(args, slices, groups, ctas, stream);
  return launch_decode_stages<4>(args, slices, groups, ctas, stream);
}

// Up to 64 rows: 64x64 or 64x128 tiles. Prefill: 128x128 (two CTAs per SM unsliced), 128x256 or 256x128 (one
// slice only: no registers for a second set).
using Medium = Tile<64, 64, 2, 2, 4>;
using Medium128 = Tile<64, 128, 2, 4, 4>;
using Large = Tile<128, 128, 2, 4, 3>;
using LargeDeep = Tile<128, 128, 2, 4, 4>;
using Wide = Tile<128, 256, 2, 4, 3>;
using Tall = Tile<256, 128, 4, 2, 3>;
// Up to 16 rows, one slice: 16x128 tiles, 8 warps, 6 stages (measured at 91% of the read bandwidth on the
// 2048->65536 head in the first device run); pinnable only until the pinned test has passed on the device.
using Stream = Tile<16, 128, 1, 8, 6>;

enum class Choice { Decode, Medium, Medium128, Large, LargeDeep, Wide, Tall, Stream, Count };

// Whether a configuration computes the canonical order for (m, K): decode only up to 16 rows, the big tiles only
// for one slice.
bool valid(Choice choice, int64_t m, int64_t k) {
  if (choice == Choice::Decode) return m <= 16;
  if (choice == Choice::Stream) return m <= 16 && slice_count(static_cast<int>(k)) == 1;
  if (choice == Choice::Wide || choice == Choice::Tall) return slice_count(static_cast<int>(k)) == 1;
  return choice != Choice::Count;
}

Choice choose(int64_t m, int64_t n, int64_t k, int sm_count, int pinned) {
  if (pinned >= 0 && valid(static_cast<Choice>(pinned), m, k)) return static_cast<Choice>(pinned);
  if (m <= 16) return Choice::Decode;
  if (m <= 64) return n >= 128LL * sm_count ? Choice::Medium128 : Choice::Medium;
  // Sliced K (two register sets: one 128x128 CTA per SM): 64x64 tiles until 128x128 ones fill the SMs (measured on
  // the H200: 8192->2048 at m = 256 takes 116 us in 64x64 tiles, 222 us in 128x128).
  const int64_t large_ctas = ((m + 127) / 128) * ((n + 127) / 128);
  if (slice_count(static_cast<int>(k)) > 1 && large_ctas < sm_count) return Choice::Medium;
  const int64_t wide_ctas = ((m + 127) / 128) * ((n + 255) / 256);
  return valid(Choice::Wide, m, k) && wide_ctas >= 2LL * sm_count ? Choice::Wide : Choice::Large;
}

const char* choice_name(Choice choice) {
  switch (choice) {
    case Choice::Decode: return "decode 8 warps";
    case Choice::Medium: return "64x64x64 s4";
    case Choice::Medium128: return "64x128x64 s4";
    case Choice::Large: return "128x128x64 s3";
    case Choice::LargeDeep: return "128x128x64 s4";
    case Choice::Wide: return "128x256x64 s3";
    case Choice::Tall: return "256x128x64 s3";
    case Choice::Stream: return "16x128x64 s6";
    case Choice::Count: break;
  }
  return "?";
}

// Shared-memory opt-in for every kernel, once per engine (outside any graph capture).
template <class T>
void allow_shared() {
  cudaFuncSetAttribute(gemm_kernel<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES);
  if constexpr (T::BM * T::BN <= 128 * 128)
    cudaFuncSetAttribute(gemm_kernel<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES);
}

void allow_shared_all(int optin_bytes) {
  allow_shared<Medium>();
  allow_shared<Medium128>();
  allow_shared<Large>();
  allow_shared<LargeDeep>();
  allow_shared<Wide>();
  allow_shared<Tall>();
  allow_shared<Stream>();
  cudaFuncSetAttribute(gemm_decode_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(gemm_decode_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
}

}  // namespace

GemmEngine::GemmEngine() {
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) {
    int count = 0;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && count > 0)
      sm_count_ = count;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess && optin > 0)
      allow_shared_all(optin);
  }
  cudaGetLastError();  // no device: launches report it
}

const char* GemmEngine::tile_name(int64_t m, int64_t n, int64_t k) const {
  return choice_name(choose(m, n, k, sm_count_, pinned_tile_));
}

int GemmEngine::tile_count() { return static_cast<int>(Choice::Count); }

Status GemmEngine::gemm(const bf16* x, int64_t m, const DeviceMatrix& w, bf16* y_b16, float* y_f32,
                        cudaStream_t stream) const {
  if ((y_b16 == nullptr) == (y_f32 == nullptr))
    return Status(ErrorCode::InvalidArgument, "gemm needs exactly one output (bf16 or fp32)");
  if (w.cols % 8 != 0)
    return Status(ErrorCode::InvalidArgument, "gemm needs K a multiple of 8, got K = " + std::to_string(w.cols));
  if (m < 0 || m > (1LL << 20) || w.rows > (1LL << 30) || w.cols > (1LL << 24))
    return Status(ErrorCode::InvalidArgument, "gemm size out of range: m = " + std::to_string(m) +
                                                  ", N = " + std::to_string(w.rows) + ", K = " + std::to_string(w.cols));
  if (m == 0 || w.rows == 0) return ok_status();
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "gemm needs 16-byte aligned x and W");
  const uintptr_t y_address = y_f32 ? reinterpret_cast<uintptr_t>(y_f32) : reinterpret_cast<uintptr_t>(y_b16);
  if (w.rows % 2 == 0 && y_address % (y_f32 ? 8 : 4) != 0)
    return Status(ErrorCode::InvalidArgument, "gemm needs y aligned to two outputs when N is even (pairs are stored)");
  GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w.w), w.bias,
                reinterpret_cast<__nv_bfloat16*>(y_b16), y_f32, static_cast<int>(m), static_cast<int>(w.rows),
                static_cast<int>(w.cols), fault_reverse_k_ && m > 64 ? 1 : 0};
  switch (choose(m, w.rows, w.cols, sm_count_, pinned_tile_)) {
    case Choice::Decode: return launch_decode(args, sm_count_, stream);
    case Choice::Medium: return launch<Medium>(args, stream);
    case Choice::Medium128: return launch<Medium128>(args, stream);
    case Choice::Large: return launch<Large>(args, stream);
    case Choice::LargeDeep: return launch<LargeDeep>(args, stream);
    case Choice::Wide: return launch<Wide>(args, stream);
    case Choice::Tall: return launch<Tall>(args, stream);
    case Choice::Stream: return launch<Stream>(args, stream);
    case Choice::Count: break;
  }
  return ok_status();
}

}  // namespace ls::cuda
