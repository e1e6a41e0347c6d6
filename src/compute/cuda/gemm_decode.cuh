// Pieces the decode GEMM files share (gemm_decode.cu, gemm_decode_stream.cu, gemm_decode_staged.cu): programmatic
// dependent launch, the fused SwiGLU store, and each file's launchers. Included by CUDA sources only.
#pragma once

#include "compute/cuda/decode_norm.cuh"
#include "compute/cuda/gemm_device.cuh"
#include "compute/cuda/pdl.cuh"

namespace ls::cuda::gemm_detail {

using ls::cuda::launch_programmatic;
using ls::cuda::let_next_kernel_start;
using ls::cuda::wait_for_previous_kernel;

// swiglu_kernel's arithmetic (elementwise.cu) on the GEMM's two outputs after their one rounding (+ bias): y [r, c] =
// round(round(silu(g)) * u), silu(g) = g / (1 + exp(-g)) with exp through double.
__device__ __forceinline__ void store_swiglu(const GemmArgs& args, int r, int c, int f, float gate, float up) {
  if (r >= args.m || c >= f) return;
  if (args.bias) {
    gate = __fadd_rn(gate, args.bias[c]);
    up = __fadd_rn(up, args.bias[f + c]);
  }
  const float g = __bfloat162float(__float2bfloat16_rn(gate)), u = __bfloat162float(__float2bfloat16_rn(up));
  const float e = static_cast<float>(exp(static_cast<double>(-g)));
  const float silu = __bfloat162float(__float2bfloat16_rn(__fdiv_rn(g, __fadd_rn(1.0f, e))));
  args.y_b16[static_cast<int64_t>(r) * f + c] = __float2bfloat16_rn(__fmul_rn(silu, u));
}

// Sliced K, after every warp's items and a CTA barrier (every decode kernel): each output's slice sums added in slice order
// (((s0 + s1) + s2) + ..), stored with one rounding; `threads` threads share the outputs.
template <int A_ROWS>
__device__ __forceinline__ void add_slices(const GemmArgs& args, const float* partial, int slices, int col0, int cols,
                                           int threads) {
  for (int o = threadIdx.x; o < args.m * cols / 2; o += threads) {
    const int r = o / (cols / 2), cc = (o % (cols / 2)) * 2;
    float v0 = partial[r * cols + cc], v1 = partial[r * cols + cc + 1];
    for (int s = 1; s < slices; ++s) {
      v0 = __fadd_rn(v0, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + cc]);
      v1 = __fadd_rn(v1, partial[(static_cast<int64_t>(s) * A_ROWS + r) * cols + cc + 1]);
    }
    store_pair(args, r, col0 + cc, v0, v1);
  }
}

// One bulk L2 prefetch of `bytes` (a multiple of 16, 16-byte aligned) from global memory (sm_90; a no-op before).
__device__ __forceinline__ void prefetch_l2(const void* address, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(address), "r"(bytes) : "memory");
#endif
}

// The K tiles per item a streaming launch of W [n, K] prefetches into L2 before its programmatic wait
// (set_decode_l2_prefetch; 0 when off or without programmatic launches): as many as keep the launch's prefetched
// weights within kPrefetchBytes, a share of the L2.
constexpr int64_t kPrefetchBytes = 24LL << 20;
int prefetch_tiles_for(int64_t n, int64_t k);

// gemm_decode.cu: the first decode kernel (variant 0), any K.
Status launch_first(const GemmArgs& args, int sm_count, cudaStream_t stream);

// gemm_decode_stream.cu: streaming variants 1..6 (decode_variant_name), any K (very long K falls back to the first
// kernel); their shared-memory opt-ins (once, outside capture).
Status launch_stream_variant(int variant, const GemmArgs& args, int sm_count, cudaStream_t stream);
// Verify windows (17..64 rows, at most kMaxClusterSlices slices): the streaming kernel with 32 / 64 x rows a tile.
Status launch_stream_many_rows(const GemmArgs& args, int sm_count, cudaStream_t stream);
void allow_stream_shared(int optin_bytes);
// gemm_decode.cu: the streaming variant (1..3) a decode GEMM of (m, N, K) takes without pins.
int stream_variant_for(const GemmArgs& args);
// The fused gate_up GEMM + SwiGLU (m <= 16) with the residual add + RMSNorm in its prologue: every CTA stages the
// normed x once in shared memory (swizzled K tiles), the warps stream only weights (set_decode_norm_configs(g, 4)).
Status launch_stream_norm_swiglu(const GemmArgs& args, const StagedNorm& norm, cudaStream_t stream);

// gemm_decode_pipe.cu: the weight-streaming pipeline (m <= 16, sm_90, K a multiple of 64): kPipeConfigs
// configurations (pipe_config_name), the last two the fused gate_up + SwiGLU.
constexpr int kPipeConfigs = 7;
const char* pipe_config_name(int config);
void allow_pipe_shared(int optin_bytes);
bool pipe_enabled();  // set_decode_pipeline
// Whether the automatic (or pinned) configuration takes this GEMM (swiglu: args.n = 2F, y_b16 [m, F]).
bool pipe_fits(const GemmArgs& args, bool swiglu);
// set_decode_pipe_fault_for_test: the pipeline's x-once launches and the streaming gate_up + SwiGLU's 9..16-row
// launches walk K backwards.
bool pipe_fault_on();
// Configuration `config` (-1: the automatic plain one); refuses by number what it does not take.
Status launch_pipe(int config, const GemmArgs& args, cudaStream_t stream);
Status launch_pipe_swiglu(const GemmArgs& args, cudaStream_t stream);
// q / k / v (up to 4 matrices of one x and one unsliced K) in one launch.
bool pipe_group_fits(const GemmArgs* args, int count);
Status launch_pipe_group(const GemmArgs* args, int count, cudaStream_t stream);

// gemm_decode_staged.cu: the staged kernels (one slice, K <= 2048): configuration `config` of kStagedConfigs; other
// shapes, or more shared memory than the device allows, run `fallback` (a streaming variant).
constexpr int kStagedConfigs = 5;
extern const char* const kStagedNames[kStagedConfigs];
Status launch_staged(int config, const GemmArgs& args, int sm_count, int fallback, cudaStream_t stream);
void allow_staged_shared(int optin_bytes);
// The grouped q / k / v launch (up to 4 matrices of one K over one x, no norm) on staged configuration `config`;
// staged_group_fits says whether it can run there (one slice, m <= 16, the shared memory granted).
bool staged_group_fits(int config, int m, int k);
Status launch_staged_group(int config, const GemmArgs* args, int count, cudaStream_t stream);
// gemm_decode.cu: the staged configuration a decode launch of m rows takes (set_decode_staged_pick, or the automatic
// pick); -1: the streaming kernels.
int staged_config_for(int m);

}  // namespace ls::cuda::gemm_detail
