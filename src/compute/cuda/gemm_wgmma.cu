// The wgmma (sm_90a) tile GEMM: 128 rows per CTA as two warpgroups of 64, 128 or 256 columns, K tiles of 64 staged
// by cp.async into the same 128-byte-swizzled shared layout as the mma.sync tiles (it is wgmma's 128B swizzle), one
// m64nNk16 wgmma per 16-wide K step in ascending order on one fp32 accumulator: the canonical order of
// gemm_device.cuh provided the wgmma k16 step adds like the mma.sync one (the pinned invariance test decides).
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "compute/cuda/gemm_tile.cuh"
#include "compute/cuda/gemm_wgmma.cuh"

namespace ls::cuda::gemm_detail {
namespace {

// A wgmma tile: Tile<128, BN, 8, 1, STAGES> (warp w holds rows 16w..16w+15 of the m16n8 layout: warpgroup w/4's
// m64 fragment), CTAS per SM (2: registers capped at 128, so one slice only), INFLIGHT wgmma batches left running
// behind the next tile's loads (0 or 1: the stage they read is reloaded only after they finished).
template <class T, int CTAS, int INFLIGHT>
struct WgmmaTileOf : T {
  static constexpr int CTAS_PER_SM = CTAS, IN_FLIGHT = INFLIGHT;
};

template <class T, Mode MODE>
__global__ void __launch_bounds__(T::THREADS, T::CTAS_PER_SM) wgmma_kernel(GemmArgs args) {
#ifdef LS_WGMMA_DEVICE
  static_assert(T::BM == 128 && T::WARPS_M == 8 && T::WARPS_N == 1, "two warpgroups of m64");
  constexpr bool SLICED = MODE == Mode::Sliced;
  constexpr int kAhead = T::STAGES - 1 - T::IN_FLIGHT;  // tiles loading ahead of the one multiplied
  static_assert(kAhead >= 1, "at least one tile loads ahead");
  extern __shared__ __align__(128) unsigned char shared_raw[];
  // Stages start on 1024 bytes: the 128-byte swizzle repeats every 8 rows of 128 bytes.
  unsigned char* aligned = shared_raw + ((1024 - (smem_address(shared_raw) & 1023)) & 1023);
  __nv_bfloat16* shared = reinterpret_cast<__nv_bfloat16*>(aligned);
  const int tid = threadIdx.x, group = tid >> 7;
  // Row tiles fastest: the CTAs in flight share a few weight column tiles (read from memory once) and all of x
  // (prefill's x is the smaller operand and stays in L2).
  const int row0 = blockIdx.x * T::BM, col0 = blockIdx.y * T::BN;
  const int all_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int first_tile = MODE == Mode::Split ? split_slice() * kSliceTiles : 0;
  const int k_tiles = MODE == Mode::Split && gridDim.z > 1 ? min(kSliceTiles, all_tiles - first_tile) : all_tiles;

  float acc[1][T::NI][4];
  float total[1][SLICED ? T::NI : 1][4];  // slice sums so far, in slice order
#pragma unroll
  for (int j = 0; j < T::NI; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][j][e] = 0.0f;
  // Sliced: zeros after the stages ([BN rows][128 bytes]); each later slice's chain starts from D = 0 * 0 issued as
  // a wgmma (the compiler serialises every wgmma when other instructions write the accumulators inside the loop).
  const uint32_t zeros = smem_address(aligned + T::SMEM_BYTES);
  if constexpr (SLICED) {
    for (int i = tid; i < T::BN * 128 / 16; i += T::THREADS)
      reinterpret_cast<uint4*>(aligned + T::SMEM_BYTES)[i] = make_uint4(0, 0, 0, 0);
  }

  auto tile_at = [&](int step) { return first_tile + (args.reverse_k ? k_tiles - 1 - step : step); };
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < k_tiles) load_stage<T>(args, shared + s * T::STAGE_ELEMS, row0, col0, tile_at(s), tid);
    commit_group();
  }

