// The staged decode GEMM (m <= 16, one slice: K <= 2048): each warp owns TILES column groups of 8 and copies their
// whole weight share [8 TILES, K] into shared memory before the programmatic wait (cp.async, one commit group per 256
// of K), so the weights stream while the kernel before it still runs; after the wait the CTA copies x [m, K] once,
// and each warp runs its chains from shared memory, starting on a K group as soon as it has landed. Fragments come
// from plain 32-bit shared loads of unswizzled rows padded by 16 bytes (bank-conflict free): the values ldmatrix
// gives the other decode kernels, fed to the same mma steps in the same order, so each output is the canonical chain
// of gemm_device.cuh (64-wide K tiles, the tail zero-filled) and the bits are the other kernels'.
#include <cstdint>

#include "compute/cuda/gemm_decode.cuh"

namespace ls::cuda::gemm_detail {
namespace {

constexpr int kGroupK = 256;                    // K per cp.async commit group
constexpr int kGroups = kUnslicedK / kGroupK;   // groups for the longest one-slice K (empty ones past K)
constexpr int kStepsPerGroup = kGroupK / 16;    // mma k16 steps per group

// Bytes per staged row: K rounded up to whole 64-wide tiles, plus 16 bytes of padding (rows r and r + 1 start 4
// banks apart, so the 8 rows of a fragment load hit 32 distinct banks).
__host__ __device__ inline int staged_pitch(int k) { return (k + kBlockK - 1) / kBlockK * kBlockK * 2 + 16; }

// Waits until at most `left` commit groups are still in flight; `left` is a constant after unrolling. The memory
// clobber keeps the shared loads after it.
__device__ __forceinline__ void wait_groups_left(int left) {
  switch (left) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
  }
}

__device__ __forceinline__ uint32_t shared_word(const unsigned char* p) { return *reinterpret_cast<const uint32_t*>(p); }

// One CTA's work: warp w of CTA `block` owns output columns [(block WARPS + w) 8 TILES, + 8 TILES).
template <int WARPS, int TILES, int A_ROWS>
__device__ __forceinline__ void staged_body(const GemmArgs& args, int block) {
  static_assert(kGroups <= 8, "wait_groups_left covers 8 groups");
  extern __shared__ __align__(128) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pitch = staged_pitch(args.k);
  const int k_pad = (pitch - 16) / 2;  // K in whole 64-wide tiles
  const int steps = k_pad / 16;
  unsigned char* w_rows = shared_raw + warp * 8 * TILES * pitch;  // [8 TILES, k_pad] bf16, this warp's columns
  unsigned char* x_rows = shared_raw + WARPS * 8 * TILES * pitch;  // [m, k_pad] bf16, shared by the CTA
  const int c_first = (block * WARPS + warp) * 8 * TILES;
  let_next_kernel_start();

  // The weights, group by group (8 TILES rows x 32 chunks of 16 bytes each); zero past N and past K.
  constexpr int kChunksPerRow = kGroupK / 8;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int k0 = g * kGroupK;
    if (k0 < k_pad) {
#pragma unroll
      for (int i = 0; i < 8 * TILES * kChunksPerRow / 32; ++i) {
        const int index = lane + 32 * i;
        const int row = index / kChunksPerRow, k = k0 + (index % kChunksPerRow) * 8;
        if (k < k_pad) {
          const int c = c_first + row;
          const bool inside = c < args.n && k < args.k;
          copy_chunk(smem_address(w_rows + row * pitch + k * 2),
                     args.w + (inside ? static_cast<int64_t>(c) * args.k + k : 0), inside);
        }
      }
    }
    commit_group();
  }

