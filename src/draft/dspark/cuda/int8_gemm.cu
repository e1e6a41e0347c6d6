// The drafter's int8 GEMM of few rows (int8_gemm.h): codes streamed once, widened to bf16 in registers, mma.sync.
//
// A column tile is 16 x MT output columns (W rows; SwiGLU: 8 x MT gate columns and the same up columns); a CTA's
// WARPS warps split K in pieces of 128 or 64 (kSteps), and a CTA takes every gridDim.x-th tile. A warp's next piece
// (codes, then x once past the wait; across tiles too) is loaded before this piece's products, so neither the codes
// nor x wait on the step that uses them. Each lane loads 16 bytes (16 codes) of each of its W rows per 64-wide K step
// straight into registers; lane t of a quad holds k = 16t .. 16t+15, which feed four m16n8k16 mmas (mma m takes k
// 16t + 4m .. 16t + 4m + 3), and x's B registers are loaded with the same permutation, so every product is code x x
// and only the fp32 order of the sums is the kernel's own. A code c is stored as the byte c + 128; the fp32 bits
// 0x4B0000bb are 2^23 + byte, less 2^23 + 128 is c exactly, and its upper 16 bits are bf16(c) exactly (c has <= 8
// significant bits). The warps' sums meet in shared memory in warp order; the epilogue scales each column and writes
// bf16, fp32 or SwiGLU. Every code load is issued before the kernel waits for the previous one (programmatic
// dependent launch): codes and scales are never written, x is read only after the wait (through L2, coherent: see
// skinny_gemm.cu).
#include <algorithm>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/features.h"
#include "compute/cuda/gemm_device.cuh"
#include "draft/dspark/cuda/device_steps.cuh"
#include "draft/dspark/cuda/int8_gemm.h"

namespace ls::dspark::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kStep = 64;   // K per step: four m16n8k16 mmas
constexpr uint32_t kZeroCodes = 0x80808080u;  // four codes of 0
// Steps a warp's piece: two where a piece's codes and x (loaded one piece ahead together) fit few registers, else one.
template <int MT, int NT>
constexpr int kSteps = MT * (1 + NT) <= 2 ? 2 : 1;
// CTAs an SM must hold (registers <= 128 a thread: 16 warps an SM) where the tiles leave that room; the automatic
// shape's residency rule (int8_gemm_shape) counts on it.
constexpr int min_ctas(int mt, int nt, int warps) { return mt * (1 + nt) <= 6 ? 16 / warps : 1; }
// The partials' static shared memory: two buffers of WARPS x 8 NT x 16 MT floats within 48 KB.
constexpr bool partials_fit(int mt, int nt, int warps) { return 2 * warps * 8 * nt * 16 * mt * 4 <= 48 * 1024; }

__device__ __forceinline__ uint4 load_codes(const uint8_t* address, bool inside) {
  return inside ? __ldg(reinterpret_cast<const uint4*>(address)) : make_uint4(kZeroCodes, kZeroCodes, kZeroCodes,
                                                                               kZeroCodes);
}

// x through L2 only (coherent), or (X_L1) through L1 as well: a CTA's x is read again by the next CTAs an SM runs.
// Both are ordinary loads after the programmatic wait (never the non-coherent path, which ptxas may hoist above it).
template <bool X_L1>
__device__ __forceinline__ uint4 load_x(const bf16_t* address, bool inside) {
  if (!inside) return make_uint4(0, 0, 0, 0);
  if constexpr (X_L1) return __ldca(reinterpret_cast<const uint4*>(address));
  return __ldcg(reinterpret_cast<const uint4*>(address));
}

