// The decode GEMMs (m <= 16): the first decode kernel (variant 0), the variant table and the engine's pick. Every
// (column group, slice) item is one warp's own pipeline; the slice sums meet in shared memory and are added in slice
// order (the canonical order of gemm_device.cuh). The variants (here, gemm_decode_stream.cu, gemm_decode_staged.cu)
// differ only in warps per CTA, pipeline depth, columns per item and the x rows staged (8 when m <= 8: the mma's rows
// 8..15 are zero registers); each output's chain (16-wide K steps ascending from 0 per slice) is the same in all.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "compute/cuda/gemm_decode.cuh"

namespace ls::cuda::gemm_detail {
namespace {

constexpr int kDecodeWarps = 8;
constexpr int kDecodeStageBytes = (16 + 8) * 128;  // A rows [16, 64] then W rows [8, 64], swizzled

// The first decode kernel (variant 0): items of one CTA are `groups` column groups of 8 times `slices`; item =
// group * slices + slice.
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
  add_slices<16>(args, partial, slices, col0, cols, blockDim.x);
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

// Variant 0: deep pipelines (one CTA per SM) when the CTAs fit one wave; else two CTAs per SM with 4 stages each.
Status launch_first(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  const int groups = decode_groups(slices);
  const int ctas = (args.n + groups * 8 - 1) / (groups * 8);
  if (ctas <= sm_count) return launch_decode_stages<8>(args, slices, groups, ctas, stream);
  return launch_decode_stages<4>(args, slices, groups, ctas, stream);
}

namespace {

// The variants by number (decode_variant_name): 0 the first kernel, 1..6 the streaming ones, then the staged ones.
constexpr int kStreamVariants = 7;
constexpr int kVariants = kStreamVariants + kStagedConfigs;
const char* const kStreamNames[kStreamVariants] = {"decode 8w s4/8 8c", "stream 4w s8 16c", "stream 4w s12 8c",
                                                   "stream 8w s6 16c",  "stream 8w s8 8c",  "stream 2w s16 8c",
                                                   "stream 1w s32 8c"};

// The streaming pick for (m, N, K), from the H200 run of `gpu_bench --decode-gemm` (batch A, commit 9a0b7f6; us at
// m = 1 / 16, first kernel -> pick): sliced K (8192->2048) 12.5 / 15.4 -> 8w s6 16c 10.1 / 10.9; one slice, N >=
// 8192 (2048->16384) 21.7 -> 4w s8 16c 17.7 at m = 1, 8w s6 16c 19.9 at m = 16; narrower one-slice outputs
// (2048->6144 / 2048 / 512) 17.6 / 17.5 / 17.4 -> 4w s12 8c 12.0 / 9.6 / 9.5 at m <= 8, 4w s8 16c 12.2 / 11.3 /
// 11.3 at m = 16 (first kernel 22.3 / 22.1 / 21.9).
int pick_stream_variant(const GemmArgs& args) {
  if (slice_count(args.k) > 1) return 3;
  if (args.n >= 8192) return args.m <= 8 ? 1 : 3;
  return args.m <= 8 ? 2 : 1;
}

// The automatic staged pick: the staged configuration the engine's narrow one-slice decode GEMMs (and the grouped
// q / k / v launch) take up to kAutoStagedRows rows; -1: none (the streaming picks).
constexpr int kAutoStagedConfig = -1, kAutoStagedRows = 1;
// set_decode_staged_pick: a configuration pinned for every decode width (>= 0), the automatic picks (-1), or the
// streaming picks only (-2, the path before the staged picks).
std::atomic<int> staged_pick{-1};

// Whether the streaming launches prefetch their weights into L2 before the programmatic wait.
std::atomic<bool> l2_prefetch{false};

Status launch_variant(int variant, const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (variant >= kStreamVariants)
    return launch_staged(variant - kStreamVariants, args, sm_count, pick_stream_variant(args), stream);
  if (variant >= 1) return launch_stream_variant(variant, args, sm_count, stream);
  return launch_first(args, sm_count, stream);
}

// The automatic narrow pick: one-slice decode GEMMs of kAutoNarrowMinN <= N <= kAutoNarrowMaxN at m <= 8 take
// variant kAutoNarrowVariant (-1: none, the picks above).
constexpr int kAutoNarrowVariant = -1, kAutoNarrowMinN = 0, kAutoNarrowMaxN = 0;
// set_decode_narrow_pick: a variant pinned for narrow_min_n <= N <= narrow_max_n (>= 0), the automatic narrow pick
// (-1), none (-2). set_decode_staged_pick(-2) (the old path) also drops the automatic one.
std::atomic<int> narrow_variant{-1}, narrow_max_n{0}, narrow_min_n{0};

int pick_variant(const GemmArgs& args) {
  const int staged = staged_config_for(args.m);
  if (staged >= 0 && slice_count(args.k) == 1 && args.n < 8192) return kStreamVariants + staged;
  int narrow = narrow_variant.load(std::memory_order_relaxed);
  int low = narrow_min_n.load(std::memory_order_relaxed), high = narrow_max_n.load(std::memory_order_relaxed);
  if (narrow == -1 && staged_pick.load(std::memory_order_relaxed) != -2) {
    narrow = kAutoNarrowVariant;
    low = kAutoNarrowMinN;
    high = kAutoNarrowMaxN;
  }
  if (narrow >= 0 && args.m <= 8 && slice_count(args.k) == 1 && args.n >= low && args.n <= high) return narrow;
  return pick_stream_variant(args);
}

}  // namespace

int stream_variant_for(const GemmArgs& args) { return pick_stream_variant(args); }

int prefetch_tiles_for(int64_t n, int64_t k) {
  if (!l2_prefetch.load(std::memory_order_relaxed) || !cuda_features().pdl || n < 1 || k < 1) return 0;
  const int slices = slice_count(static_cast<int>(std::min<int64_t>(k, 1 << 24)));
  const int64_t item_tiles = slices == 1 ? (k + kBlockK - 1) / kBlockK : kSliceTiles;
  const int64_t tiles = kPrefetchBytes / (n * kBlockK * 2 * slices);  // per item: one slice of one weight row
  return static_cast<int>(std::min<int64_t>(tiles, item_tiles));
}

Status launch_decode(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (args.m <= 32 && pipe_enabled() && pipe_fits(args, false)) return launch_pipe(-1, args, stream);
  if (args.m > 16) return launch_stream_many_rows(args, sm_count, stream);
  return launch_variant(pick_variant(args), args, sm_count, stream);
}

int staged_config_for(int m) {
  const int pick = staged_pick.load(std::memory_order_relaxed);
  if (pick >= 0) return pick;
  return pick == -1 && m <= kAutoStagedRows ? kAutoStagedConfig : -1;
}

void allow_decode_shared(int optin_bytes) {
  cudaFuncSetAttribute(gemm_decode_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(gemm_decode_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  allow_stream_shared(optin_bytes);
  allow_staged_shared(optin_bytes);
  allow_pipe_shared(optin_bytes);
}

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

int decode_variant_count() { return gemm_detail::kVariants; }

const char* decode_variant_name(int variant) {
  if (variant < 0 || variant >= gemm_detail::kVariants) return "?";
  return variant < gemm_detail::kStreamVariants ? gemm_detail::kStreamNames[variant]
                                                : gemm_detail::kStagedNames[variant - gemm_detail::kStreamVariants];
}

void set_decode_l2_prefetch(bool on) { gemm_detail::l2_prefetch.store(on, std::memory_order_relaxed); }

void set_decode_staged_pick(int config) {
  gemm_detail::staged_pick.store(config >= 0 && config < gemm_detail::kStagedConfigs ? config : config == -2 ? -2 : -1,
                                 std::memory_order_relaxed);
}

void set_decode_narrow_pick(int variant, int64_t max_n) {
  const bool valid = variant >= 0 && variant < gemm_detail::kVariants;
  const int limit = static_cast<int>(std::min<int64_t>(max_n < 0 ? -max_n : max_n, 8191));
  gemm_detail::narrow_max_n.store(limit, std::memory_order_relaxed);
  gemm_detail::narrow_min_n.store(max_n < 0 ? limit : 0, std::memory_order_relaxed);  // negative: N = -max_n only
  gemm_detail::narrow_variant.store(valid ? variant : variant == -2 ? -2 : -1, std::memory_order_relaxed);
}
int decode_staged_config_count() { return gemm_detail::kStagedConfigs; }

Status gemm_decode_variant(int variant, const bf16* x, int64_t m, const DeviceMatrix& w, bf16* y_b16, float* y_f32,
                           cudaStream_t stream) {
  if (variant < 0 || variant >= gemm_detail::kVariants)
    return Status(ErrorCode::InvalidArgument, "decode variant " + std::to_string(variant) + " of " +
                                                  std::to_string(gemm_detail::kVariants));
  if (m < 1 || m > 16)
    return Status(ErrorCode::InvalidArgument, "decode variants take 1..16 rows, got " + std::to_string(m));
  if ((y_b16 == nullptr) == (y_f32 == nullptr) || w.cols % 8 != 0 || w.rows < 1 || w.rows > (1LL << 30) ||
      w.cols > (1LL << 24))
    return Status(ErrorCode::InvalidArgument, "decode variant: one output, K a multiple of 8, sizes in range");
  const uintptr_t y_address = y_f32 ? reinterpret_cast<uintptr_t>(y_f32) : reinterpret_cast<uintptr_t>(y_b16);
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0 || y_address % 8 != 0)
    return Status(ErrorCode::InvalidArgument, "decode variant: x and W 16-byte aligned, y 8-byte aligned");
  int sm_count = 132;
  {
    static std::once_flag once;
    static int device_sms = 0;
    std::call_once(once, [] {
      GemmEngine engine;  // sets the shared-memory opt-ins
      int device = 0;
      if (cudaGetDevice(&device) == cudaSuccess)
        cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, device);
      cudaGetLastError();
    });
    if (device_sms > 0) sm_count = device_sms;
  }
  gemm_detail::GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w.w),
                             w.bias, reinterpret_cast<__nv_bfloat16*>(y_b16), y_f32, static_cast<int>(m),
                             static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
  return gemm_detail::launch_variant(variant, args, sm_count, stream);
}

}  // namespace ls::cuda
