// Device pieces shared by the GEMM kernels (gemm.cu, gemm_decode.cu): the canonical-order constants, tile shapes,
// cp.async / ldmatrix / mma wrappers and the one-rounding output store. Included by CUDA sources only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "compute/cuda/kernels.h"

namespace ls::cuda::gemm_detail {

constexpr int kBlockK = 64;  // one 128-byte shared-memory row of bf16 per tile row; swizzled in 16-byte chunks
constexpr int kSliceK = 1024;     // K per slice of the canonical order (a multiple of kBlockK)
constexpr int kUnslicedK = 2048;  // K up to this is one slice
constexpr int kSliceTiles = kSliceK / kBlockK;
constexpr int kMaxClusterSlices = 8;  // split mode: one CTA per slice, at most the portable cluster size

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

// One K tile of a warp's MI x NI mma tile (T: BM, WM, WN, MI, NI): the four 16-wide steps in ascending K, the
// canonical chain, with fragments from the swizzled stage (A rows at a_base, B rows at b_base).
template <class T>
__device__ __forceinline__ void mma_k_tile(uint32_t a_base, uint32_t b_base, int warp_m, int warp_n, int lane,
                                           float (&acc)[T::MI][T::NI][4]) {
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

// The decode kernel (m <= 16, gemm_decode.cu; 17..decode_rows_max() rows through the streaming kernel,
// set_decode_rows): launch, and its shared-memory opt-in (once, outside capture).
Status launch_decode(const GemmArgs& args, int sm_count, cudaStream_t stream);
// Whether a launch of 17..32 rows runs on the pipeline decode GEMM (set_decode_pipe_rows32; gemm_decode_pipe.cu).
bool pipe_takes_window(const GemmArgs& args);
int decode_rows_max();
void allow_decode_shared(int optin_bytes);

}  // namespace ls::cuda::gemm_detail