// Four biased codes -> two bf16 pairs (codes 0, 1 and 2, 3; the lower k in the lower half).
__device__ __forceinline__ void widen4(uint32_t word, uint32_t& low, uint32_t& high) {
  constexpr uint32_t kMagic = 0x4B000000u;  // 2^23
  constexpr float kOffset = 8388736.0f;     // 2^23 + 128
  const float f0 = __uint_as_float(__byte_perm(word, kMagic, 0x7650)) - kOffset;
  const float f1 = __uint_as_float(__byte_perm(word, kMagic, 0x7651)) - kOffset;
  const float f2 = __uint_as_float(__byte_perm(word, kMagic, 0x7652)) - kOffset;
  const float f3 = __uint_as_float(__byte_perm(word, kMagic, 0x7653)) - kOffset;
  low = __byte_perm(__float_as_uint(f0), __float_as_uint(f1), 0x7632);
  high = __byte_perm(__float_as_uint(f2), __float_as_uint(f3), 0x7632);
}

// 16 codes (k0 .. k0+15) -> 8 bf16 pairs: pair j holds k0 + 2j, k0 + 2j + 1.
__device__ __forceinline__ void widen16(const uint4& codes, uint32_t (&pairs)[8]) {
  widen4(codes.x, pairs[0], pairs[1]);
  widen4(codes.y, pairs[2], pairs[3]);
  widen4(codes.z, pairs[4], pairs[5]);
  widen4(codes.w, pairs[6], pairs[7]);
}

// A warp's piece in registers: its W rows' codes and its x values (16 of each x tile's row a step, two uint4).
template <int MT, int NT>
struct PieceCodes {
  static constexpr int S = kSteps<MT, NT>;
  uint4 a[MT][S], b[MT][S];  // rows g and g + 8 of each W tile
  uint4 x[NT][S][2];         // x row 8 n + g, k .. k + 15
};

// The codes of `piece` (never written: loaded before the programmatic wait too).
template <int MT, int NT>
__device__ __forceinline__ void load_piece_codes(PieceCodes<MT, NT>& loads, const uint8_t* const (&wa)[MT],
                                                 const uint8_t* const (&wb)[MT], const bool (&a_inside)[MT],
                                                 const bool (&b_inside)[MT], int64_t piece, int64_t k_total, int t) {
  constexpr int S = kSteps<MT, NT>;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const int64_t k = piece * kStep * S + s * kStep + 16 * t;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      loads.a[i][s] = load_codes(wa[i] + k, a_inside[i] && k < k_total);
      loads.b[i][s] = load_codes(wb[i] + k, b_inside[i] && k < k_total);
    }
  }
}

// The x values of `piece` (after the programmatic wait only).
template <int MT, int NT, bool X_L1>
__device__ __forceinline__ void load_piece_x(PieceCodes<MT, NT>& loads, const bf16_t* x, int rows, int64_t piece,
                                             int64_t k_total, int g, int t) {
  constexpr int S = kSteps<MT, NT>;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const int64_t k = piece * kStep * S + s * kStep + 16 * t;
#pragma unroll
    for (int n8 = 0; n8 < NT; ++n8) {
      const int x_row = 8 * n8 + g;
      const bool inside = x_row < rows && k < k_total;
      const bf16_t* at = x + static_cast<int64_t>(inside ? x_row : 0) * k_total + (inside ? k : 0);
      loads.x[n8][s][0] = load_x<X_L1>(at, inside);
      loads.x[n8][s][1] = load_x<X_L1>(at + 8, inside);
    }
  }
}

// Tile `tile`'s W rows for lane g: tile i's row r is output column first + 16 i + r, or for SwiGLU r < 8 the gate
// column first + 8 i + r and r >= 8 its up column.
template <int MT, bool SWIGLU>
struct TileRows {
  const uint8_t* a[MT];
  const uint8_t* b[MT];
  bool a_inside[MT], b_inside[MT];
  __device__ __forceinline__ void set(const Int8Weights& w, int64_t tile, int g) {
    const int64_t half = w.rows / 2;
    const int64_t first = tile * (SWIGLU ? 8 * MT : 16 * MT);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      int64_t row_a, row_b;
      if constexpr (SWIGLU) {
        row_a = first + 8 * i + g;
        row_b = half + row_a;
        a_inside[i] = b_inside[i] = row_a < half;
      } else {
        row_a = first + 16 * i + g;
        row_b = row_a + 8;
        a_inside[i] = row_a < w.rows;
        b_inside[i] = row_b < w.rows;
      }
      a[i] = w.codes + (a_inside[i] ? row_a : 0) * w.cols;
      b[i] = w.codes + (b_inside[i] ? row_b : 0) * w.cols;
    }
  }
};

