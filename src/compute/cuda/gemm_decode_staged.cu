// The staged decode GEMM (m <= 16, one slice: K <= 2048): each warp owns TILES column groups of 8 and copies their
// whole weight share [8 TILES, K] into shared memory before the programmatic wait (cp.async, one commit group per 256
// of K), so the weights stream while the kernel before it still runs; after the wait the CTA copies x [m, K] once,
// and each warp runs its chains from shared memory, starting on a K group as soon as it has landed. Fragments come
// from plain 32-bit shared loads of unswizzled rows padded by 16 bytes (bank-conflict free): the values ldmatrix
// gives the other decode kernels, fed to the same mma steps in the same order, so each output is the canonical chain
// of gemm_device.cuh (64-wide K tiles, the tail zero-filled) and the bits are the other kernels'.
#include <cstdint>
#include <span>
#include <string>

#include "compute/cuda/decode_norm.cuh"
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

// A staged launch: up to kStagedMax matrices of one K over the same x (q / k / v), CTAs [first_block[i],
// first_block[i + 1]) run args[i]; x is args[0].x, or the norm prologue's output when norm.weight is set.
constexpr int kStagedMax = 4;
struct StagedLaunch {
  GemmArgs args[kStagedMax];
  int first_block[kStagedMax + 1];
  int count;
  StagedNorm norm;
};

__device__ __forceinline__ uint32_t shared_word(const unsigned char* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// x_rows [m, pitch] = x [m, k], zero from k to k_pad: kLoads chunks per thread in flight before their stores.
template <int WARPS>
__device__ __forceinline__ void stage_x(const __nv_bfloat16* x, int m, int k, int k_pad, int pitch,
                                        unsigned char* x_rows) {
  constexpr int kLoads = 8;
  const int x_chunks = k_pad / 8, total = m * x_chunks;
  for (int first = threadIdx.x; first < total; first += 32 * WARPS * kLoads) {
    uint4 v[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * 32 * WARPS, row = index / x_chunks, at = (index % x_chunks) * 8;
      v[i] = index < total && at < k ? *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(row) * k + at)
                                     : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * 32 * WARPS, row = index / x_chunks, at = (index % x_chunks) * 8;
      if (index < total) *reinterpret_cast<uint4*>(x_rows + row * pitch + at * 2) = v[i];
    }
  }
}

// One CTA's work on `args`: warp w of CTA `block` owns output columns [(block WARPS + w) C, + C), C = 8 TILES
// (SWIGLU: C = 8, its two tiles the gate rows c.. and the up rows F + c.. of gate_up [2F, K]).
template <int WARPS, int TILES, int A_ROWS, bool SWIGLU>
__device__ __forceinline__ void staged_body(const GemmArgs& args, const StagedNorm& norm, int block, bool write_h) {
  static_assert(kGroups <= 8, "wait_groups_left covers 8 groups");
  static_assert(!SWIGLU || TILES == 2, "SwiGLU items pair 8 gate and 8 up columns");
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  const int out_n = SWIGLU ? args.n / 2 : args.n;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pitch = staged_pitch(args.k);
  const int k_pad = (pitch - 16) / 2;  // K in whole 64-wide tiles
  const int steps = k_pad / 16;
  unsigned char* w_rows = shared_raw + warp * 8 * TILES * pitch;  // [8 TILES, k_pad] bf16, this warp's columns
  unsigned char* x_rows = shared_raw + WARPS * 8 * TILES * pitch;  // [m, k_pad] bf16, shared by the CTA
  const int c_first = (block * WARPS + warp) * kItemCols;
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
          const int out_c = c_first + (SWIGLU ? (row & 7) : row);
          const int c = SWIGLU && row >= 8 ? out_n + out_c : out_c;
          const bool inside = out_c < out_n && k < args.k;
          copy_chunk(smem_address(w_rows + row * pitch + k * 2),
                     args.w + (inside ? static_cast<int64_t>(c) * args.k + k : 0), inside);
        }
      }
    }
    commit_group();
  }

  // x is written by the kernel before (or computed from what it wrote): wait for it, then stage rows < m once for
  // the CTA (zero past K).
  wait_for_previous_kernel();
  if (norm.weight) {
    stage_normed_x<32 * WARPS>(norm, args.m, args.k, k_pad, x_rows, PitchedRows{pitch},
                               reinterpret_cast<float*>(x_rows + args.m * pitch), write_h);
  } else {
    stage_x<WARPS>(args.x, args.m, args.k, k_pad, pitch, x_rows);
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

  if constexpr (SWIGLU) {
    const int c = c_first + q * 2;
#pragma unroll
    for (int half = 0; half < A_ROWS / 8; ++half)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        store_swiglu(args, r + 8 * half, c + e, out_n, acc[0][2 * half + e], acc[1][2 * half + e]);
  } else {
#pragma unroll
    for (int j = 0; j < TILES; ++j) {
      const int c = c_first + j * 8 + q * 2;
      store_pair(args, r, c, acc[j][0], acc[j][1]);
      if constexpr (A_ROWS == 16) store_pair(args, r + 8, c, acc[j][2], acc[j][3]);
    }
  }
}

