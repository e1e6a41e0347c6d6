// The batch-invariant bf16 GEMM: mma.sync m16n8k16 tensor cores, ldmatrix from swizzled shared memory, cp.async
// multi-stage pipelines. One reduction order for every m (the canonical order, a function of K alone): K above
// kUnslicedK is cut into slices of kSliceK; each slice is one fp32 accumulator fed with its 16-wide K steps in
// ascending order; the slice sums are added in slice order, ((s0 + s1) + s2) + ..., then the bias. The decode
// kernel (m <= 16) gives each slice to its own warp; the tile kernel walks the slices in turn with a second register
// set, or (split mode, sm_90 clusters) gives each slice to its own CTA of a cluster and adds the CTAs' slice sums
// from distributed shared memory in slice order. All add alike.
#include <cuda_bf16.h>

#include <atomic>
#include <string>

#include "compute/cuda/gemm_tile.cuh"

namespace ls::cuda {
namespace {

using namespace gemm_detail;

template <class T, Mode MODE>
__global__ void __launch_bounds__(T::THREADS) gemm_kernel(GemmArgs args) {
  constexpr bool SLICED = MODE == Mode::Sliced;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  __nv_bfloat16* shared = reinterpret_cast<__nv_bfloat16*>(shared_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
  const int row0 = blockIdx.y * T::BM, col0 = blockIdx.x * T::BN;
  const int all_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int first_tile = MODE == Mode::Split ? split_slice() * kSliceTiles : 0;
  const int k_tiles = MODE == Mode::Split && gridDim.z > 1 ? min(kSliceTiles, all_tiles - first_tile) : all_tiles;

  float acc[T::MI][T::NI][4];
  float total[SLICED ? T::MI : 1][SLICED ? T::NI : 1][4];  // slice sums so far, in slice order
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  auto tile_at = [&](int step) { return first_tile + (args.reverse_k ? k_tiles - 1 - step : step); };
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
    mma_k_tile<T>(a_base, b_base, warp_m, warp_n, lane, acc);
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
  if constexpr (MODE == Mode::Split) {
    split_epilogue<T>(args, acc, shared_raw, row0, col0);
  } else {
    if constexpr (SLICED)
      store_tile<T>(args, total, row0, col0);
    else
      store_tile<T>(args, acc, row0, col0);
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
  if constexpr (kCanSlice) {
    if (slices > 1) {
      gemm_kernel<T, Mode::Sliced><<<grid, T::THREADS, T::SMEM_BYTES, stream>>>(args);
      LS_CUDA_TRY_LAUNCH("gemm_kernel");
      return ok_status();
    }
  }
  gemm_kernel<T, Mode::Plain><<<grid, T::THREADS, T::SMEM_BYTES, stream>>>(args);
  LS_CUDA_TRY_LAUNCH("gemm_kernel");
  return ok_status();
}

// Split mode: grid (column tiles, row tiles, slices), one cluster of `slices` CTAs per output tile.
template <class T>
Status launch_split(const GemmArgs& args, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((args.n + T::BN - 1) / T::BN, (args.m + T::BM - 1) / T::BM, slices);
  config.blockDim = dim3(T::THREADS);
  config.dynamicSmemBytes = T::SMEM_BYTES;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 1;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = slices;
  config.attrs = attribute;
  config.numAttrs = 1;
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, gemm_kernel<T, Mode::Split>, args));
  return ok_status();
}

// Up to 64 rows: 64x64 or 64x128 tiles. Prefill: 128x128 (two CTAs per SM unsliced), 128x256 or 256x128 (one
// slice only: no registers for a second set).
using Medium = Tile<64, 64, 2, 2, 4>;
using MediumDeep = Tile<64, 64, 2, 2, 8>;
using Medium128 = Tile<64, 128, 2, 4, 4>;
using Large = Tile<128, 128, 2, 4, 3>;
using LargeDeep = Tile<128, 128, 2, 4, 4>;
using Wide = Tile<128, 256, 2, 4, 3>;
using Tall = Tile<256, 128, 4, 2, 3>;
// Up to 16 rows, one slice: 16x128 tiles, 8 warps, 6 stages (89-92% of the read bandwidth on the 2048->65536 head
// on the H200); 16x64 tiles, 4 warps, 12 stages (more bytes in flight for 8192-wide outputs).
using Stream = Tile<16, 128, 1, 8, 6>;
using StreamDeep = Tile<16, 64, 1, 4, 12>;
// Verify windows (17..64 rows): every warp holds all BM rows (one to four m16 mma per weight fragment), so a CTA
// streams its columns' weights once for all rows with x staged once per CTA; 16 (x 1 warp), 32 (x 2) or 64 (x 4)
// columns per CTA, deep pipelines, every one under 99 KB of shared memory.
using Verify32 = Tile<32, 32, 1, 2, 8>;
using Verify64 = Tile<64, 32, 1, 2, 8>;
using Verify64Wide = Tile<64, 64, 1, 4, 6>;
using Verify64Narrow = Tile<64, 16, 1, 1, 8>;

// Split configurations (sm_90 clusters, 2..8 slices): Medium128, Large and Stream tiles, one CTA per slice.
// wgmma configurations (sm_90a, gemm_wgmma.cu): 128x256 one slice, 128x128 (a second register set for sliced K),
// 128x128 two CTAs per SM (one slice), 128x256 and 128x128 in split mode; warp-specialised with TMA loads
// (gemm_tma.cu): 128x256 (one slice), 128x128 (a second register set for sliced K), both in split mode, and 128x128 in
// clusters of two row tiles that multicast the W loads (pair; 128x256 pair one slice only), 128x256 persistent (one
// slice).
enum class Choice {
  Decode, Medium, Medium128, Large, LargeDeep, Wide, Tall, Stream, StreamDeep, MediumDeep, SplitMedium128,
  SplitLarge, SplitStream, WgmmaWide, WgmmaLarge, WgmmaLargeDuo, WgmmaSplit, WgmmaSplitLarge, TmaWide, TmaLarge,
  TmaSplit, TmaSplitLarge, TmaPair, TmaWidePair, TmaWideLoop, Verify32, Verify64, Verify64Wide, Verify64Narrow,
  SplitVerify32, SplitVerify64, Count
};

// Whether a configuration computes the canonical order for (m, K) on this device: decode only up to 16 rows, the
// big tiles only for one slice, split mode only with clusters and at most kMaxClusterSlices slices.
bool valid(Choice choice, int64_t m, int64_t k, bool clusters, bool wgmma) {
  const int slices = slice_count(static_cast<int>(k));
  switch (choice) {
    case Choice::WgmmaWide:
    case Choice::WgmmaLargeDuo:
    case Choice::TmaWide: return wgmma && slices == 1;
    case Choice::WgmmaLarge:
    case Choice::TmaLarge: return wgmma;
    case Choice::WgmmaSplit:
    case Choice::WgmmaSplitLarge:
    case Choice::TmaSplit:
    case Choice::TmaSplitLarge: return wgmma && clusters && slices <= kMaxClusterSlices;
    case Choice::TmaPair: return wgmma && clusters;
    case Choice::TmaWidePair: return wgmma && clusters && slices == 1;
    case Choice::TmaWideLoop: return wgmma && slices == 1;
    case Choice::Decode: return m <= 16 || (m <= 64 && slices <= kMaxClusterSlices);
    case Choice::Stream:
    case Choice::StreamDeep: return m <= 16 && slices == 1;
    case Choice::Wide:
    case Choice::Tall: return slices == 1;
    case Choice::SplitStream: return m <= 16 && clusters && slices <= kMaxClusterSlices;
    case Choice::SplitMedium128:
    case Choice::SplitLarge: return clusters && slices <= kMaxClusterSlices;
    case Choice::Verify32: return m <= 32;
    case Choice::Verify64:
    case Choice::Verify64Wide:
    case Choice::Verify64Narrow: return m <= 64;
    case Choice::SplitVerify32: return m <= 32 && clusters && slices > 1 && slices <= kMaxClusterSlices;
    case Choice::SplitVerify64: return m <= 64 && clusters && slices > 1 && slices <= kMaxClusterSlices;
    case Choice::Count: return false;
    default: return true;
  }
}

// The split configurations are automatic for sliced K above 16 rows: the pinned invariance and planted-fault tests
// passed with them on the H200 (third run, docs/cuda.md), and they beat every unsplit tile there at m = 17..2048.
constexpr bool kSplitAutomatic = true;

// The wgmma configurations are automatic from 128 rows: the trial test pinned each one on the H200 (batch A, commit
// 91d1689): bitwise the one-row launch on every shape and width, the planted fault red under each; batch B repeated
// it with the pinned tests covering them.
constexpr bool kWgmmaAutomatic = true;

// Measured on the H200 (docs/cuda.md, Kernels): the 16x128 tile streams one-slice decode at 92% of the read
// bandwidth on the 65536-wide head (decode kernel 56-80%) and beats the decode kernel from about 12 rows on 8192
// outputs; with sliced K and clusters, split mode beats every unsplit tile from 17 rows (8192->2048: 25 us against
// 130 at m = 17..64 with 64x128 tiles, 37-61 us against 117 at m = 100..256 and 316 against 417 at 2048 with
// 128x128 tiles), while the decode kernel keeps m <= 16 (12-15 us against 17 split); unsplit, 64x64 tiles beat
// 128x128 ones while those would not fill the SMs up to 128 rows; 128x128 beats 128x256 except on wide heads.
// Whether 17..64 rows take the verify tiles (set_verify_tiles; off: batch A of session 5 timed them slower than the
// older picks on every 1.2B shape but 2048->2048 / 3072 / 6144 at 17..32 rows, where the streamed windows win).
std::atomic<bool> verify_tiles{false};

// The verify tiles' pick for 17..64 rows (Count: none, the older picks decide). Sliced K: a cluster of one CTA per
// slice; one slice: 64 columns a CTA on wide outputs, else 32 (two warps), 32 rows where they hold the window.
Choice choose_verify(int64_t m, int64_t n, int slices, bool clusters) {
  if (slices > 1) {
    if (!clusters || slices > kMaxClusterSlices) return Choice::Count;
    return m <= 32 ? Choice::SplitVerify32 : Choice::SplitVerify64;
  }
  if (n >= 8192) return Choice::Verify64Wide;
  return m <= 32 ? Choice::Verify32 : Choice::Verify64;
}

Choice choose(int64_t m, int64_t n, int64_t k, int sm_count, bool clusters, bool wgmma, int pinned) {
  if (pinned >= 0 && pinned < static_cast<int>(Choice::Count) &&
      valid(static_cast<Choice>(pinned), m, k, clusters, wgmma))
    return static_cast<Choice>(pinned);
  const int slices = slice_count(static_cast<int>(k));
  const bool wide = n >= 128LL * sm_count;
  if (m <= 16) return slices == 1 && (wide || (m >= 12 && n >= 8192)) ? Choice::Stream : Choice::Decode;
  // Streamed windows (set_decode_rows; H200, session 5, cuda_gemm_bench after 3cb76a1 (batch B), us at m = 17 / 32
  // / 64 against the older picks): sliced K (8192->2048) 13.6 / 14.5 / 29.8 against 17.4 / 18.2 / 19.0 (TMA 128x256
  // split); one slice N < 8192 (2048->2048 / 3072 / 6144) 23.7-27.4 at 17..32 rows against 24.4-24.7 (64x64 s4),
  // 37-42 at 64; N >= 8192 lose (2048->16384 50.9 against 30.3, the head 201 against 79). End to end (gpu_bench,
  // 1.2B verify windows, batch B) the streamed picks at 17 / 24 / 32 rows: 1.93 / 2.00 / 2.13 ms against 2.31 / 2.37
  // / 2.42 (programmatic launches, q / k / v in one); streaming sliced K at 48 / 64 rows too: 2.67 / 2.85 against
  // 2.55 / 2.72, so not.
  const int rows = decode_rows_max();
  if (m <= rows && slices <= kMaxClusterSlices && (rows == 64 || slices > 1 || n < 8192)) return Choice::Decode;
  if (m <= 64 && verify_tiles.load(std::memory_order_relaxed)) {
    const Choice verify = choose_verify(m, n, slices, clusters);
    if (verify != Choice::Count) return verify;
  }
  // Sliced K with clusters: every CTA streams one slice of its columns' weights once for all rows of its tile.
  const bool split = kSplitAutomatic && clusters && slices > 1 && slices <= kMaxClusterSlices;
  // Sliced K through TMA (H200, batches A and B of session 4, 8192->2048; each pinned configuration bitwise the
  // one-row launch there at m = 1..513): the 128x128 tile walking the slices (second register set) wherever its CTAs
  // reach about 0.4 of the SMs (m = 2048: 105 us = 81% of cuBLAS, the cp.async 128x256 split tile 290; m = 512: 47
  // against 59 for the best split tile; m = 384: 46.7 against 41.7 split), else the TMA split tiles: 128x128 where
  // the 128x256 split CTAs fill between half and all of the SMs (m = 200 / 256: 37.2 / 37.3 us against 37.1 /
  // 41.2), else 128x256 (m = 17..128: 19-21 us against 26-37 for the mma.sync split tiles; m = 384: 41.7 against
  // 51.2). More than 8 slices (no cluster holds them) walk the slices too from 65 rows.
  const bool tma_sliced = kWgmmaAutomatic && wgmma && slices > 1 && k % 64 == 0 && n <= 128LL * kMaxWgmmaColumnTiles;
  if (tma_sliced && (split || m > 64)) {
    const int64_t large_ctas = ((m + 127) / 128) * ((n + 127) / 128);
    const int64_t wide_split_ctas = ((m + 127) / 128) * ((n + 255) / 256) * slices;
    if (!split || (m > 64 && 5 * large_ctas >= 2LL * sm_count)) return Choice::TmaLarge;
    return 2 * wide_split_ctas > sm_count && wide_split_ctas <= sm_count ? Choice::TmaSplitLarge : Choice::TmaSplit;
  }
  if (m <= 64) return split ? Choice::SplitMedium128 : wide ? Choice::Medium128 : Choice::Medium;
  // wgmma from 128 rows (H200, batch B of session 3): one slice, the TMA tiles beat every other configuration at
  // m = 128, 512, 2048 on 2048->2048/6144/16384/65536 (75-87% of cuBLAS at m = 2048), 128x256 where its CTAs reach
  // half the SMs; sliced K with a K tail, the 128x256 split tile (8192->2048: 290 us at m = 2048 against 317
  // mma.sync split).
  if (kWgmmaAutomatic && wgmma && m >= 128 && n <= 128LL * kMaxWgmmaColumnTiles) {
    const int64_t wide_ctas = ((m + 127) / 128) * ((n + 255) / 256);
    // A K tail (K % 64 != 0) leans on TMA's zero fill, not yet run on a device: the cp.async wgmma tiles take it.
    if (slices == 1 && k % 64 != 0) return 2 * wide_ctas >= sm_count ? Choice::WgmmaWide : Choice::WgmmaLarge;
    if (slices == 1) return 2 * wide_ctas >= sm_count ? Choice::TmaWide : Choice::TmaLarge;
    if (split && wide_ctas * slices >= sm_count) return Choice::WgmmaSplit;
  }
  if (split) return Choice::SplitLarge;
  const int64_t large_ctas = ((m + 127) / 128) * ((n + 127) / 128);
  if (large_ctas < sm_count && slices > 1) return Choice::Medium;
  if (large_ctas < sm_count && m <= 128) return Choice::Medium;
  const int64_t wide_ctas = ((m + 127) / 128) * ((n + 255) / 256);
  return slices == 1 && wide && wide_ctas >= 2LL * sm_count ? Choice::Wide : Choice::Large;
}

// Shared memory of the mma.sync tile configurations (the others size themselves or run on sm_90 only).
int tile_shared_bytes(Choice choice) {
  switch (choice) {
    case Choice::Medium: return Medium::SMEM_BYTES;
    case Choice::MediumDeep: return MediumDeep::SMEM_BYTES;
    case Choice::Medium128: return Medium128::SMEM_BYTES;
    case Choice::Large: return Large::SMEM_BYTES;
    case Choice::LargeDeep: return LargeDeep::SMEM_BYTES;
    case Choice::Wide: return Wide::SMEM_BYTES;
    case Choice::Tall: return Tall::SMEM_BYTES;
    case Choice::Stream: return Stream::SMEM_BYTES;
    case Choice::StreamDeep: return StreamDeep::SMEM_BYTES;
    case Choice::Verify32:
    case Choice::SplitVerify32: return Verify32::SMEM_BYTES;
    case Choice::Verify64:
    case Choice::SplitVerify64: return Verify64::SMEM_BYTES;
    case Choice::Verify64Wide: return Verify64Wide::SMEM_BYTES;
    case Choice::Verify64Narrow: return Verify64Narrow::SMEM_BYTES;
    default: return 0;
  }
}

// The choice, or one that fits the device's opt-in shared memory (99 KB on sm_86 / sm_89: L40S, RTX 30/40) and
// computes the same order: the decode kernel for the streaming tiles, 64x64 s4 (64 KB) for 64x64 s8, 128x128 s3
// (96 KB) for the larger tiles (all valid wherever those are).
Choice fitting(Choice choice, int shared_optin) {
  if (shared_optin <= 0 || tile_shared_bytes(choice) <= shared_optin) return choice;
  static_assert(Large::SMEM_BYTES <= 99 * 1024 && Medium128::SMEM_BYTES <= 99 * 1024, "the fallbacks fit 99 KB");
  switch (choice) {
    case Choice::Stream:
    case Choice::StreamDeep: return Choice::Decode;
    case Choice::MediumDeep: return Choice::Medium;
    default: return Choice::Large;
  }
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
    case Choice::StreamDeep: return "16x64x64 s12";
    case Choice::MediumDeep: return "64x64x64 s8";
    case Choice::SplitMedium128: return "64x128x64 s4 split";
    case Choice::SplitLarge: return "128x128x64 s3 split";
    case Choice::SplitStream: return "16x128x64 s6 split";
    case Choice::WgmmaWide: return "wgmma 128x256x64 s4";
    case Choice::WgmmaLarge: return "wgmma 128x128x64 s4";
    case Choice::WgmmaLargeDuo: return "wgmma 128x128x64 s3 x2";
    case Choice::WgmmaSplit: return "wgmma 128x256x64 s4 split";
    case Choice::WgmmaSplitLarge: return "wgmma 128x128x64 s4 split";
    case Choice::TmaWide: return "wgmma tma 128x256x64 s4";
    case Choice::TmaLarge: return "wgmma tma 128x128x64 s6";
    case Choice::TmaSplit: return "wgmma tma 128x256x64 s4 split";
    case Choice::TmaSplitLarge: return "wgmma tma 128x128x64 s6 split";
    case Choice::TmaPair: return "wgmma tma 128x128x64 s6 pair";
    case Choice::TmaWidePair: return "wgmma tma 128x256x64 s4 pair";
    case Choice::TmaWideLoop: return "wgmma tma 128x256x64 s4 persistent";
    case Choice::Verify32: return "verify 32x32x64 s8";
    case Choice::Verify64: return "verify 64x32x64 s8";
    case Choice::Verify64Wide: return "verify 64x64x64 s6";
    case Choice::Verify64Narrow: return "verify 64x16x64 s8";
    case Choice::SplitVerify32: return "verify 32x32x64 s8 split";
    case Choice::SplitVerify64: return "verify 64x32x64 s8 split";
    case Choice::Count: break;
  }
  return "?";
}

// Shared-memory opt-in for every kernel, once per engine (outside any graph capture).
template <class T, bool SPLIT = false>
void allow_shared() {
  cudaFuncSetAttribute(gemm_kernel<T, Mode::Plain>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES);
  if constexpr (T::BM * T::BN <= 128 * 128)
    cudaFuncSetAttribute(gemm_kernel<T, Mode::Sliced>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES);
  if constexpr (SPLIT)
    cudaFuncSetAttribute(gemm_kernel<T, Mode::Split>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES);
}

void allow_shared_all(int optin_bytes) {
  allow_shared<Medium>();
  allow_shared<MediumDeep>();
  allow_shared<Medium128, true>();
  allow_shared<Large, true>();
  allow_shared<LargeDeep>();
  allow_shared<Wide>();
  allow_shared<Tall>();
  allow_shared<Stream, true>();
  allow_shared<StreamDeep>();
  allow_shared<Verify32, true>();
  allow_shared<Verify64, true>();
  allow_shared<Verify64Wide>();
  allow_shared<Verify64Narrow>();
  allow_wgmma_shared();
  allow_tma_shared();
  allow_decode_shared(optin_bytes);
}

}  // namespace

