// The drafter's few-row GEMMs (rows <= 16: one request's block rows) on the tensor cores, streaming W once.
//
// y [rows, n] = x [rows, k] W^T with W [n, k] bf16 (a checkpoint's [out, in]). A CTA owns 16 output columns (W rows),
// its warps split K in pieces of 128; each lane loads 16 bytes of two W rows per 32-wide K step straight into the
// mma's A registers: the K order inside a step is permuted (lane t of a quad holds k = 8t .. 8t+7, fed to two
// m16n8k16 mmas), and x's B registers are loaded with the same permutation, so the products are the same and only
// the fp32 summation order differs from cuBLAS (the drafter's GEMMs need not be batch invariant: drafts change speed,
// never tokens). The warps' sums meet in shared memory in warp order, then the epilogue: bf16, fp32, or SwiGLU of
// the stacked gate/up output (the bits of gemm + swiglu_stacked).
// Every W load is issued before the kernel waits for the previous one (programmatic dependent launch, sm_90): W is
// never written, x is read only after the wait, and each warp issues its next piece's W loads before this piece's
// products (session 15, batch s15A: graphed block pass 0.3692 -> 0.3636 ms at 1 stream; a K split over CTAs lost).
#include "compute/cuda/cuda_util.h"
#include "compute/cuda/features.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/device_steps.cuh"

namespace ls::dspark::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kStep = 32;             // K per step: two m16n8k16 mmas
constexpr int kStepsPerPiece = 4;     // K steps per warp piece (128 values of K)
constexpr int kPiece = kStep * kStepsPerPiece;

// acc [16 W rows, 8 x rows] += A [16, 16] (W) x B [16, 8] (x^T), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma(float (&acc)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// W: read-only for the whole run (the non-coherent path).
__device__ __forceinline__ uint4 load16(const bf16_t* address, bool inside) {
  return inside ? __ldg(reinterpret_cast<const uint4*>(address)) : make_uint4(0, 0, 0, 0);
}

// x: written by the kernel before (which may still have been running when this one started), read through L2 with
// a coherent load: a read-only (nc) load may be scheduled above griddepcontrol.wait by ptxas (seen in batch A's
// SASS: the first x load before ACQBULK), reading x before the previous kernel wrote it.
__device__ __forceinline__ uint4 load16_fresh(const bf16_t* address, bool inside) {
  return inside ? __ldcg(reinterpret_cast<const uint4*>(address)) : make_uint4(0, 0, 0, 0);
}

// A warp's W for one piece: kStepsPerPiece steps of 16 bytes of its two W rows (zeros past K or past the rows).
struct PieceLoads {
  uint4 a[kStepsPerPiece], b[kStepsPerPiece];
};

__device__ __forceinline__ void load_piece(PieceLoads& loads, const bf16_t* wa, const bf16_t* wb, bool a_inside,
                                           bool b_inside, int64_t piece, int64_t k_total, int t) {
#pragma unroll
  for (int s = 0; s < kStepsPerPiece; ++s) {
    const int64_t k = piece * kPiece + s * kStep + 8 * t;
    loads.a[s] = load16(wa + k, a_inside && k < k_total);
    loads.b[s] = load16(wb + k, b_inside && k < k_total);
  }
}