template <int WARPS, int TILES, int A_ROWS, bool SWIGLU>
__global__ void __launch_bounds__(32 * WARPS) decode_staged_kernel(StagedLaunch launch) {
  int i = 0;
  while (i + 1 < launch.count && static_cast<int>(blockIdx.x) >= launch.first_block[i + 1]) ++i;
  staged_body<WARPS, TILES, A_ROWS, SWIGLU>(launch.args[i], launch.norm, blockIdx.x - launch.first_block[i],
                                            blockIdx.x == 0);
}

int optin_shared_bytes = 0;  // the device's opt-in limit, set by allow_staged_shared

// Shared memory of a staged launch: the weight rows of every warp, then x [m, pitch], then the norm's inverse_rms
// [16] fp32. All of it dynamic: the opt-in limit is for dynamic plus static bytes.
int staged_shared_bytes(int warps, int tiles, int m, int k) {
  return (warps * 8 * tiles + m) * staged_pitch(k) + 16 * static_cast<int>(sizeof(float));
}

// Whether every staged kernel took the shared-memory opt-in (else nothing launches them: the streaming kernels run).
bool staged_ready = false;

template <int WARPS, int TILES, bool SWIGLU>
Status launch_staged_kernel(StagedLaunch& launch, cudaStream_t stream) {
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  launch.first_block[0] = 0;
  for (int i = 0; i < launch.count; ++i) {
    const int out_n = SWIGLU ? launch.args[i].n / 2 : launch.args[i].n;
    launch.first_block[i + 1] = launch.first_block[i] + (out_n + WARPS * kItemCols - 1) / (WARPS * kItemCols);
  }
  const GemmArgs& args = launch.args[0];
  const int smem = staged_shared_bytes(WARPS, TILES, args.m, args.k);
  if (args.m <= 8)
    return launch_programmatic(decode_staged_kernel<WARPS, TILES, 8, SWIGLU>, launch.first_block[launch.count],
                               32 * WARPS, smem, stream, launch);
  return launch_programmatic(decode_staged_kernel<WARPS, TILES, 16, SWIGLU>, launch.first_block[launch.count],
                             32 * WARPS, smem, stream, launch);
}

template <int WARPS, int TILES>
Status launch_staged_config(const GemmArgs& args, int sm_count, int fallback, cudaStream_t stream) {
  if (!staged_ready || staged_shared_bytes(WARPS, TILES, args.m, args.k) > optin_shared_bytes)
    return launch_stream_variant(fallback, args, sm_count, stream);
  StagedLaunch launch{};
  launch.args[0] = args;
  launch.count = 1;
  return launch_staged_kernel<WARPS, TILES, false>(launch, stream);
}

// The norm launches' configurations (kStagedNames; SwiGLU takes the 16-column ones, 2 or 3).
int norm_group_config = 0, norm_swiglu_config = 2;

Status launch_staged_index(int config, bool swiglu, StagedLaunch& launch, cudaStream_t stream) {
  if (swiglu) {
    if (config == 3) return launch_staged_kernel<2, 2, true>(launch, stream);
    return launch_staged_kernel<1, 2, true>(launch, stream);
  }
  switch (config) {
    case 0: return launch_staged_kernel<1, 1, false>(launch, stream);
    case 1: return launch_staged_kernel<2, 1, false>(launch, stream);
    case 2: return launch_staged_kernel<1, 2, false>(launch, stream);
    case 3: return launch_staged_kernel<2, 2, false>(launch, stream);
    default: return launch_staged_kernel<4, 1, false>(launch, stream);
  }
}

