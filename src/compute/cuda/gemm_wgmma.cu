// The wgmma (sm_90a) tile GEMM: 128 rows per CTA as two warpgroups of 64, 128 or 256 columns, K tiles of 64 staged
// by cp.async into the same 128-byte-swizzled shared layout as the mma.sync tiles (it is wgmma's 128B swizzle), one
// m64nNk16 wgmma per 16-wide K step in ascending order on one fp32 accumulator: the canonical order of
// gemm_device.cuh provided the wgmma k16 step adds like the mma.sync one (the pinned invariance test decides).
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "compute/cuda/gemm_tile.cuh"

namespace ls::cuda::gemm_detail {
namespace {

template <int N>
struct Width {};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LS_WGMMA_DEVICE 1
#endif

#ifdef LS_WGMMA_DEVICE
// Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t descriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (1ull << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) |
         (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// cp.async wrote the stages through the generic proxy; wgmma reads them through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// D [64, N] fp32 (this thread's N/2 values, the m16n8 layout repeated along N) = A [64, 16] * B [N, 16]^T + D
// (accumulate = 1) or + 0 ignored (accumulate = 0).
__device__ __forceinline__ void wgmma_k16(Width<128>, float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_k16(Width<256>, float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
#endif

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
    if (next < k_tiles) load_stage<T>(args, shared + (next % T::STAGES) * T::STAGE_ELEMS, row0, col0, tile_at(next), tid);
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
  __trap();  // the engine runs these only where wgmma_built() (sm_90a code on a 9.0 device)
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
    return Status(ErrorCode::InvalidArgument, "gemm: N = " + std::to_string(args.n) + " is more column tiles than " +
                                                  "the wgmma grid holds (" + std::to_string(kMaxWgmmaColumnTiles) + ")");
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
void allow(int& binary_version) {
  cudaFuncSetAttribute(wgmma_kernel<T, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes<T, MODE>());
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, wgmma_kernel<T, MODE>) == cudaSuccess)
    binary_version = std::min(binary_version, attributes.binaryVersion);
}

bool g_wgmma_built = false;

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
  if (tile == WgmmaTile::LargeDuo) {
    if (sliced || mode != Mode::Plain)
      return Status(ErrorCode::InvalidArgument, "gemm: the two-CTA 128x128 wgmma tile runs one slice only, K = " +
                                                    std::to_string(args.k));
    return launch_tile<LargeDuoTile, Mode::Plain>(args, stream);
  }
  if (mode == Mode::Split) return launch_tile<LargeTile, Mode::Split>(args, stream);
  return sliced ? launch_tile<LargeTile, Mode::Sliced>(args, stream) : launch_tile<LargeTile, Mode::Plain>(args, stream);
}

void allow_wgmma_shared() {
  int binary_version = 1000;
  allow<WideTile, Mode::Plain>(binary_version);
  allow<WideTile, Mode::Split>(binary_version);
  allow<LargeTile, Mode::Plain>(binary_version);
  allow<LargeTile, Mode::Sliced>(binary_version);
  allow<LargeTile, Mode::Split>(binary_version);
  allow<LargeDuoTile, Mode::Plain>(binary_version);
  int device = 0, major = 0, minor = 0;
  g_wgmma_built = binary_version >= 90 && binary_version < 100 && cudaGetDevice(&device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                  major == 9 && minor == 0;
}

bool wgmma_built() { return g_wgmma_built; }

}  // namespace ls::cuda::gemm_detail