// NT x-row tiles of 8 (rows <= 8 NT), MT W tiles of 16 rows a warp, WARPS warps splitting K (a K slice of it when
// gridDim.y > 1). A CTA takes column tiles blockIdx.x, + gridDim.x, ... (the grid is what stays resident): a warp's
// last piece of one tile loads the first of its next tile ahead, and the partials alternate between two buffers, so
// one barrier a tile separates the warps' sums from the epilogue that reads them.
template <int MT, int NT, int WARPS, Int8Epilogue EPILOGUE, bool X_L1>
__global__ void __launch_bounds__(WARPS * kWarp, min_ctas(MT, NT, WARPS)) int8_gemm_kernel(Int8Gemm args) {
  __shared__ float partial[2][WARPS][8 * NT][16 * MT];  // [tile parity][warp][x row][W row of the CTA's tiles]
  __shared__ bool last;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int g = lane / 4, t = lane % 4;
  constexpr bool kSwiglu = EPILOGUE == Int8Epilogue::Swiglu;
  const int64_t n = args.w.rows, k_total = args.w.cols;
  const int64_t half = n / 2;
  const int64_t tiles = ((kSwiglu ? half : n) + (kSwiglu ? 8 : 16) * MT - 1) / ((kSwiglu ? 8 : 16) * MT);
  constexpr int kPiece = kStep * kSteps<MT, NT>;
  // This CTA's pieces of every tile: its K slice's (blockIdx.y of gridDim.y), or all; this warp's share of them.
  const int64_t all_pieces = (k_total + kPiece - 1) / kPiece;
  const int64_t slice_pieces = (all_pieces + gridDim.y - 1) / gridDim.y;
  const int64_t first_piece = static_cast<int64_t>(blockIdx.y) * slice_pieces + warp;
  const int64_t pieces = min(all_pieces, static_cast<int64_t>(blockIdx.y) * slice_pieces + slice_pieces);
  const int64_t my_pieces = first_piece < pieces ? (pieces - first_piece + WARPS - 1) / WARPS : 0;
  let_next_kernel_start();
  TileRows<MT, kSwiglu> rows, next_rows;
  int64_t tile = blockIdx.x;
  rows.set(args.w, tile, g);
  bool waited = false;
  PieceCodes<MT, NT> loads;
  if (my_pieces > 0) {
    load_piece_codes<MT, NT>(loads, rows.a, rows.b, rows.a_inside, rows.b_inside, first_piece, k_total, t);
  }
  auto scale_of = [&](int64_t column) {
    const int64_t used = args.planted_scale ? ((column ^ 1) < n ? column ^ 1 : column) : column;
    return __ldg(args.w.scales + used);
  };
  for (int parity = 0; tile < tiles; tile += gridDim.x, parity ^= 1) {
    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int n8 = 0; n8 < NT; ++n8) acc[i][n8][0] = acc[i][n8][1] = acc[i][n8][2] = acc[i][n8][3] = 0.0f;
    const bool more_tiles = tile + gridDim.x < tiles;
    if (more_tiles) next_rows.set(args.w, tile + gridDim.x, g);
    for (int64_t q = 0; q < my_pieces; ++q) {
      const int64_t piece = first_piece + q * WARPS;
      // The next piece (this tile's, or the next tile's first) goes out before this piece's products: its codes,
      // then its x once past the wait. x does not depend on the tile.
      const bool same_tile = q + 1 < my_pieces;
      const bool has_next = same_tile || more_tiles;
      const int64_t next = same_tile ? piece + WARPS : first_piece;
      PieceCodes<MT, NT> ahead;
      if (same_tile) {
        load_piece_codes<MT, NT>(ahead, rows.a, rows.b, rows.a_inside, rows.b_inside, next, k_total, t);
      } else if (has_next) {
        load_piece_codes<MT, NT>(ahead, next_rows.a, next_rows.b, next_rows.a_inside, next_rows.b_inside, next,
                                 k_total, t);
      }
      if (!waited) {
        wait_for_previous_kernel();
        waited = true;
        load_piece_x<MT, NT, X_L1>(loads, args.x, args.rows, piece, k_total, g, t);
      }
      if (has_next) load_piece_x<MT, NT, X_L1>(ahead, args.x, args.rows, next, k_total, g, t);
#pragma unroll
      for (int s = 0; s < kSteps<MT, NT>; ++s) {
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          uint32_t pa[8], pb[8];
          widen16(loads.a[i][s], pa);
          widen16(loads.b[i][s], pb);
#pragma unroll
          for (int n8 = 0; n8 < NT; ++n8) {
            const uint4& x0 = loads.x[n8][s][0];
            const uint4& x1 = loads.x[n8][s][1];
            const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int m = 0; m < 4; ++m) {
              const uint32_t a[4] = {pa[2 * m], pb[2 * m], pa[2 * m + 1], pb[2 * m + 1]};
              ls::cuda::gemm_detail::mma_bf16(acc[i][n8], a, &xs[2 * m]);
            }
          }
        }
      }
      if (has_next) loads = ahead;
    }
    if (!waited) {
      wait_for_previous_kernel();
      waited = true;
    }
    if (more_tiles) rows = next_rows;
    // acc[i][n8]: c0 = (W row g, x row 8 n8 + 2t), c1 = (g, +1), c2 = (g + 8, 8 n8 + 2t), c3 = (g + 8, +1).
    float (&sums)[WARPS][8 * NT][16 * MT] = partial[parity];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int n8 = 0; n8 < NT; ++n8) {
        sums[warp][8 * n8 + 2 * t][16 * i + g] = acc[i][n8][0];
        sums[warp][8 * n8 + 2 * t + 1][16 * i + g] = acc[i][n8][1];
        sums[warp][8 * n8 + 2 * t][16 * i + g + 8] = acc[i][n8][2];
        sums[warp][8 * n8 + 2 * t + 1][16 * i + g + 8] = acc[i][n8][3];
      }
    __syncthreads();
    constexpr int kCells = 8 * NT * 16 * MT;  // the CTA's sums [x row][W row]
    int warps_summed = WARPS;
    if (gridDim.y > 1) {
      // Split K: this slice's sums out, and the tile's last CTA adds every slice in slice order into sums[0].
      float* mine = args.shape.slice_sums + (static_cast<int64_t>(blockIdx.y) * tiles + tile) * kCells;
      for (int o = threadIdx.x; o < kCells; o += blockDim.x) {
        const int r = o / (16 * MT), c = o % (16 * MT);
        float sum = sums[0][r][c];
        for (int w = 1; w < WARPS; ++w) sum += sums[w][r][c];
        mine[o] = sum;
      }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) last = atomicAdd(args.shape.tickets + tile, 1u) == gridDim.y - 1;
      __syncthreads();
      if (!last) continue;  // (CTA-uniform) the next tile; its sums go to the other buffer
      __threadfence();
      for (int o = threadIdx.x; o < kCells; o += blockDim.x) {
        float sum = 0.0f;
        for (unsigned int slice = args.shape.planted_drop_slice ? 1 : 0; slice < gridDim.y; ++slice)
          sum += __ldcg(args.shape.slice_sums + (static_cast<int64_t>(slice) * tiles + tile) * kCells + o);
        sums[0][o / (16 * MT)][o % (16 * MT)] = sum;
      }
      if (threadIdx.x == 0) args.shape.tickets[tile] = 0;  // for the next launch
      __syncthreads();
      warps_summed = 1;
    }
    auto summed = [&](int r, int c) {
      float sum = sums[0][r][c];
      for (int w = 1; w < warps_summed; ++w) sum += sums[w][r][c];
      return sum;
    };
    const int64_t first = tile * (kSwiglu ? 8 * MT : 16 * MT);
    constexpr int kCols = kSwiglu ? 8 * MT : 16 * MT;  // output columns of the CTA
    constexpr int kOutputs = 8 * NT * kCols;
    for (int o = threadIdx.x; o < kOutputs; o += blockDim.x) {
      const int r = o / kCols, c = o % kCols;
      if (r >= args.rows) continue;
      const int64_t column = first + c;
      if constexpr (kSwiglu) {
        if (column >= half) continue;
        const int tile_row = 16 * (c / 8) + c % 8;
        const float gate = summed(r, tile_row) * scale_of(column);
        const float up = summed(r, tile_row + 8) * scale_of(half + column);
        static_cast<bf16_t*>(args.y)[r * args.ldy + column] = swiglu_value(round_bf16(gate), round_bf16(up));
      } else {
        if (column >= n) continue;
        const float value = summed(r, c) * scale_of(column);
        if constexpr (EPILOGUE == Int8Epilogue::F32) {
          static_cast<float*>(args.y)[r * args.ldy + column] = value;
        } else {
          static_cast<bf16_t*>(args.y)[r * args.ldy + column] = __float2bfloat16_rn(value);
        }
      }
    }
  }
  if (!waited) wait_for_previous_kernel();
}