template <int WARPS, int TILES, bool SWIGLU>
bool allow_staged_kernel_shared(int optin_bytes) {
  const bool eight = cudaFuncSetAttribute(decode_staged_kernel<WARPS, TILES, 8, SWIGLU>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes) == cudaSuccess;
  const bool sixteen = cudaFuncSetAttribute(decode_staged_kernel<WARPS, TILES, 16, SWIGLU>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes) == cudaSuccess;
  return eight && sixteen;
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

bool staged_group_fits(int config, int m, int k) {
  constexpr int kWarps[kStagedConfigs] = {1, 2, 1, 2, 4}, kTiles[kStagedConfigs] = {1, 1, 2, 2, 1};
  if (config < 0 || config >= kStagedConfigs || m < 1 || m > 16 || slice_count(k) > 1 || !staged_ready) return false;
  return staged_shared_bytes(kWarps[config], kTiles[config], m, k) <= optin_shared_bytes;
}

Status launch_staged_group(int config, const GemmArgs* args, int count, cudaStream_t stream) {
  StagedLaunch launch{};
  launch.count = count;
  for (int i = 0; i < count; ++i) launch.args[i] = args[i];
  return launch_staged_index(config, false, launch, stream);
}

void allow_staged_shared(int optin_bytes) {
  optin_shared_bytes = optin_bytes;
  bool ready = allow_staged_kernel_shared<1, 1, false>(optin_bytes);
  ready = allow_staged_kernel_shared<2, 1, false>(optin_bytes) && ready;
  ready = allow_staged_kernel_shared<1, 2, false>(optin_bytes) && ready;
  ready = allow_staged_kernel_shared<2, 2, false>(optin_bytes) && ready;
  ready = allow_staged_kernel_shared<4, 1, false>(optin_bytes) && ready;
  ready = allow_staged_kernel_shared<1, 2, true>(optin_bytes) && ready;
  ready = allow_staged_kernel_shared<2, 2, true>(optin_bytes) && ready;
  cudaGetLastError();  // a refused opt-in is reported through staged_ready, not left for the next launch
  staged_ready = ready;
}

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

bool decode_norm_fits(int64_t m, int64_t k) {
  // the widest launch (2 warps x 16 weight rows) must fit the device's shared memory
  return gemm_detail::staged_ready && m >= 1 && m <= 16 && k >= 8 && k % 8 == 0 && k <= gemm_detail::kUnslicedK &&
         gemm_detail::staged_shared_bytes(2, 2, static_cast<int>(m), static_cast<int>(k)) <=
             gemm_detail::optin_shared_bytes;
}

void set_decode_norm_configs(int group_config, int swiglu_config) {
  gemm_detail::norm_group_config = group_config >= 0 && group_config < gemm_detail::kStagedConfigs ? group_config : 0;
  gemm_detail::norm_swiglu_config = swiglu_config == 3 || swiglu_config == 4 ? swiglu_config : 2;
}

namespace {

// The checks both norm launches share; the StagedLaunch's norm from `norm`.
Status check_decode_norm(const DecodeNorm& norm, int64_t m, int64_t k, const char* what,
                         gemm_detail::StagedNorm& out) {
  if (!decode_norm_fits(m, k))
    return Status(ErrorCode::InvalidArgument, std::string(what) + " takes 1..16 rows and K <= " +
                                                  std::to_string(gemm_detail::kUnslicedK) +
                                                  " (a multiple of 8), got m " + std::to_string(m) + ", K " +
                                                  std::to_string(k));
  if (!norm.h || !norm.weight || (norm.delta == nullptr) != (norm.h_out == nullptr) ||
      (norm.h_out && (norm.h_out == norm.h || norm.h_out == norm.delta)))
    return Status(ErrorCode::InvalidArgument, std::string(what) +
                                                  ": h and weight required, h_out exactly with delta and aliasing "
                                                  "neither h nor delta");
  if ((reinterpret_cast<uintptr_t>(norm.h) | reinterpret_cast<uintptr_t>(norm.delta) |
       reinterpret_cast<uintptr_t>(norm.h_out) | reinterpret_cast<uintptr_t>(norm.weight)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, std::string(what) + " needs 16-byte aligned h, delta, h_out, weight");
  out = {reinterpret_cast<const __nv_bfloat16*>(norm.h), reinterpret_cast<const __nv_bfloat16*>(norm.delta),
         reinterpret_cast<__nv_bfloat16*>(norm.h_out), reinterpret_cast<const __nv_bfloat16*>(norm.weight), norm.eps};
  return ok_status();
}

}  // namespace

Status gemm_decode_norm(const GemmEngine& engine, const DecodeNorm& norm, int64_t m, std::span<const DeviceMatrix> ws,
                        std::span<bf16* const> ys, cudaStream_t stream) {
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  if (ws.empty() || ws.size() > static_cast<size_t>(gemm_detail::kStagedMax) || ys.size() != ws.size())
    return Status(ErrorCode::InvalidArgument, "gemm_decode_norm takes 1.." + std::to_string(gemm_detail::kStagedMax) +
                                                  " matrices and as many outputs, got " + std::to_string(ws.size()) +
                                                  " and " + std::to_string(ys.size()));
  gemm_detail::StagedLaunch launch{};
  LS_RETURN_IF_ERROR(check_decode_norm(norm, m, ws[0].cols, "gemm_decode_norm", launch.norm));
  launch.count = static_cast<int>(ws.size());
  for (int i = 0; i < launch.count; ++i) {
    const DeviceMatrix& w = ws[i];
    if (w.cols != ws[0].cols || w.rows < 1 || w.rows > (1 << 24))
      return Status(ErrorCode::InvalidArgument, "gemm_decode_norm: matrix " + std::to_string(i) + " is [" +
                                                    std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                                                    "], K must be " + std::to_string(ws[0].cols));
    if (reinterpret_cast<uintptr_t>(w.w) % 16 != 0 || (w.rows % 2 == 0 && reinterpret_cast<uintptr_t>(ys[i]) % 4 != 0))
      return Status(ErrorCode::InvalidArgument, "gemm_decode_norm needs 16-byte aligned W, y aligned to pairs");
    launch.args[i] = gemm_detail::GemmArgs{nullptr, reinterpret_cast<const __nv_bfloat16*>(w.w), w.bias,
                                           reinterpret_cast<__nv_bfloat16*>(ys[i]), nullptr, static_cast<int>(m),
                                           static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
  }
  return gemm_detail::launch_staged_index(gemm_detail::norm_group_config, false, launch, stream);
}

Status gemm_decode_norm_swiglu(const GemmEngine& engine, const DecodeNorm& norm, int64_t m,
                               const DeviceMatrix& gate_up, bf16* act, cudaStream_t stream) {
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  gemm_detail::StagedLaunch launch{};
  LS_RETURN_IF_ERROR(check_decode_norm(norm, m, gate_up.cols, "gemm_decode_norm_swiglu", launch.norm));
  if (gate_up.rows < 2 || gate_up.rows % 2 != 0 || gate_up.rows > (1 << 24) ||
      reinterpret_cast<uintptr_t>(gate_up.w) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "gemm_decode_norm_swiglu takes an even N (16-byte aligned W), got N " +
                                                  std::to_string(gate_up.rows));
  launch.count = 1;
  launch.args[0] = gemm_detail::GemmArgs{nullptr, reinterpret_cast<const __nv_bfloat16*>(gate_up.w), gate_up.bias,
                                         reinterpret_cast<__nv_bfloat16*>(act), nullptr, static_cast<int>(m),
                                         static_cast<int>(gate_up.rows), static_cast<int>(gate_up.cols), 0};
  if (gemm_detail::norm_swiglu_config == 4)  // the streaming SwiGLU kernel with the norm prologue
    return gemm_detail::launch_stream_norm_swiglu(launch.args[0], launch.norm, stream);
  return gemm_detail::launch_staged_index(gemm_detail::norm_swiglu_config, true, launch, stream);
}

}  // namespace ls::cuda
