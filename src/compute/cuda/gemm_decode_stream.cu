// The streaming decode GEMM kernels (m <= 16): every (column group, slice) item is one warp's own cp.async
// pipeline of STAGES K tiles, weights staged before the programmatic wait; the fused gate_up GEMM + SwiGLU and the
// grouped q / k / v launch use the same body. Each output's chain is the canonical order of gemm_device.cuh.
#include <atomic>
#include <span>
#include <string>

#include "compute/cuda/gemm_decode_stream.cuh"

namespace ls::cuda::gemm_detail {
namespace {

template <int WARPS, int STAGES, int TILES, int A_ROWS, bool SWIGLU = false>
__global__ void __launch_bounds__(32 * WARPS) decode_stream_kernel(GemmArgs args, int slices, int groups,
                                                                    int prefetch_tiles) {
  stream_body<WARPS, STAGES, TILES, A_ROWS, SWIGLU>(args, slices, groups, blockIdx.x, prefetch_tiles, StagedNorm{});
}

// The fused gate_up GEMM + SwiGLU with the norm prologue (one slice).
template <int WARPS, int STAGES, int A_ROWS>
__global__ void __launch_bounds__(32 * WARPS) decode_stream_norm_kernel(GemmArgs args, StagedNorm norm) {
  stream_body<WARPS, STAGES, 2, A_ROWS, true, true>(args, 1, WARPS, blockIdx.x, 0, norm);
}

// Up to kGroupMax one-slice GEMMs of the same x in one launch: CTAs [first_block[i], first_block[i + 1]) run args[i].
constexpr int kGroupMax = 4;
struct GemmGroup {
  GemmArgs args[kGroupMax];
  int first_block[kGroupMax + 1];
  int count;
  int prefetch_tiles;  // stream_body's L2 prefetch (0: none)
};

template <int WARPS, int STAGES, int A_ROWS>
__global__ void __launch_bounds__(32 * WARPS) decode_group_kernel(GemmGroup group) {
  int i = 0;
  while (i + 1 < group.count && static_cast<int>(blockIdx.x) >= group.first_block[i + 1]) ++i;
  stream_body<WARPS, STAGES, 1, A_ROWS, false>(group.args[i], 1, WARPS, blockIdx.x - group.first_block[i],
                                               group.prefetch_tiles, StagedNorm{});
}

int optin_shared_bytes = 0;  // the device's opt-in limit, set by allow_stream_shared

// The 9..16-row SwiGLU launches' args: K walked backwards under set_decode_pipe_fault_for_test (a planted fault).
GemmArgs with_test_fault(const GemmArgs& args) {
  GemmArgs faulty = args;
  faulty.reverse_k = args.reverse_k || pipe_fault_on() ? 1 : 0;
  return faulty;
}

template <int WARPS, int STAGES, int TILES, int A_ROWS>
int stream_shared_bytes(const GemmArgs& args, int slices, int groups) {
  const int partial = slices == 1 ? 0 : slices * A_ROWS * groups * 8 * TILES * static_cast<int>(sizeof(float));
  return Stream<WARPS, STAGES, TILES, A_ROWS>::kPipeBytes + partial;
}

template <int WARPS, int STAGES, int TILES, int A_ROWS>
Status launch_stream_rows(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  const int slices = slice_count(args.k);
  const int groups = slices == 1 ? WARPS : (WARPS / slices > 1 ? WARPS / slices : 1);
  const int cols = groups * 8 * TILES;
  const int ctas = (args.n + cols - 1) / cols;
  const int smem = stream_shared_bytes<WARPS, STAGES, TILES, A_ROWS>(args, slices, groups);
  if (smem > optin_shared_bytes && args.m <= 16) return launch_first(args, sm_count, stream);  // very long K
  if (smem > optin_shared_bytes)
    return Status(ErrorCode::InvalidArgument, "streamed rows: " + std::to_string(smem) + " bytes of shared memory for K " +
                                                  std::to_string(args.k) + " at " + std::to_string(args.m) + " rows");
  return launch_programmatic(decode_stream_kernel<WARPS, STAGES, TILES, A_ROWS>, ctas, 32 * WARPS, smem, stream, args,
                             slices, groups, prefetch_tiles_for(args.n, args.k));
}

template <int WARPS, int STAGES, int TILES>
Status launch_stream(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (args.m <= 8) return launch_stream_rows<WARPS, STAGES, TILES, 8>(args, sm_count, stream);
  return launch_stream_rows<WARPS, STAGES, TILES, 16>(args, sm_count, stream);
}

template <int WARPS, int STAGES, int TILES>
void allow_stream_kernel_shared(int optin_bytes) {
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
}

// The fused gate_up GEMM + SwiGLU (one slice), items of 8 gate + 8 up columns: 4 warps, two CTAs per SM, 8 stages
// for m <= 8 and 6 of 16 x rows at 9..16 rows (96 KB; since H200 batch s14A, gpu_bench --arms, three interleaved
// rounds, synth 1.2B with taps: verify 10 / 12 / 16 rows 1.0385 / 1.0496 / 1.0929 ms against 1.0516 / 1.0604 / 1.0991
// for 8 warps x 6 stages, one CTA an SM; 2048->16384 at 10 rows 19.1-19.2 us against 19.5-19.6).
// Verify windows: 4 warps, 8 stages at 32 rows, 4 at 64.
template <int A_ROWS>
Status launch_swiglu_rows(const GemmArgs& args, cudaStream_t stream) {
  constexpr int kWarps = 4;
  constexpr int kStages = A_ROWS == 16 ? 6 : A_ROWS == 64 ? 4 : 8;
  const int f = args.n / 2;
  const int cols = kWarps * 8;
  const int ctas = (f + cols - 1) / cols;
  constexpr int smem = Stream<kWarps, kStages, 2, A_ROWS>::kPipeBytes;
  return launch_programmatic(decode_stream_kernel<kWarps, kStages, 2, A_ROWS, true>, ctas, 32 * kWarps, smem, stream,
                             A_ROWS == 16 ? with_test_fault(args) : args, 1, kWarps,
                             prefetch_tiles_for(args.n, args.k));
}

// The same with the norm prologue: W-only stages, x [A_ROWS, K] normed once per CTA after them, then inverse_rms.
template <int A_ROWS>
Status launch_norm_swiglu_rows(const GemmArgs& args, const StagedNorm& norm, cudaStream_t stream) {
  constexpr int kWarps = A_ROWS == 16 ? 8 : 4;
  constexpr int kStages = A_ROWS == 16 ? 6 : 8;
  const int f = args.n / 2, cols = kWarps * 8, ctas = (f + cols - 1) / cols;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;
  const int smem = Stream<kWarps, kStages, 2, A_ROWS, true>::kPipeBytes + k_tiles * A_ROWS * 128 +
                   16 * static_cast<int>(sizeof(float));
  return launch_programmatic(decode_stream_norm_kernel<kWarps, kStages, A_ROWS>, ctas, 32 * kWarps, smem, stream,
                             args, norm);
}

// The grouped launch (q / k / v of an attention layer): 2 warps, 16 stages (8 at 32 rows, 5 at 64: two CTAs an SM),
// 8 columns per item (many CTAs, deep pipelines for narrow outputs).
constexpr int kGroupWarps = 2;
constexpr int group_stages(int a_rows) { return a_rows == 64 ? 5 : a_rows == 32 ? 8 : 16; }

template <int A_ROWS>
Status launch_group_rows(const GemmGroup& group, cudaStream_t stream) {
  constexpr int kStages = group_stages(A_ROWS);
  constexpr int smem = Stream<kGroupWarps, kStages, 1, A_ROWS>::kPipeBytes;
  return launch_programmatic(decode_group_kernel<kGroupWarps, kStages, A_ROWS>, group.first_block[group.count],
                             32 * kGroupWarps, smem, stream, group);
}

// Verify windows (17..64 rows) on the streaming kernel, 16 columns an item: one slice 4 warps x 8 stages (32 rows)
// or x 4 (64 rows); sliced K 8 warps (a warp per slice) x 4 or 2 stages.
template <int A_ROWS>
Status launch_stream_window(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (slice_count(args.k) > 1) return launch_stream_rows<8, A_ROWS == 32 ? 4 : 2, 2, A_ROWS>(args, sm_count, stream);
  return launch_stream_rows<4, A_ROWS == 32 ? 8 : 4, 2, A_ROWS>(args, sm_count, stream);
}

}  // namespace

Status launch_stream_variant(int variant, const GemmArgs& args, int sm_count, cudaStream_t stream) {
  switch (variant) {
    case 1: return launch_stream<4, 8, 2>(args, sm_count, stream);
    case 2: return launch_stream<4, 12, 1>(args, sm_count, stream);
    case 3: return launch_stream<8, 6, 2>(args, sm_count, stream);
    case 4: return launch_stream<8, 8, 1>(args, sm_count, stream);
    case 5: return launch_stream<2, 16, 1>(args, sm_count, stream);
    case 6: return launch_stream<1, 32, 1>(args, sm_count, stream);  // a whole K = 2048 item in flight at once
    default: return launch_first(args, sm_count, stream);
  }
}

Status launch_stream_norm_swiglu(const GemmArgs& args, const StagedNorm& norm, cudaStream_t stream) {
  if (args.m <= 8) return launch_norm_swiglu_rows<8>(args, norm, stream);
  return launch_norm_swiglu_rows<16>(args, norm, stream);
}

Status launch_stream_many_rows(const GemmArgs& args, int sm_count, cudaStream_t stream) {
  if (args.m <= 32) return launch_stream_window<32>(args, sm_count, stream);
  return launch_stream_window<64>(args, sm_count, stream);
}

template <int WARPS, int STAGES, int TILES, int A_ROWS, bool SWIGLU = false>
void allow_one_stream_kernel(int optin_bytes) {
  cudaFuncSetAttribute(decode_stream_kernel<WARPS, STAGES, TILES, A_ROWS, SWIGLU>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
}

void allow_stream_shared(int optin_bytes) {
  optin_shared_bytes = optin_bytes;
  allow_one_stream_kernel<8, 4, 2, 32>(optin_bytes);
  allow_one_stream_kernel<8, 2, 2, 64>(optin_bytes);
  allow_one_stream_kernel<4, 8, 2, 32>(optin_bytes);
  allow_one_stream_kernel<4, 4, 2, 64>(optin_bytes);
  allow_one_stream_kernel<4, 8, 2, 32, true>(optin_bytes);
  allow_one_stream_kernel<4, 4, 2, 64, true>(optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(32), 32>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(64), 64>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  allow_stream_kernel_shared<4, 8, 2>(optin_bytes);
  allow_stream_kernel_shared<4, 12, 1>(optin_bytes);
  allow_stream_kernel_shared<8, 6, 2>(optin_bytes);
  allow_stream_kernel_shared<8, 8, 1>(optin_bytes);
  allow_stream_kernel_shared<2, 16, 1>(optin_bytes);
  allow_stream_kernel_shared<1, 32, 1>(optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(8), 8>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_group_kernel<kGroupWarps, group_stages(16), 16>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<4, 8, 2, 8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_kernel<4, 6, 2, 16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_stream_norm_kernel<4, 8, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_stream_norm_kernel<8, 6, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
}

// Verify windows take the streaming kernels up to this many rows (set_decode_rows: 16, 32 or 64).
std::atomic<int> decode_rows{32};
int decode_rows_max() { return decode_rows.load(std::memory_order_relaxed); }
// The fused launches' row limits: q / k / v up to 32 rows at the default, SwiGLU (2048->16384 streamed loses) only
// when every window is streamed.
int group_rows_max() { return decode_rows_max(); }
int swiglu_rows_max() { return decode_rows_max() == 64 ? 64 : 16; }

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

void set_decode_rows(int max_rows) {
  gemm_detail::decode_rows.store(max_rows > 32 ? 64 : max_rows > 16 ? 32 : 16, std::memory_order_relaxed);
}

bool decode_swiglu_fits(int64_t m, const DeviceMatrix& gate_up) {
  return m >= 1 && m <= gemm_detail::swiglu_rows_max() && gate_up.rows >= 2 && gate_up.rows % 2 == 0 && gate_up.rows <= (1LL << 30) &&
         gate_up.cols % 8 == 0 && gate_up.cols <= gemm_detail::kUnslicedK;
}

Status gemm_decode_swiglu(const GemmEngine& engine, const bf16* x, int64_t m, const DeviceMatrix& gate_up, bf16* act,
                          cudaStream_t stream) {
  if (!decode_swiglu_fits(m, gate_up))
    return Status(ErrorCode::InvalidArgument, "gemm_decode_swiglu takes 1.." + std::to_string(gemm_detail::swiglu_rows_max()) +
                                                  " rows, an even N and K <= " +
                                                  std::to_string(gemm_detail::kUnslicedK) + " (a multiple of 8), got m " +
                                                  std::to_string(m) + ", N " + std::to_string(gate_up.rows) + ", K " +
                                                  std::to_string(gate_up.cols));
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(gate_up.w)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "gemm_decode_swiglu needs 16-byte aligned x and W");
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  gemm_detail::GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x),
                             reinterpret_cast<const __nv_bfloat16*>(gate_up.w), gate_up.bias,
                             reinterpret_cast<__nv_bfloat16*>(act), nullptr, static_cast<int>(m),
                             static_cast<int>(gate_up.rows), static_cast<int>(gate_up.cols), 0};
  if (m <= 16 && gemm_detail::pipe_enabled() && gemm_detail::pipe_fits(args, true))
    return gemm_detail::launch_pipe_swiglu(args, stream);
  if (m <= 8) return gemm_detail::launch_swiglu_rows<8>(args, stream);
  if (m <= 16) return gemm_detail::launch_swiglu_rows<16>(args, stream);
  if (m <= 32) return gemm_detail::launch_swiglu_rows<32>(args, stream);
  return gemm_detail::launch_swiglu_rows<64>(args, stream);
}

bool decode_group_fits(int64_t m, std::span<const DeviceMatrix> ws) {
  if (m < 1 || m > gemm_detail::group_rows_max() || ws.empty() || ws.size() > static_cast<size_t>(gemm_detail::kGroupMax)) return false;
  for (const DeviceMatrix& w : ws)
    if (w.cols != ws[0].cols || w.cols % 8 != 0 || w.cols > gemm_detail::kUnslicedK || w.rows < 1 ||
        w.rows > (1 << 24))
      return false;
  return true;
}

Status gemm_decode_group(const GemmEngine& engine, const bf16* x, int64_t m, std::span<const DeviceMatrix> ws,
                         std::span<bf16* const> ys, cudaStream_t stream) {
  if (!decode_group_fits(m, ws) || ys.size() != ws.size())
    return Status(ErrorCode::InvalidArgument, "gemm_decode_group takes 1.." + std::to_string(gemm_detail::group_rows_max()) +
                                                  " rows and 1.." +
                                                  std::to_string(gemm_detail::kGroupMax) +
                                                  " matrices of one K <= 2048 (a multiple of 8), got m " +
                                                  std::to_string(m) + ", " + std::to_string(ws.size()) + " matrices");
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  gemm_detail::GemmGroup group{};
  group.count = static_cast<int>(ws.size());
  constexpr int cols = gemm_detail::kGroupWarps * 8;
  int64_t rows = 0;  // weight rows of the whole launch
  for (int i = 0; i < group.count; ++i) {
    const DeviceMatrix& w = ws[i];
    if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0 ||
        (w.rows % 2 == 0 && reinterpret_cast<uintptr_t>(ys[i]) % 4 != 0))
      return Status(ErrorCode::InvalidArgument, "gemm_decode_group needs 16-byte aligned x and W, y aligned to pairs");
    group.args[i] = gemm_detail::GemmArgs{reinterpret_cast<const __nv_bfloat16*>(x),
                                          reinterpret_cast<const __nv_bfloat16*>(w.w), w.bias,
                                          reinterpret_cast<__nv_bfloat16*>(ys[i]), nullptr, static_cast<int>(m),
                                          static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
    group.first_block[i + 1] = group.first_block[i] + static_cast<int>((w.rows + cols - 1) / cols);
    rows += w.rows;
  }
  if (m <= 32 && gemm_detail::pipe_enabled() && gemm_detail::pipe_group_fits(group.args, group.count))
    return gemm_detail::launch_pipe_group(group.args, group.count, stream);
  const int staged = gemm_detail::staged_config_for(static_cast<int>(m));  // all weights before the wait
  if (staged >= 0 && gemm_detail::staged_group_fits(staged, static_cast<int>(m), static_cast<int>(ws[0].cols)))
    return gemm_detail::launch_staged_group(staged, group.args, group.count, stream);
  group.prefetch_tiles = gemm_detail::prefetch_tiles_for(rows, ws[0].cols);
  if (m <= 8) return gemm_detail::launch_group_rows<8>(group, stream);
  if (m <= 16) return gemm_detail::launch_group_rows<16>(group, stream);
  if (m <= 32) return gemm_detail::launch_group_rows<32>(group, stream);
  return gemm_detail::launch_group_rows<64>(group, stream);
}

}  // namespace ls::cuda
