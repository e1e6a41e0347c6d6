// Decode GEMMs with a tail (m <= 16): the streaming kernel of the engine's pick (GemmEngine::gemm's bits), then an op
// the last CTA to finish runs on the whole output (a ticket counter) instead of its own launch, and optionally an L2
// prefetch of weights a later launch reads, issued before the programmatic wait. The tails: the residual add +
// RMSNorm (gemm_decode_tail.cu), the target's ShortConv (model/lfm2/cuda/conv_tail.cu). Included by CUDA sources.
#pragma once

#include <cstdint>

#include "compute/cuda/gemm_decode_stream.cuh"

namespace ls::cuda::gemm_detail {

constexpr int64_t kTailPrefetchChunk = 16384;  // bytes per bulk L2 prefetch

// This CTA's share of an L2 prefetch of `bytes` (a multiple of 16) at `at` (16-byte aligned, or null: none):
// 16 KB chunks dealt round-robin over every thread of the grid.
__device__ __forceinline__ void prefetch_share(const unsigned char* at, int64_t bytes) {
  if (at == nullptr) return;
  const int64_t chunks = (bytes + kTailPrefetchChunk - 1) / kTailPrefetchChunk;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += threads) {
    const int64_t left = bytes - c * kTailPrefetchChunk;
    prefetch_l2(at + c * kTailPrefetchChunk, static_cast<int>(left < kTailPrefetchChunk ? left : kTailPrefetchChunk));
  }
}

// Called by every thread of every CTA once its outputs are stored: true in every thread of the last CTA to get
// here, with every other CTA's outputs visible to it; that CTA puts the ticket back to zero. `flag`: a word of
// shared memory no thread still reads.
__device__ __forceinline__ bool last_cta_to_finish(unsigned* ticket, unsigned* flag) {
  __threadfence();  // this thread's outputs, before the CTA's ticket
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(ticket, 1u) == gridDim.x - 1 ? 1u : 0u;
  __syncthreads();
  if (*flag == 0u) return false;
  __threadfence();  // every CTA took its ticket after its outputs: they are visible now
  if (threadIdx.x == 0) *ticket = 0u;  // every CTA has taken its ticket: ready for the next launch
  return true;
}

// TAIL: a struct with `const unsigned char* l2_next; int64_t l2_next_bytes;` and
// `__device__ void run(const GemmArgs&, unsigned char* shared) const` (every thread of every CTA, after the outputs;
// `shared` is the kernel's dynamic shared memory, free once the CTA passes a barrier).
template <int WARPS, int STAGES, int TILES, int A_ROWS, class TAIL>
__global__ void __launch_bounds__(32 * WARPS) decode_tail_kernel(GemmArgs args, int slices, int groups, TAIL tail) {
  extern __shared__ __align__(128) unsigned char shared_raw[];
  prefetch_share(tail.l2_next, tail.l2_next_bytes);
  stream_body<WARPS, STAGES, TILES, A_ROWS, false>(args, slices, groups, blockIdx.x, 0, StagedNorm{});
  tail.run(args, shared_raw);
}

// The launch shape of a tail launch: the streaming pick's configuration (variant 1, 2 or 3), its CTAs and the
// dynamic shared memory (the pipeline's, at least `tail_bytes`).
struct TailShape {
  int variant, slices, groups, ctas, smem;
};
TailShape tail_shape(const GemmArgs& args, int tail_bytes);
// The device's opt-in shared memory per block (set once the engine exists; 0 before).
int tail_optin_bytes();

template <int WARPS, int STAGES, int TILES, class TAIL>
Status launch_tail_config(const GemmArgs& args, const TAIL& tail, const TailShape& s, cudaStream_t stream) {
  if (args.m <= 8)
    return launch_programmatic(decode_tail_kernel<WARPS, STAGES, TILES, 8, TAIL>, s.ctas, 32 * WARPS, s.smem, stream,
                               args, s.slices, s.groups, tail);
  return launch_programmatic(decode_tail_kernel<WARPS, STAGES, TILES, 16, TAIL>, s.ctas, 32 * WARPS, s.smem, stream,
                             args, s.slices, s.groups, tail);
}

// Launches the tail kernel (the caller checked tail_shape(args, tail_bytes).smem <= tail_optin_bytes()).
template <class TAIL>
Status launch_decode_tail(const GemmArgs& args, const TAIL& tail, int tail_bytes, cudaStream_t stream) {
  const TailShape s = tail_shape(args, tail_bytes);
  if (s.variant == 1) return launch_tail_config<4, 8, 2>(args, tail, s, stream);
  if (s.variant == 2) return launch_tail_config<4, 12, 1>(args, tail, s, stream);
  return launch_tail_config<8, 6, 2>(args, tail, s, stream);
}

// The shared-memory opt-ins of TAIL's kernels (once, outside capture).
template <class TAIL>
void allow_decode_tail_kernels(int optin_bytes) {
  cudaFuncSetAttribute(decode_tail_kernel<4, 8, 2, 8, TAIL>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_tail_kernel<4, 8, 2, 16, TAIL>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_tail_kernel<4, 12, 1, 8, TAIL>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_tail_kernel<4, 12, 1, 16, TAIL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_tail_kernel<8, 6, 2, 8, TAIL>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
  cudaFuncSetAttribute(decode_tail_kernel<8, 6, 2, 16, TAIL>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
}

}  // namespace ls::cuda::gemm_detail