// The device's SMs (132 where none answers: the H200's).
int sm_count() {
  static const int count = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && sms > 0) {
      return sms;
    }
    cudaGetLastError();
    return 132;
  }();
  return count;
}

template <int MT, int NT, int WARPS, Int8Epilogue EPILOGUE, bool X_L1 = false>
Status launch(const Int8Gemm& args, int64_t ctas, bool programmatic, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  // As many CTAs as stay resident at once (each takes every gridDim.x-th column tile), at most one a tile.
  static const int per_sm = [] {
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, int8_gemm_kernel<MT, NT, WARPS, EPILOGUE, X_L1>,
                                                      WARPS * kWarp, 0) != cudaSuccess) {
      cudaGetLastError();
      blocks = 1;
    }
    return std::max(1, blocks);
  }();
  const int slices = std::max(1, args.shape.k_slices);
  const int64_t resident = std::max<int64_t>(1, static_cast<int64_t>(per_sm) * sm_count() / slices);
  config.gridDim = dim3(static_cast<unsigned int>(std::min(ctas, resident)), static_cast<unsigned int>(slices));
  config.blockDim = dim3(WARPS * kWarp);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic && ls::cuda::cuda_features().pdl ? 1 : 0;  // not on the portable sm_80 path
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, int8_gemm_kernel<MT, NT, WARPS, EPILOGUE, X_L1>, args));
  return ok_status();
}