// NT x-row tiles of 8 (rows <= 8 NT); WARPS warps split K in pieces. W row r of the CTA's tile: output column
// first + r, or for SwiGLU r < 8 the gate column c0 + r and r >= 8 the up column F + c0 + r - 8.
template <int NT, int WARPS, SkinnyEpilogue EPILOGUE>
__global__ void __launch_bounds__(WARPS * kWarp) skinny_kernel(SkinnyGemm args) {
  __shared__ float partial[WARPS][8 * NT][16];  // [warp][x row][W row of the CTA's tile]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int g = lane / 4, t = lane % 4;
  const bool swiglu = EPILOGUE == SkinnyEpilogue::Swiglu;
  const int64_t half = args.n / 2;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (swiglu ? 8 : 16);
  const int64_t row_a = first + g;  // W rows of this lane
  const int64_t row_b = swiglu ? half + first + g : first + g + 8;
  const bool a_inside = swiglu ? first + g < half : row_a < args.n;
  const bool b_inside = swiglu ? first + g < half : row_b < args.n;
  const bf16_t* wa = args.w + (a_inside ? row_a : 0) * args.k;
  const bf16_t* wb = args.w + (b_inside ? row_b : 0) * args.k;
  const int64_t pieces = (args.k + kPiece - 1) / kPiece;
  let_next_kernel_start();
  float acc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  bool waited = false;
  PieceLoads loads;
  int64_t piece = warp;
  if (piece < pieces) load_piece(loads, wa, wb, a_inside, b_inside, piece, args.k, t);
  for (; piece < pieces; piece += WARPS) {
    // The next piece's loads go out before this piece's products (the same products in the same order).
    const int64_t next = piece + WARPS;
    PieceLoads ahead;
    if (next < pieces) load_piece(ahead, wa, wb, a_inside, b_inside, next, args.k, t);
    if (!waited) {
      wait_for_previous_kernel();
      waited = true;
    }
#pragma unroll
    for (int s = 0; s < kStepsPerPiece; ++s) {
      const int64_t k = piece * kPiece + s * kStep + 8 * t;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int x_row = 8 * n + g;
        const uint4 x = load16_fresh(args.x + static_cast<int64_t>(x_row < args.rows ? x_row : 0) * args.k + k,
                                     x_row < args.rows && k < args.k);
        mma(acc[n], loads.a[s].x, loads.b[s].x, loads.a[s].y, loads.b[s].y, x.x, x.y);
        mma(acc[n], loads.a[s].z, loads.b[s].z, loads.a[s].w, loads.b[s].w, x.z, x.w);
      }
    }
    if (next < pieces && !args.planted_stale_piece) loads = ahead;
  }
  if (!waited) wait_for_previous_kernel();
  // acc[n]: c0 = (W row g, x row 8n + 2t), c1 = (g, 8n + 2t + 1), c2 = (g + 8, 8n + 2t), c3 = (g + 8, 8n + 2t + 1).
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    partial[warp][8 * n + 2 * t][g] = acc[n][0];
    partial[warp][8 * n + 2 * t + 1][g] = acc[n][1];
    partial[warp][8 * n + 2 * t][g + 8] = acc[n][2];
    partial[warp][8 * n + 2 * t + 1][g + 8] = acc[n][3];
  }
  __syncthreads();
  const int cols = swiglu ? 8 : 16;  // output columns of the CTA
  const int outputs = 8 * NT * cols;
  for (int o = threadIdx.x; o < outputs; o += blockDim.x) {
    const int r = o / cols, c = o % cols;
    if (r >= args.rows) continue;
    float sum = partial[0][r][c];
    for (int w = 1; w < WARPS; ++w) sum += partial[w][r][c];
    const int64_t column = first + c;
    if constexpr (EPILOGUE == SkinnyEpilogue::Swiglu) {
      if (column >= half) continue;
      float up = partial[0][r][c + 8];
      for (int w = 1; w < WARPS; ++w) up += partial[w][r][c + 8];
      static_cast<bf16_t*>(args.y)[r * args.ldy + column] =
          swiglu_value(__bfloat162float(__float2bfloat16_rn(sum)), __bfloat162float(__float2bfloat16_rn(up)));
    } else if constexpr (EPILOGUE == SkinnyEpilogue::F32) {
      if (column < args.n) static_cast<float*>(args.y)[r * args.ldy + column] = sum;
    } else {
      if (column < args.n) static_cast<bf16_t*>(args.y)[r * args.ldy + column] = __float2bfloat16_rn(sum);
    }
  }
}

template <int NT, int WARPS, SkinnyEpilogue EPILOGUE>
Status launch(const SkinnyGemm& args, int64_t ctas, bool programmatic, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned int>(ctas));
  config.blockDim = dim3(WARPS * kWarp);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic && ls::cuda::cuda_features().pdl ? 1 : 0;  // not on the portable sm_80 path
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, skinny_kernel<NT, WARPS, EPILOGUE>, args));
  return ok_status();
}

// Few column tiles (o_proj, down_proj, q/k/v): 16 warps a CTA, so each SM still keeps 16 warps' loads in flight.
template <int NT, SkinnyEpilogue EPILOGUE>
Status launch_warps(const SkinnyGemm& args, int64_t ctas, bool programmatic, cudaStream_t stream) {
  if (ctas <= 512) return launch<NT, 16, EPILOGUE>(args, ctas, programmatic, stream);
  return launch<NT, 8, EPILOGUE>(args, ctas, programmatic, stream);
}

template <SkinnyEpilogue EPILOGUE>
Status launch_tiles(const SkinnyGemm& args, int64_t ctas, bool programmatic, cudaStream_t stream) {
  if (args.rows <= 8) return launch_warps<1, EPILOGUE>(args, ctas, programmatic, stream);
  return launch_warps<2, EPILOGUE>(args, ctas, programmatic, stream);
}

}  // namespace

Status skinny_gemm(const SkinnyGemm& args, bool programmatic, cudaStream_t stream) {
  if (args.rows == 0) return ok_status();
  if (!skinny_gemm_supported(args.rows, args.k) || (args.epilogue == SkinnyEpilogue::Swiglu && args.n % 2 != 0)) {
    return Status(ErrorCode::InvalidArgument,
                  "skinny_gemm takes 1.." + std::to_string(kSkinnyMaxRows) +
                      " rows and K a multiple of 8 (SwiGLU: even n), not " + std::to_string(args.rows) + " rows, K " +
                      std::to_string(args.k) + ", n " + std::to_string(args.n));
  }
  switch (args.epilogue) {
    case SkinnyEpilogue::Swiglu:
      return launch_tiles<SkinnyEpilogue::Swiglu>(args, (args.n / 2 + 7) / 8, programmatic, stream);
    case SkinnyEpilogue::F32:
      return launch_tiles<SkinnyEpilogue::F32>(args, (args.n + 15) / 16, programmatic, stream);
    case SkinnyEpilogue::Bf16:
      break;
  }
  return launch_tiles<SkinnyEpilogue::Bf16>(args, (args.n + 15) / 16, programmatic, stream);
}

}  // namespace ls::dspark::cuda
