// The decode GEMM kernel (m <= 16): every (8 columns, slice) item is one warp's own cp.async pipeline; the slice
// sums meet in shared memory and are added in slice order (the canonical order of gemm_device.cuh).
#include "compute/cuda/gemm_device.cuh"

namespace ls::cuda::gemm_detail {
namespace {

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

// Column groups of 8 per decode CTA: enough that the CTA's 8 warps each get an item.
int decode_groups(int slices) { return slices >= kDecodeWarps ? 1 : kDecodeWarps / slices; }

template <int STAGES>
Status launch_decode_stages(const GemmArgs& args, int slices, int groups, int ctas, cudaStream_t stream) {
  const int smem = kDecodeWarps * STAGES * kDecodeStageBytes + slices * 16 * groups * 8 * static_cast<int>(sizeof(float));
  gemm_decode_kernel<STAGES><<<ctas, 32 * kDecodeWarps, smem, stream>>>(args, slices, groups);
  LS_CUDA_TRY_LAUNCH("gemm_decode_kernel");
  return ok_status();
}

}  // namespace

// Deep pipelines (one CTA per SM) when the CTAs fit one wave; else two CTAs per SM with 4 stages each.
Status launch_decode(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  const int groups = decode_groups(slices);
  const int ctas = (args.n + groups * 8 - 1) / (groups * 8);
  if (ctas <= sm_count) return launch_decode_stages<8>(args, slices, groups, ctas, stream);
  return launch_decode_stages<4>(args, slices, groups, ctas, stream);
}

void allow_decode_shared(int optin_bytes) {
  cudaFuncSetAttribute(gemm_decode_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(gemm_decode_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
}

}  // namespace ls::cuda::gemm_detail