// The asked warps, fewer where the partials would not fit (int8_gemm_shape says the same).
template <int MT, int NT, Int8Epilogue EPILOGUE, bool X_L1>
Status launch_warps_x(const Int8Gemm& args, int64_t ctas, int warps, bool programmatic, cudaStream_t stream) {
  if constexpr (partials_fit(MT, NT, 16)) {
    if (warps == 16) return launch<MT, NT, 16, EPILOGUE, X_L1>(args, ctas, programmatic, stream);
  }
  if constexpr (partials_fit(MT, NT, 8)) {
    if (warps >= 8) return launch<MT, NT, 8, EPILOGUE, X_L1>(args, ctas, programmatic, stream);
  }
  return launch<MT, NT, 4, EPILOGUE, X_L1>(args, ctas, programmatic, stream);
}

template <int MT, int NT, Int8Epilogue EPILOGUE>
Status launch_warps(const Int8Gemm& args, int warps, bool programmatic, cudaStream_t stream) {
  const int64_t columns = EPILOGUE == Int8Epilogue::Swiglu ? args.w.rows / 2 : args.w.rows;
  const int64_t per_cta = (EPILOGUE == Int8Epilogue::Swiglu ? 8 : 16) * MT;
  const int64_t ctas = (columns + per_cta - 1) / per_cta;
  if (args.shape.x_l1) return launch_warps_x<MT, NT, EPILOGUE, true>(args, ctas, warps, programmatic, stream);
  return launch_warps_x<MT, NT, EPILOGUE, false>(args, ctas, warps, programmatic, stream);
}