GemmEngine::GemmEngine() : GemmEngine(cuda_features()) {}

GemmEngine::GemmEngine(const CudaFeatures& features)
    : clusters_(features.clusters), wgmma_(features.wgmma), shared_optin_(features.shared_optin) {
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
  return choice_name(fitting(choose(m, n, k, sm_count_, clusters_, wgmma_, pinned_tile_), shared_optin_));
}

int GemmEngine::tile_count() { return static_cast<int>(Choice::Count); }

void set_verify_tiles(bool on) { verify_tiles.store(on, std::memory_order_relaxed); }

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
                static_cast<int>(w.cols), fault_reverse_k_ && m > 16 ? 1 : 0};
  // 17..32-row windows on the pipeline where it takes them (set_decode_pipe_rows32; launch_decode routes there)
  if (m > 16 && m <= 32 && pinned_tile_ < 0 && pipe_takes_window(args)) return launch_decode(args, sm_count_, stream);
  switch (fitting(choose(m, w.rows, w.cols, sm_count_, clusters_, wgmma_, pinned_tile_), shared_optin_)) {
    case Choice::Decode: return launch_decode(args, sm_count_, stream);
    case Choice::Medium: return launch<Medium>(args, stream);
    case Choice::Medium128: return launch<Medium128>(args, stream);
    case Choice::Large: return launch<Large>(args, stream);
    case Choice::LargeDeep: return launch<LargeDeep>(args, stream);
    case Choice::Wide: return launch<Wide>(args, stream);
    case Choice::Tall: return launch<Tall>(args, stream);
    case Choice::Stream: return launch<Stream>(args, stream);
    case Choice::StreamDeep: return launch<StreamDeep>(args, stream);
    case Choice::MediumDeep: return launch<MediumDeep>(args, stream);
    case Choice::SplitMedium128: return launch_split<Medium128>(args, stream);
    case Choice::SplitLarge: return launch_split<Large>(args, stream);
    case Choice::SplitStream: return launch_split<Stream>(args, stream);
    case Choice::WgmmaWide: return launch_wgmma(WgmmaTile::Wide, Mode::Plain, args, stream);
    case Choice::WgmmaLarge: return launch_wgmma(WgmmaTile::Large, Mode::Plain, args, stream);
    case Choice::WgmmaLargeDuo: return launch_wgmma(WgmmaTile::LargeDuo, Mode::Plain, args, stream);
    case Choice::WgmmaSplit: return launch_wgmma(WgmmaTile::Wide, Mode::Split, args, stream);
    case Choice::WgmmaSplitLarge: return launch_wgmma(WgmmaTile::Large, Mode::Split, args, stream);
    case Choice::TmaWide: return launch_tma(WgmmaTile::Wide, Mode::Plain, args, stream);
    case Choice::TmaLarge:
      return launch_tma(WgmmaTile::Large, slice_count(args.k) > 1 ? Mode::Sliced : Mode::Plain, args, stream);
    case Choice::TmaSplit: return launch_tma(WgmmaTile::Wide, Mode::Split, args, stream);
    case Choice::TmaSplitLarge: return launch_tma(WgmmaTile::Large, Mode::Split, args, stream);
    case Choice::TmaPair:
      return launch_tma(WgmmaTile::LargePair, slice_count(args.k) > 1 ? Mode::Sliced : Mode::Plain, args, stream);
    case Choice::TmaWidePair: return launch_tma(WgmmaTile::WidePair, Mode::Plain, args, stream);
    case Choice::TmaWideLoop: return launch_tma(WgmmaTile::WideLoop, Mode::Plain, args, stream);
    case Choice::Verify32: return launch<Verify32>(args, stream);
    case Choice::Verify64: return launch<Verify64>(args, stream);
    case Choice::Verify64Wide: return launch<Verify64Wide>(args, stream);
    case Choice::Verify64Narrow: return launch<Verify64Narrow>(args, stream);
    case Choice::SplitVerify32: return launch_split<Verify32>(args, stream);
    case Choice::SplitVerify64: return launch_split<Verify64>(args, stream);
    case Choice::Count: break;
  }
  return ok_status();
}

}  // namespace ls::cuda
