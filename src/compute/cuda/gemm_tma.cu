// The warp-specialised wgmma GEMM (sm_90a): a producer warp streams the K tiles of x and W into a ring of shared
// stages with the tensor copy engine (TMA, 128-byte swizzle, zero fill outside the matrices), two consumer warpgroups
// of 64 rows multiply each tile as four m64nNk16 wgmma steps in ascending K order on one fp32 accumulator (the
// canonical order, as gemm_wgmma.cu) and hand the stage back through an mbarrier. Sliced K: the slices in turn with a
// second register set (setmaxnreg), or split over a cluster (one CTA per slice, slice sums added in slice order).
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <type_traits>

#include "compute/cuda/gemm_async.cuh"
#include "compute/cuda/gemm_tile.cuh"
#include "compute/cuda/gemm_wgmma.cuh"

namespace ls::cuda::gemm_detail {
namespace {

// T: Tile<128, BN, 8, 1, STAGES>; warps 0..7 consume (warpgroups 0, 1), warpgroup 2 produces (its first thread).
template <class T>
constexpr int tma_threads() {
  return T::THREADS + 128;
}
// Sliced (and the persistent loop): a zero region [BN rows][128 bytes] after the stages, read by the +0 wgmma that
// restarts each later slice (each later output tile).
template <class T, Mode MODE, bool LOOP>
constexpr int zero_bytes() {
  return MODE == Mode::Sliced || LOOP ? T::BN * 128 : 0;
}
// Stages (1024-aligned), the zeros, then full[] and empty[] mbarriers.
template <class T, Mode MODE, bool LOOP = false>
constexpr int tma_shared_bytes() {
  return T::SMEM_BYTES + zero_bytes<T, MODE, LOOP>() + 1024 + 2 * T::STAGES * 8;
}
#ifdef LS_WGMMA_DEVICE
// Pair: the CTAs of a cluster of two (adjacent row tiles, one column tile) each load half of the W box and multicast
// it to both; a stage is refilled once the consumers of both CTAs handed it back.
__device__ __forceinline__ void tma_load_both(uint32_t dst, const CUtensorMap* map, int k, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(bar), "h"(static_cast<uint16_t>(3))
      : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// Arrives on the barrier at the same shared offset in CTA `peer` of the cluster.
__device__ __forceinline__ void barrier_arrive_peer(uint32_t bar, uint32_t peer) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(peer)
      : "memory");
}
// barrier_wait, ordered after the cluster's arrivals (the peer's consumers released the stage).
__device__ __forceinline__ void barrier_wait_cluster(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Every thread of the cluster (divergent callers allowed).
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Sliced: the consumers hold the chain and the running slice total (2 x BN/2 fp32) under setmaxnreg.
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
__device__ __forceinline__ void consumer_barrier() {  // the two consumer warpgroups only (named barrier 1)
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}
#endif

// MODE: Plain (one chain over all of K), Sliced (the slices in turn: each later slice restarts from a +0 wgmma, its
// sum folded into a second register set in slice order) or Split (this CTA computes slice split_slice() only; the
// cluster adds the slice sums, gemm_tile.cuh). PAIR (Plain / Sliced): clusters of two row tiles share the W loads.
// LOOP (Plain): persistent CTAs walk output tiles t = blockIdx.x, + gridDim.x, ... (row tiles fastest); the ring of
// stages runs on across tiles, so the producer loads the next tile while the consumers store this one.
template <class T, Mode MODE, bool PAIR, bool LOOP>
__global__ void __launch_bounds__(tma_threads<T>(), 1)
    tma_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w, GemmArgs args) {
#ifdef LS_WGMMA_DEVICE
  static_assert(T::BM == 128 && T::WARPS_M == 8 && T::WARPS_N == 1, "two consumer warpgroups of m64");
  static_assert(T::THREADS == 256, "consumer_barrier counts two warpgroups");
  constexpr bool SLICED = MODE == Mode::Sliced, SPLIT = MODE == Mode::Split;
  static_assert(!(PAIR && SPLIT), "a pair shares W within one slice");
  static_assert(!LOOP || (MODE == Mode::Plain && !PAIR), "the persistent loop runs plain tiles");
  static_assert(!SPLIT || T::BM * T::BN * 4 <= T::SMEM_BYTES, "the slice sums fit the stages");
  extern __shared__ __align__(128) unsigned char shared_raw[];
  unsigned char* aligned = shared_raw + ((1024 - (smem_address(shared_raw) & 1023)) & 1023);
  const uint32_t stages = smem_address(aligned), zeros = stages + T::SMEM_BYTES;
  const uint32_t full = zeros + zero_bytes<T, MODE, LOOP>(), empty = full + T::STAGES * 8;  // 8-byte mbarriers
  const int tid = threadIdx.x;
  // Output tiles ("jobs"): one per CTA from blockIdx (row tiles fastest, as gemm_wgmma.cu), or the persistent loop's.
  const int row_tiles = (args.m + T::BM - 1) / T::BM;
  const int jobs = LOOP ? row_tiles * ((args.n + T::BN - 1) / T::BN) : 1;
  const int job_first = LOOP ? static_cast<int>(blockIdx.x) : 0, job_stride = LOOP ? static_cast<int>(gridDim.x) : 1;
  auto job_row0 = [&](int job) { return LOOP ? (job % row_tiles) * T::BM : static_cast<int>(blockIdx.x) * T::BM; };
  auto job_col0 = [&](int job) { return LOOP ? (job / row_tiles) * T::BN : static_cast<int>(blockIdx.y) * T::BN; };
  const int all_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int first_tile = SPLIT ? split_slice() * kSliceTiles : 0;
  const int k_tiles = SPLIT && gridDim.z > 1 ? min(kSliceTiles, all_tiles - first_tile) : all_tiles;
  const uint32_t pair_rank = PAIR ? cluster_rank() : 0;
  if (tid == 0) {
    for (int s = 0; s < T::STAGES; ++s) {
      barrier_init(full + s * 8, 1);
      barrier_init(empty + s * 8, PAIR ? 2 * T::THREADS : T::THREADS);  // pair: the consumers of both CTAs
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (SLICED || LOOP) {
    for (int i = tid; i < zero_bytes<T, MODE, LOOP>() / 16; i += tma_threads<T>())
      reinterpret_cast<uint4*>(aligned + T::SMEM_BYTES)[i] = make_uint4(0, 0, 0, 0);
    fence_proxy_async();  // the +0 wgmma reads the zeros through the async proxy
  }
  if constexpr (PAIR) {
    cluster_sync_all();  // both CTAs' barriers are initialised before either multicasts or arrives remotely
  } else {
    __syncthreads();
  }

  if (tid >= T::THREADS) {  // producer warpgroup
    if constexpr (SLICED) registers_down<kProducerRegisters>();
    if (tid == T::THREADS) {
      for (int job = job_first, g0 = 0; job < jobs; job += job_stride, g0 += k_tiles) {
        const int row0 = job_row0(job), col0 = job_col0(job);
        for (int step = 0; step < k_tiles; ++step) {
          const int g = g0 + step, s = g % T::STAGES;  // g: the ring's step over all of this CTA's output tiles
          if constexpr (PAIR) {
            if (g >= T::STAGES) barrier_wait_cluster(empty + s * 8, (g / T::STAGES - 1) & 1);
          } else {
            if (g >= T::STAGES) barrier_wait(empty + s * 8, (g / T::STAGES - 1) & 1);
          }
          const int kt = first_tile + (args.reverse_k ? k_tiles - 1 - step : step);
          const uint32_t a = stages + s * T::STAGE_ELEMS * 2;
          barrier_expect(full + s * 8, T::STAGE_ELEMS * 2);  // pair: x, this CTA's W half and the peer's
          tma_load(a, &map_x, kt * kBlockK, row0, full + s * 8);
          if constexpr (PAIR) {
            const int half = static_cast<int>(pair_rank) * (T::BN / 2);
            tma_load_both(a + (T::BM + half) * 128, &map_w, kt * kBlockK, col0 + half, full + s * 8);
          } else {
            tma_load(a + T::BM * 128, &map_w, kt * kBlockK, col0, full + s * 8);
          }
        }
      }
    }
    __syncwarp();
  } else {
    if constexpr (SLICED) registers_up<kConsumerRegisters>();
    float acc[1][T::NI][4];
    float total[1][SLICED ? T::NI : 1][4];  // sliced: slice sums so far, in slice order
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[0][j][e] = 0.0f;
    const int group = tid >> 7;
    // One K tile; RESTART: first a +0 wgmma, so the chain starts as from zeroed registers (a later slice, or each
    // output tile of the persistent loop: peeled, a branch around it had ptxas serialise the loop's wgmmas, C7520).
    auto k_step = [&](int g0, int step, auto restart) {
      const int g = g0 + step, s = g % T::STAGES;
      barrier_wait(full + s * 8, (g / T::STAGES) & 1);
      const uint32_t stage = stages + s * T::STAGE_ELEMS * 2;
      const uint32_t a_base = stage + group * 64 * 128, b_base = stage + T::BM * 128;
      wgmma_fence();
      if (decltype(restart)::value || (SLICED && step > 0 && step % kSliceTiles == 0))
        wgmma_k16(Width<T::BN>{}, &acc[0][0][0], descriptor(zeros), descriptor(zeros), 0);
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
            for (int e = 0; e < 4; ++e)
              total[0][j][e] = first ? acc[0][j][e] : __fadd_rn(total[0][j][e], acc[0][j][e]);
        } else {
          wgmma_wait<1>();
        }
      } else {
        wgmma_wait<1>();  // the previous step's wgmmas finished: hand their stage back
      }
      if (g > 0) {
        const uint32_t release = empty + ((g - 1) % T::STAGES) * 8;
        if constexpr (PAIR) {
          // Every consumer thread (one arrival per warp, under a lane branch, had ptxas serialise the wgmmas:
          // C7515).
          barrier_arrive(release);
          barrier_arrive_peer(release, pair_rank ^ 1);
        } else {
          barrier_arrive(release);
        }
      }
    };
    for (int job = job_first, g0 = 0; job < jobs; job += job_stride, g0 += k_tiles) {
      if constexpr (LOOP) {
        k_step(g0, 0, std::true_type{});
        for (int step = 1; step < k_tiles; ++step) k_step(g0, step, std::false_type{});
      } else {
        for (int step = 0; step < k_tiles; ++step) k_step(g0, step, std::false_type{});
      }
      wgmma_wait<0>();
      if constexpr (SPLIT) {
        consumer_barrier();  // both warpgroups are done reading the stages: the slice sums go over them
        write_part<T>(acc, reinterpret_cast<float*>(aligned));
      } else if constexpr (SLICED) {
        store_tile<T>(args, total, job_row0(job), job_col0(job));
      } else {
        store_tile<T>(args, acc, job_row0(job), job_col0(job));
      }
    }
  }
  if constexpr (SPLIT)
    split_sum<T>(args, reinterpret_cast<float*>(aligned), job_row0(0), job_col0(0), tma_threads<T>());
  if constexpr (PAIR) cluster_sync_all();  // neither CTA leaves while the other may still arrive on its barriers
#else
  __trap();  // the engine runs these only where cuda_features().wgmma (sm_90a code on a 9.0 device)
#endif
}

using TmaWideTile = Tile<128, 256, 8, 1, 4>;   // 48 KB stages, 192 KB
using TmaLargeTile = Tile<128, 128, 8, 1, 6>;  // 32 KB stages, 192 KB (sliced: + 16 KB of zeros)

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, looked up once through the runtime (no link to libcuda).
EncodeTiled encoder() {
  static EncodeTiled function = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      function = reinterpret_cast<EncodeTiled>(pointer);
    cudaGetLastError();
  });
  return function;
}