template <Int8Epilogue EPILOGUE>
Status launch_shape(const Int8Gemm& args, const Int8GemmShape& shape, bool programmatic, cudaStream_t stream) {
  const int warps = shape.warps;
  if (shape.m_tiles == 4) {  // (up to 16 rows: int8_gemm_shape takes two tiles above)
    if (args.rows <= 8) return launch_warps<4, 1, EPILOGUE>(args, warps, programmatic, stream);
    return launch_warps<4, 2, EPILOGUE>(args, warps, programmatic, stream);
  }
  if (shape.m_tiles == 2) {
    if (args.rows <= 8) return launch_warps<2, 1, EPILOGUE>(args, warps, programmatic, stream);
    if (args.rows <= 16) return launch_warps<2, 2, EPILOGUE>(args, warps, programmatic, stream);
    return launch_warps<2, 4, EPILOGUE>(args, warps, programmatic, stream);
  }
  if (args.rows <= 8) return launch_warps<1, 1, EPILOGUE>(args, warps, programmatic, stream);
  if (args.rows <= 16) return launch_warps<1, 2, EPILOGUE>(args, warps, programmatic, stream);
  return launch_warps<1, 4, EPILOGUE>(args, warps, programmatic, stream);
}

// One CTA a row: the row's largest magnitude, then its codes (the CPU's quantize_row_int8, biased by 128).
__global__ void __launch_bounds__(256) quantize_kernel(const bf16_t* w, int64_t cols, uint8_t* codes, float* scales) {
  __shared__ float largest[256 / kWarp];
  const int64_t row = blockIdx.x;
  const bf16_t* values = w + row * cols;
  float most = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) most = fmaxf(most, fabsf(__bfloat162float(values[c])));
  for (int offset = kWarp / 2; offset > 0; offset /= 2) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
  if (threadIdx.x % kWarp == 0) largest[threadIdx.x / kWarp] = most;
  __syncthreads();
  most = largest[0];
  for (int i = 1; i < 256 / kWarp; ++i) most = fmaxf(most, largest[i]);
  const float scale = __fdiv_rn(most, 127.0f);
  if (threadIdx.x == 0) scales[row] = scale;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float code = scale > 0.0f ? rintf(__fdiv_rn(__bfloat162float(values[c]), scale)) : 0.0f;
    codes[row * cols + c] = static_cast<uint8_t>(static_cast<int>(fminf(fmaxf(code, -127.0f), 127.0f)) + 128);
  }
}

}  // namespace