  for (int step = 0; step < k_tiles; ++step) {
    wait_group<kAhead - 1>();
    fence_proxy_async();
    // Every thread's copies of tile `step` landed; every warpgroup finished the wgmmas of tile step - 1 - IN_FLIGHT,
    // whose stage the next load overwrites.
    __syncthreads();
    const int next = step + kAhead;
    if (next < k_tiles)
      load_stage<T>(args, shared + (next % T::STAGES) * T::STAGE_ELEMS, row0, col0, tile_at(next), tid);
    commit_group();

    const uint32_t stage = smem_address(shared + (step % T::STAGES) * T::STAGE_ELEMS);
    const uint32_t a_base = stage + group * 64 * 128, b_base = stage + T::BM * 128;
    wgmma_fence();
    if constexpr (SLICED) {
      if (step > 0 && step % kSliceTiles == 0)  // +0 everywhere: the new slice's chain starts as the first one did
        wgmma_k16(Width<T::BN>{}, &acc[0][0][0], descriptor(zeros), descriptor(zeros), 0);
    }
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk)
      wgmma_k16(Width<T::BN>{}, &acc[0][0][0], descriptor(a_base + kk * 32), descriptor(b_base + kk * 32), 1);
    wgmma_commit();
    if constexpr (SLICED) {
      // End of a slice: fold its sum into the running total (the first slice is copied, not added to +0).
      if ((step + 1) % kSliceTiles == 0 || step + 1 == k_tiles) {
        wgmma_wait<0>();
        const bool first = step < kSliceTiles;
#pragma unroll
        for (int j = 0; j < T::NI; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            total[0][j][e] = first ? acc[0][j][e] : __fadd_rn(total[0][j][e], acc[0][j][e]);
          }
      } else {
        wgmma_wait<T::IN_FLIGHT>();
      }
    } else {
      wgmma_wait<T::IN_FLIGHT>();
    }
  }
  wgmma_wait<0>();
  wait_group<0>();
  if constexpr (MODE == Mode::Split) {
    split_epilogue<T>(args, acc, aligned, row0, col0);
  } else if constexpr (SLICED) {
    store_tile<T>(args, total, row0, col0);
  } else {
    store_tile<T>(args, acc, row0, col0);
  }
#else
  __trap();  // the engine runs these only where cuda_features().wgmma (sm_90a code on a 9.0 device)
#endif
}

using WideTile = WgmmaTileOf<Tile<128, 256, 8, 1, 4>, 1, 1>;      // 48 KB stages, 192 KB
using LargeTile = WgmmaTileOf<Tile<128, 128, 8, 1, 4>, 1, 1>;     // 32 KB stages, 128 KB
using LargeDuoTile = WgmmaTileOf<Tile<128, 128, 8, 1, 3>, 2, 0>;  // 96 KB, two CTAs per SM

// The stages, their alignment to 1024 bytes and (sliced) the zeros.
template <class T, Mode MODE>
constexpr int shared_bytes() {
  return T::SMEM_BYTES + 1024 + (MODE == Mode::Sliced ? T::BN * 128 : 0);
}

template <class T, Mode MODE>
Status launch_tile(const GemmArgs& args, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  if ((args.n + T::BN - 1) / T::BN > kMaxWgmmaColumnTiles)
    return Status(ErrorCode::InvalidArgument, "gemm: N = " + std::to_string(args.n) +
                                                  " is more column tiles than the wgmma grid holds (" +
                                                  std::to_string(kMaxWgmmaColumnTiles) + ")");
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((args.m + T::BM - 1) / T::BM, (args.n + T::BN - 1) / T::BN, MODE == Mode::Split ? slices : 1);
  config.blockDim = dim3(T::THREADS);
  config.dynamicSmemBytes = shared_bytes<T, MODE>();
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 1;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = slices;
  config.attrs = attribute;
  config.numAttrs = MODE == Mode::Split ? 1 : 0;
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, wgmma_kernel<T, MODE>, args));
  return ok_status();
}

template <class T, Mode MODE>
void allow() {
  cudaFuncSetAttribute(wgmma_kernel<T, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes<T, MODE>());
}

}  // namespace

Status launch_wgmma(WgmmaTile tile, Mode mode, const GemmArgs& args, cudaStream_t stream) {
  const bool sliced = slice_count(args.k) > 1;
  if (tile == WgmmaTile::Wide) {
    if (sliced && mode != Mode::Split)
      return Status(ErrorCode::InvalidArgument, "gemm: the 128x256 wgmma tile cannot add K = " +
                                                    std::to_string(args.k) + " in slices outside split mode");
    return mode == Mode::Split ? launch_tile<WideTile, Mode::Split>(args, stream)
                               : launch_tile<WideTile, Mode::Plain>(args, stream);
  }
  if (tile == WgmmaTile::LargePair || tile == WgmmaTile::WidePair || tile == WgmmaTile::WideLoop)
    return Status(ErrorCode::InvalidArgument, "gemm: the pair tile loads through TMA only (launch_tma)");
  if (tile == WgmmaTile::LargeDuo) {
    if (sliced || mode != Mode::Plain)
      return Status(ErrorCode::InvalidArgument, "gemm: the two-CTA 128x128 wgmma tile runs one slice only, K = " +
                                                    std::to_string(args.k));
    return launch_tile<LargeDuoTile, Mode::Plain>(args, stream);
  }
  if (mode == Mode::Split) return launch_tile<LargeTile, Mode::Split>(args, stream);
  return sliced ? launch_tile<LargeTile, Mode::Sliced>(args, stream)
                : launch_tile<LargeTile, Mode::Plain>(args, stream);
}

void allow_wgmma_shared() {
  allow<WideTile, Mode::Plain>();
  allow<WideTile, Mode::Split>();
  allow<LargeTile, Mode::Plain>();
  allow<LargeTile, Mode::Sliced>();
  allow<LargeTile, Mode::Split>();
  allow<LargeDuoTile, Mode::Plain>();
}

}  // namespace ls::cuda::gemm_detail