  // x is written by the kernel before: wait for it, then copy rows < m once for the CTA (zero past K).
  wait_for_previous_kernel();
  const int x_chunks = k_pad / 8;
  for (int index = threadIdx.x; index < args.m * x_chunks; index += 32 * WARPS) {
    const int row = index / x_chunks, k = (index % x_chunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (k < args.k) v = *reinterpret_cast<const uint4*>(args.x + static_cast<int64_t>(row) * args.k + k);
    *reinterpret_cast<uint4*>(x_rows + row * pitch + k * 2) = v;
  }
  __syncthreads();

  // The chains: fragment (row r = lane / 4, k pair q = lane % 4) of A rows r and r + 8, B column r of each tile.
  const int r = lane >> 2, q = lane & 3;
  const bool lo_inside = r < args.m, hi_inside = r + 8 < args.m;
  // Rows past m are never read (their fragments are zero registers); the addresses stay inside x_rows anyway.
  const unsigned char* a_lo = x_rows + (lo_inside ? r : 0) * pitch + q * 4;
  const unsigned char* a_hi = x_rows + (hi_inside ? r + 8 : 0) * pitch + q * 4;
  const unsigned char* b_row = w_rows + r * pitch + q * 4;
  float acc[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    if (g * kStepsPerGroup >= steps) break;
    wait_groups_left(kGroups - 1 - g);
    __syncwarp();
#pragma unroll
    for (int s = 0; s < kStepsPerGroup; ++s) {
      const int step = g * kStepsPerGroup + s;
      if (step < steps) {
        const int at = step * 32;  // byte offset of k = 16 step
        uint32_t a[4];
        a[0] = lo_inside ? shared_word(a_lo + at) : 0u;
        a[2] = lo_inside ? shared_word(a_lo + at + 16) : 0u;
        a[1] = A_ROWS == 16 && hi_inside ? shared_word(a_hi + at) : 0u;
        a[3] = A_ROWS == 16 && hi_inside ? shared_word(a_hi + at + 16) : 0u;
#pragma unroll
        for (int j = 0; j < TILES; ++j) {
          const uint32_t b[2] = {shared_word(b_row + j * 8 * pitch + at), shared_word(b_row + j * 8 * pitch + at + 16)};
          mma_bf16(acc[j], a, b);
        }
      }
    }
  }
  wait_groups_left(0);  // nothing may be left in flight at exit

#pragma unroll
  for (int j = 0; j < TILES; ++j) {
    const int c = c_first + j * 8 + q * 2;
    store_pair(args, r, c, acc[j][0], acc[j][1]);
    if constexpr (A_ROWS == 16) store_pair(args, r + 8, c, acc[j][2], acc[j][3]);
  }
}

template <int WARPS, int TILES, int A_ROWS>
__global__ void __launch_bounds__(32 * WARPS) decode_staged_kernel(GemmArgs args) {
  staged_body<WARPS, TILES, A_ROWS>(args, blockIdx.x);
}

int optin_shared_bytes = 0;  // the device's opt-in limit, set by allow_staged_shared

template <int WARPS, int TILES, int A_ROWS>
Status launch_staged_rows(const GemmArgs& args, int sm_count, int fallback, cudaStream_t stream) {
  const int pitch = staged_pitch(args.k);
  const int smem = (WARPS * 8 * TILES + args.m) * pitch;
  if (smem > optin_shared_bytes) return launch_stream_variant(fallback, args, sm_count, stream);
  const int cols = WARPS * 8 * TILES;
  const int ctas = (args.n + cols - 1) / cols;
  return launch_programmatic(decode_staged_kernel<WARPS, TILES, A_ROWS>, ctas, 32 * WARPS, smem, stream, args);
}

template <int WARPS, int TILES>
Status launch_staged_config(const GemmArgs& args, int sm_count, int fallback, cudaStream_t stream) {
  if (args.m <= 8) return launch_staged_rows<WARPS, TILES, 8>(args, sm_count, fallback, stream);
  return launch_staged_rows<WARPS, TILES, 16>(args, sm_count, fallback, stream);
}

template <int WARPS, int TILES>
void allow_staged_config_shared(int optin_bytes) {
  cudaFuncSetAttribute(decode_staged_kernel<WARPS, TILES, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_staged_kernel<WARPS, TILES, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
}

}  // namespace

const char* const kStagedNames[kStagedConfigs] = {"staged 1w 8c", "staged 2w 8c", "staged 1w 16c", "staged 2w 16c",
                                                  "staged 4w 8c"};

Status launch_staged(int config, const GemmArgs& args, int sm_count, int fallback, cudaStream_t stream) {
  if (slice_count(args.k) > 1 || args.m > 16) return launch_stream_variant(fallback, args, sm_count, stream);
  switch (config) {
    case 0: return launch_staged_config<1, 1>(args, sm_count, fallback, stream);
    case 1: return launch_staged_config<2, 1>(args, sm_count, fallback, stream);
    case 2: return launch_staged_config<1, 2>(args, sm_count, fallback, stream);
    case 3: return launch_staged_config<2, 2>(args, sm_count, fallback, stream);
    default: return launch_staged_config<4, 1>(args, sm_count, fallback, stream);
  }
}

void allow_staged_shared(int optin_bytes) {
  optin_shared_bytes = optin_bytes;
  allow_staged_config_shared<1, 1>(optin_bytes);
  allow_staged_config_shared<2, 1>(optin_bytes);
  allow_staged_config_shared<1, 2>(optin_bytes);
  allow_staged_config_shared<2, 2>(optin_bytes);
  allow_staged_config_shared<4, 1>(optin_bytes);
}

}  // namespace ls::cuda::gemm_detail