Int8GemmShape int8_gemm_shape(const Int8Gemm& args) {
  Int8GemmShape shape = args.shape;
  const int64_t columns = args.epilogue == Int8Epilogue::Swiglu ? args.w.rows / 2 : args.w.rows;
  const int64_t per_tile = args.epilogue == Int8Epilogue::Swiglu ? 8 : 16;
  if (shape.m_tiles != 1 && shape.m_tiles != 2 && shape.m_tiles != 4) {
    // Two W tiles a warp (x read once for 32 W rows) where that still leaves two CTAs an SM.
    shape.m_tiles = (columns + 2 * per_tile - 1) / (2 * per_tile) >= 264 ? 2 : 1;
  }
  if (shape.warps != 4 && shape.warps != 8 && shape.warps != 16) {
    // The most warps a CTA that still lets every CTA be resident at once (at <= 128 registers a thread: one CTA of
    // 16 warps an SM, two of 8, four of 4), so the warps split K into several pieces each and keep loads in flight;
    // 8 where no count fits (the head: many waves).
    const int64_t ctas = (columns + per_tile * shape.m_tiles - 1) / (per_tile * shape.m_tiles);
    shape.warps = 8;
    for (const int warps : {16, 8, 4}) {
      if (ctas <= static_cast<int64_t>(sm_count()) * (16 / warps)) {
        shape.warps = warps;
        break;
      }
    }
  }
  const int x_tiles = args.rows <= 8 ? 1 : (args.rows <= 16 ? 2 : 4);
  if (shape.m_tiles == 4 && x_tiles == 4) shape.m_tiles = 2;  // four tiles' partials at 32 rows pass 48 KB
  while (shape.warps > 4 && !partials_fit(shape.m_tiles, x_tiles, shape.warps)) shape.warps /= 2;
  shape.k_slices = std::max(1, shape.k_slices);
  return shape;
}

int64_t int8_gemm_tiles(const Int8Gemm& args, const Int8GemmShape& shape) {
  const bool swiglu = args.epilogue == Int8Epilogue::Swiglu;
  const int64_t columns = swiglu ? args.w.rows / 2 : args.w.rows;
  const int64_t per_cta = (swiglu ? 8 : 16) * std::max(1, shape.m_tiles);
  return (columns + per_cta - 1) / per_cta;
}

int64_t int8_gemm_slice_floats(const Int8Gemm& args, const Int8GemmShape& shape) {
  const int x_tiles = args.rows <= 8 ? 1 : (args.rows <= 16 ? 2 : 4);
  return std::max(1, shape.k_slices) * int8_gemm_tiles(args, shape) * 8 * x_tiles * 16 * std::max(1, shape.m_tiles);
}

Status int8_gemm(const Int8Gemm& args, bool programmatic, cudaStream_t stream) {
  if (args.rows == 0) return ok_status();
  if (!int8_gemm_supported(args.rows, args.w.cols) ||
      (args.epilogue == Int8Epilogue::Swiglu && args.w.rows % 2 != 0)) {
    return Status(ErrorCode::InvalidArgument,
                  "int8_gemm takes 1.." + std::to_string(kInt8GemmMaxRows) +
                      " rows and K a multiple of 16 (SwiGLU: even n), not " + std::to_string(args.rows) +
                      " rows, K " + std::to_string(args.w.cols) + ", n " + std::to_string(args.w.rows));
  }
  Int8Gemm resolved = args;
  resolved.shape = int8_gemm_shape(args);
  const Int8GemmShape& shape = resolved.shape;
  if (shape.k_slices > 1 && (shape.slice_sums == nullptr || shape.tickets == nullptr)) {
    return Status(ErrorCode::InvalidArgument, "int8_gemm: a K split over " + std::to_string(shape.k_slices) +
                                                  " CTAs needs its slice sums and tickets");
  }
  switch (args.epilogue) {
    case Int8Epilogue::Swiglu:
      return launch_shape<Int8Epilogue::Swiglu>(resolved, shape, programmatic, stream);
    case Int8Epilogue::F32:
      return launch_shape<Int8Epilogue::F32>(resolved, shape, programmatic, stream);
    case Int8Epilogue::Bf16:
      break;
  }
  return launch_shape<Int8Epilogue::Bf16>(resolved, shape, programmatic, stream);
}

Status quantize_rows_int8(const bf16_t* w, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                          cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  if (cols % 16 != 0) {
    return Status(ErrorCode::InvalidArgument,
                  "quantize_rows_int8 takes columns in multiples of 16, not " + std::to_string(cols));
  }
  quantize_kernel<<<static_cast<unsigned int>(rows), 256, 0, stream>>>(w, cols, codes, scales);
  LS_CUDA_TRY(cudaGetLastError());
  return ok_status();
}

}  // namespace ls::dspark::cuda