// A [rows, k] bf16 row-major matrix as boxes of [box_rows, 64], 128-byte swizzle, zeros outside.
Status encode(CUtensorMap* map, const void* base, int rows, int k, int box_rows) {
  const EncodeTiled function = encoder();
  if (function == nullptr) return Status(ErrorCode::DeviceUnavailable, "gemm: no cuTensorMapEncodeTiled in the driver");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBlockK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = function(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
                                   box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return Status(ErrorCode::InvalidArgument, "gemm: tensor map refused (error " + std::to_string(result) +
                                                  ") for [" + std::to_string(rows) + ", " + std::to_string(k) + "]");
  return ok_status();
}

template <class T, Mode MODE, bool PAIR = false, bool LOOP = false>
Status launch_tma_tile(const GemmArgs& args, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  if (MODE == Mode::Plain && slices > 1)
    return Status(ErrorCode::InvalidArgument, "gemm: the plain TMA wgmma tiles run one slice only, K = " +
                                                  std::to_string(args.k));
  if (MODE == Mode::Split && slices > kMaxClusterSlices)
    return Status(ErrorCode::InvalidArgument, "gemm: the TMA split tiles hold at most " +
                                                  std::to_string(kMaxClusterSlices) + " slices, K = " +
                                                  std::to_string(args.k));
  if ((args.n + T::BN - 1) / T::BN > kMaxWgmmaColumnTiles)
    return Status(ErrorCode::InvalidArgument, "gemm: N = " + std::to_string(args.n) +
                                                  " is more column tiles than the wgmma grid holds (" +
                                                  std::to_string(kMaxWgmmaColumnTiles) + ")");
  CUtensorMap map_x, map_w;
  LS_RETURN_IF_ERROR(encode(&map_x, args.x, args.m, args.k, T::BM));
  LS_RETURN_IF_ERROR(encode(&map_w, args.w, args.n, args.k, PAIR ? T::BN / 2 : T::BN));
  cudaLaunchConfig_t config = {};
  const int row_tiles = (args.m + T::BM - 1) / T::BM;
  const int column_tiles = (args.n + T::BN - 1) / T::BN;
  config.gridDim = dim3(PAIR ? (row_tiles + 1) / 2 * 2 : row_tiles, column_tiles, MODE == Mode::Split ? slices : 1);
  if constexpr (LOOP) {  // persistent: one CTA per SM at most
    int device = 0, sm_count = 0;
    LS_CUDA_TRY(cudaGetDevice(&device));
    LS_CUDA_TRY(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    config.gridDim = dim3(static_cast<unsigned>(std::min<int64_t>(static_cast<int64_t>(row_tiles) * column_tiles,
                                                                  std::max(sm_count, 1))));
  }
  config.blockDim = dim3(tma_threads<T>());
  config.dynamicSmemBytes = tma_shared_bytes<T, MODE, LOOP>();
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = PAIR ? 2 : 1;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = MODE == Mode::Split ? slices : 1;
  config.attrs = attribute;
  config.numAttrs = MODE == Mode::Split || PAIR ? 1 : 0;
  LS_CUDA_TRY(cudaLaunchKernelEx(&config, tma_kernel<T, MODE, PAIR, LOOP>, map_x, map_w, args));
  return ok_status();
}

template <class T, Mode MODE, bool PAIR = false, bool LOOP = false>
void allow_tma() {
  cudaFuncSetAttribute(tma_kernel<T, MODE, PAIR, LOOP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       tma_shared_bytes<T, MODE, LOOP>());
}

}  // namespace

Status launch_tma(WgmmaTile tile, Mode mode, const GemmArgs& args, cudaStream_t stream) {
  if (tile == WgmmaTile::Wide) {
    if (mode == Mode::Sliced)
      return Status(ErrorCode::InvalidArgument, "gemm: the TMA 128x256 tile cannot add K = " +
                                                    std::to_string(args.k) + " in slices outside split mode");
    return mode == Mode::Split ? launch_tma_tile<TmaWideTile, Mode::Split>(args, stream)
                               : launch_tma_tile<TmaWideTile, Mode::Plain>(args, stream);
  }
  if (tile == WgmmaTile::LargeDuo)
    return Status(ErrorCode::InvalidArgument, "gemm: no two-CTA TMA tile");
  if (tile == WgmmaTile::LargePair) {
    if (mode == Mode::Split) return Status(ErrorCode::InvalidArgument, "gemm: the TMA pair tiles have no split mode");
    return mode == Mode::Sliced ? launch_tma_tile<TmaLargeTile, Mode::Sliced, true>(args, stream)
                                : launch_tma_tile<TmaLargeTile, Mode::Plain, true>(args, stream);
  }
  if (tile == WgmmaTile::WideLoop) {
    if (mode != Mode::Plain)
      return Status(ErrorCode::InvalidArgument, "gemm: the persistent TMA 128x256 tile runs one slice only, K = " +
                                                    std::to_string(args.k));
    return launch_tma_tile<TmaWideTile, Mode::Plain, false, true>(args, stream);
  }
  if (tile == WgmmaTile::WidePair) {
    if (mode != Mode::Plain)
      return Status(ErrorCode::InvalidArgument, "gemm: the TMA 128x256 pair tile runs one slice only, K = " +
                                                    std::to_string(args.k));
    return launch_tma_tile<TmaWideTile, Mode::Plain, true>(args, stream);
  }
  switch (mode) {
    case Mode::Sliced: return launch_tma_tile<TmaLargeTile, Mode::Sliced>(args, stream);
    case Mode::Split: return launch_tma_tile<TmaLargeTile, Mode::Split>(args, stream);
    case Mode::Plain: break;
  }
  return launch_tma_tile<TmaLargeTile, Mode::Plain>(args, stream);
}

Status encode_bf16_map(CUtensorMap* map, const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                       const cuuint32_t* box) {
  const EncodeTiled function = encoder();
  if (function == nullptr) return Status(ErrorCode::DeviceUnavailable, "gemm: no cuTensorMapEncodeTiled in the driver");
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result = function(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank),
                                   const_cast<void*>(base), dims, strides, box, element_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return Status(ErrorCode::InvalidArgument, "gemm: " + std::to_string(rank) + "D tensor map refused (error " +
                                                  std::to_string(result) + ") for dims " + std::to_string(dims[0]) +
                                                  " x " + std::to_string(dims[1]) +
                                                  (rank > 2 ? " x " + std::to_string(dims[2]) : std::string()));
  return ok_status();
}

void allow_tma_shared() {
  encoder();  // the driver entry point is looked up here, outside any graph capture
  allow_tma<TmaWideTile, Mode::Plain>();
  allow_tma<TmaWideTile, Mode::Split>();
  allow_tma<TmaLargeTile, Mode::Plain>();
  allow_tma<TmaLargeTile, Mode::Sliced>();
  allow_tma<TmaLargeTile, Mode::Split>();
  allow_tma<TmaLargeTile, Mode::Sliced, true>();
  allow_tma<TmaLargeTile, Mode::Plain, true>();
  allow_tma<TmaWideTile, Mode::Plain, true>();
  allow_tma<TmaWideTile, Mode::Plain, false, true>();
}

}  // namespace ls::cuda::gemm_detail
