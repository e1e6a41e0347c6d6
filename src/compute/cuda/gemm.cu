// The batch-invariant bf16 GEMM: mma.sync m16n8k16 tensor cores, ldmatrix from swizzled shared memory, a cp.async
// multi-stage pipeline. Every output is one fp32 accumulator walked over K in ascending 16-wide steps in every tile
// configuration, so the tile shape chosen for m (over M and N only) never changes a row's bits.
#include <cuda_bf16.h>

#include <string>

#include "compute/cuda/kernels.h"

namespace ls::cuda {
namespace {

constexpr int kBlockK = 64;  // one 128-byte shared-memory row of bf16 per tile row; swizzled in 16-byte chunks

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

// D = A(16x16 bf16) * B(16x8 bf16) + D, fp32.
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
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

template <class T>
__global__ void __launch_bounds__(T::THREADS) gemm_kernel(GemmArgs args) {
  extern __shared__ __align__(128) unsigned char shared_raw[];
  __nv_bfloat16* shared = reinterpret_cast<__nv_bfloat16*>(shared_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
  const int row0 = blockIdx.y * T::BM, col0 = blockIdx.x * T::BN;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;

  float acc[T::MI][T::NI][4];
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
  }
  wait_group<0>();

  // Epilogue: acc + bias, one rounding to bf16 or fp32 out. c0,c1 at (lane/4, 2*(lane%4)+{0,1}); c2,c3 8 rows down.
  const bool pairs = (args.n & 1) == 0;
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row0 + warp_m * T::WM + i * 16 + (lane >> 2) + half * 8;
        const int c = col0 + warp_n * T::WN + j * 8 + (lane & 3) * 2;
        if (r >= args.m || c >= args.n) continue;
        float v0 = acc[i][j][half * 2], v1 = acc[i][j][half * 2 + 1];
        const bool second = c + 1 < args.n;
        if (args.bias) {
          v0 = __fadd_rn(v0, args.bias[c]);
          if (second) v1 = __fadd_rn(v1, args.bias[c + 1]);
        }
        const int64_t at = static_cast<int64_t>(r) * args.n + c;
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
}

template <class T>
Status launch(const GemmArgs& args, cudaStream_t stream) {
  static bool configured = false;  // per instantiation; the attribute is per-device-function
  if (!configured) {
    LS_CUDA_TRY(cudaFuncSetAttribute(gemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES));
    configured = true;
  }
  const dim3 grid((args.n + T::BN - 1) / T::BN, (args.m + T::BM - 1) / T::BM);
  gemm_kernel<T><<<grid, T::THREADS, T::SMEM_BYTES, stream>>>(args);
  LS_CUDA_TRY_LAUNCH("gemm_kernel");
  return ok_status();
}

// Decode / verify rows (m <= 16): one 16-row tile, N split finely so every SM streams weights, deep pipelines.
using Small16 = Tile<16, 16, 1, 1, 16>;
using Small32 = Tile<16, 32, 1, 2, 12>;
using Small64 = Tile<16, 64, 1, 4, 8>;
using Small128 = Tile<16, 128, 1, 8, 6>;
// Up to 64 rows: 64x64 tiles.
using Medium = Tile<64, 64, 2, 2, 4>;
using Medium128 = Tile<64, 128, 2, 4, 4>;
// Prefill: 128x128 (two CTAs per SM) or 128x256 tiles.
using Large = Tile<128, 128, 2, 4, 3>;
using Wide = Tile<128, 256, 2, 4, 3>;

enum class Choice { Small16, Small32, Small64, Small128, Medium, Medium128, Large, Wide };

Choice choose(int64_t m, int64_t n, int sm_count) {
  if (m <= 16) {
    // The widest column tile that still gives about one CTA per SM or more.
    if (n >= 128LL * sm_count) return Choice::Small128;
    if (n >= 64LL * sm_count) return Choice::Small64;
    if (n >= 32LL * sm_count) return Choice::Small32;
    return Choice::Small16;
  }
  if (m <= 64) return n >= 128LL * sm_count ? Choice::Medium128 : Choice::Medium;
  const int64_t wide_ctas = ((m + 127) / 128) * ((n + 255) / 256);
  return wide_ctas >= 2LL * sm_count ? Choice::Wide : Choice::Large;
}

const char* choice_name(Choice choice) {
  switch (choice) {
    case Choice::Small16: return "16x16x64 s16";
    case Choice::Small32: return "16x32x64 s12";
    case Choice::Small64: return "16x64x64 s8";
    case Choice::Small128: return "16x128x64 s6";
    case Choice::Medium: return "64x64x64 s4";
    case Choice::Medium128: return "64x128x64 s4";
    case Choice::Large: return "128x128x64 s3";
    case Choice::Wide: return "128x256x64 s3";
  }
  return "?";
}

}  // namespace

GemmEngine::GemmEngine() {
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) {
    int count = 0;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && count > 0)
      sm_count_ = count;
  }
  cudaGetLastError();
}

const char* GemmEngine::tile_name(int64_t m, int64_t n) const { return choice_name(choose(m, n, sm_count_)); }

Status GemmEngine::gemm(const bf16* x, int64_t m, const DeviceMatrix& w, bf16* y_b16, float* y_f32,
                        cudaStream_t stream) const {
  if ((y_b16 == nullptr) == (y_f32 == nullptr))
    return Status(ErrorCode::InvalidArgument, "gemm needs exactly one output (bf16 or fp32)");
  if (w.cols % 8 != 0)
    return Status(ErrorCode::InvalidArgument, "gemm needs K a multiple of 8, got K = " + std::to_string(w.cols));
  if (m < 0 || m > (1LL << 30) || w.rows > (1LL << 30) || w.cols > (1LL << 30))
    return Status(ErrorCode::InvalidArgument, "gemm size out of range: m = " + std::to_string(m) +
                                                  ", N = " + std::to_string(w.rows) + ", K = " + std::to_string(w.cols));
  if (m == 0 || w.rows == 0) return ok_status();
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "gemm needs 16-byte aligned x and W");
  GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w.w), w.bias,
                reinterpret_cast<__nv_bfloat16*>(y_b16), y_f32, static_cast<int>(m), static_cast<int>(w.rows),
                static_cast<int>(w.cols), fault_reverse_k_ && m > 64 ? 1 : 0};
  switch (choose(m, w.rows, sm_count_)) {
    case Choice::Small16: return launch<Small16>(args, stream);
    case Choice::Small32: return launch<Small32>(args, stream);
    case Choice::Small64: return launch<Small64>(args, stream);
    case Choice::Small128: return launch<Small128>(args, stream);
    case Choice::Medium: return launch<Medium>(args, stream);
    case Choice::Medium128: return launch<Medium128>(args, stream);
    case Choice::Large: return launch<Large>(args, stream);
    case Choice::Wide: return launch<Wide>(args, stream);
  }
  return ok_status();
}

}  // namespace ls::cuda
