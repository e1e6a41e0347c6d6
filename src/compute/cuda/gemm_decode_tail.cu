// Decode GEMMs with a tail (m <= 16, issue 8: fewer kernel boundaries in the decode step): the streaming kernel of
// the engine's pick (the same chains, so GemmEngine::gemm's bits), then the last CTA to finish (a ticket counter)
// runs the residual add + RMSNorm of the output (add_rms_norm's arithmetic, bit for bit) instead of a norm launch;
// before the programmatic wait every CTA may ask L2 for a share of weights a later launch reads.
#include <algorithm>
#include <string>

#include "compute/cuda/gemm_decode_stream.cuh"
#include "compute/cuda/kernels.h"
#include "compute/cuda/row_norm.cuh"

namespace ls::cuda::gemm_detail {
namespace {

struct TailArgs {
  __nv_bfloat16* h;  // [m, n] residual, or null: no norm
  const __nv_bfloat16* weight;
  float eps;
  __nv_bfloat16* norm_out;
  unsigned* ticket;
  const unsigned char* l2_next;  // 16-byte aligned, or null
  int64_t l2_next_bytes;         // a multiple of 16
};

constexpr int64_t kPrefetchChunk = 16384;  // bytes per bulk L2 prefetch

// This CTA's share of the L2 prefetch: 16 KB chunks dealt round-robin over every thread of the grid.
__device__ __forceinline__ void prefetch_share(const TailArgs& tail) {
  if (tail.l2_next == nullptr) return;
  const int64_t chunks = (tail.l2_next_bytes + kPrefetchChunk - 1) / kPrefetchChunk;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += threads) {
    const int64_t at = c * kPrefetchChunk;
    const int64_t left = tail.l2_next_bytes - at;
    prefetch_l2(tail.l2_next + at, static_cast<int>(left < kPrefetchChunk ? left : kPrefetchChunk));
  }
}

// After every thread of the CTA stored its outputs: the CTA takes a ticket; the last one (every other CTA's y
// visible) computes h = round(h + y), norm_out = RMSNorm(h) * weight row by row in row_norm_kernel<true>'s
// arithmetic (the row in `scratch` as fp32, one warp per row summing the squares in warp_inverse_rms's order), then
// puts the ticket back to zero. scratch: [m, n] fp32 + 16 inverse RMS + the flag.
template <int THREADS>
__device__ __forceinline__ void tail_add_rms_norm(const GemmArgs& args, const TailArgs& tail, float* scratch) {
  const int m = args.m, width = args.n;
  float* inverse_rms = scratch + m * width;
  unsigned* last = reinterpret_cast<unsigned*>(inverse_rms + 16);
  __threadfence();  // this thread's outputs, before the CTA's ticket
  __syncthreads();
  if (threadIdx.x == 0) *last = atomicAdd(tail.ticket, 1u) == gridDim.x - 1 ? 1u : 0u;
  __syncthreads();
  if (*last == 0u) return;
  __threadfence();  // every CTA took its ticket after its outputs: they are visible now
  const int chunks = width / 8, total = m * chunks;
  constexpr int kLoads = 4;  // chunks of h and y per thread in flight before any store
  for (int first = threadIdx.x; first < total; first += THREADS * kLoads) {
    Chunk v[kLoads], d[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * THREADS;
      if (index < total) {
        const int64_t offset = static_cast<int64_t>(index / chunks) * width + (index % chunks) * 8;
        v[i].raw = __ldcg(reinterpret_cast<const uint4*>(tail.h + offset));
        d[i].raw = __ldcg(reinterpret_cast<const uint4*>(args.y_b16 + offset));
      }
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * THREADS;
      if (index >= total) continue;
      const int row = index / chunks, at = (index % chunks) * 8;
#pragma unroll
      for (int p = 0; p < 4; ++p)
        v[i].pairs[p] = __floats2bfloat162_rn(__fadd_rn(__low2float(v[i].pairs[p]), __low2float(d[i].pairs[p])),
                                              __fadd_rn(__high2float(v[i].pairs[p]), __high2float(d[i].pairs[p])));
      *reinterpret_cast<uint4*>(tail.h + static_cast<int64_t>(row) * width + at) = v[i].raw;
      float* values = scratch + row * width + at;
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        values[2 * p] = __low2float(v[i].pairs[p]);
        values[2 * p + 1] = __high2float(v[i].pairs[p]);
      }
    }
  }
  __syncthreads();
  for (int row = threadIdx.x >> 5; row < m; row += THREADS / 32)
    warp_inverse_rms(scratch + row * width, width, tail.eps, inverse_rms + row);
  __syncthreads();
  for (int first = threadIdx.x; first < total; first += THREADS * kLoads) {
    Chunk w[kLoads];  // the norm weight's chunks, all loads in flight first
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * THREADS;
      w[i].raw = index < total ? __ldg(reinterpret_cast<const uint4*>(tail.weight + (index % chunks) * 8))
                               : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int index = first + i * THREADS;
      if (index >= total) continue;
      const int row = index / chunks, at = (index % chunks) * 8;
      const float inv = inverse_rms[row];
      const float* values = scratch + row * width + at;
      Chunk out;
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float lo = __fmul_rn(__low2float(w[i].pairs[p]),
                                   __bfloat162float(__float2bfloat16_rn(__fmul_rn(values[2 * p], inv))));
        const float hi = __fmul_rn(__high2float(w[i].pairs[p]),
                                   __bfloat162float(__float2bfloat16_rn(__fmul_rn(values[2 * p + 1], inv))));
        out.pairs[p] = __floats2bfloat162_rn(lo, hi);
      }
      *reinterpret_cast<uint4*>(tail.norm_out + static_cast<int64_t>(row) * width + at) = out.raw;
    }
  }
  if (threadIdx.x == 0) *tail.ticket = 0u;  // every CTA has taken its ticket: ready for the next launch
}

template <int WARPS, int STAGES, int TILES, int A_ROWS>
__global__ void __launch_bounds__(32 * WARPS) decode_tail_kernel(GemmArgs args, int slices, int groups,
                                                                  TailArgs tail) {
  extern __shared__ __align__(128) unsigned char shared_raw[];
  prefetch_share(tail);
  stream_body<WARPS, STAGES, TILES, A_ROWS, false>(args, slices, groups, blockIdx.x, 0, StagedNorm{});
  if (tail.h != nullptr) tail_add_rms_norm<32 * WARPS>(args, tail, reinterpret_cast<float*>(shared_raw));
}

int tail_optin_bytes = 0;  // the device's opt-in limit, set by allow_tail_shared

// The launch shape of a tail launch (the streaming pick's configuration).
struct TailShape {
  int warps, tiles, slices, groups, ctas, smem;
};

template <int WARPS, int STAGES, int TILES>
TailShape tail_shape(int m, int n, int k, bool norm) {
  const int slices = slice_count(k);
  const int groups = slices == 1 ? WARPS : std::max(1, WARPS / slices);
  const int cols = groups * 8 * TILES;
  const int a_rows = m <= 8 ? 8 : 16;
  const int stage_bytes = (a_rows + 8 * TILES) * 128;
  const int partial = slices == 1 ? 0 : slices * a_rows * cols * static_cast<int>(sizeof(float));
  const int scratch = norm ? (m * n + 17) * static_cast<int>(sizeof(float)) : 0;
  return {WARPS, TILES, slices, groups, (n + cols - 1) / cols,
          std::max(WARPS * STAGES * stage_bytes + partial, scratch)};
}

TailShape shape_for(const GemmArgs& args, bool norm) {
  switch (stream_variant_for(args)) {
    case 1: return tail_shape<4, 8, 2>(args.m, args.n, args.k, norm);
    case 2: return tail_shape<4, 12, 1>(args.m, args.n, args.k, norm);
    default: return tail_shape<8, 6, 2>(args.m, args.n, args.k, norm);
  }
}

template <int WARPS, int STAGES, int TILES>
Status launch_tail(const GemmArgs& args, const TailArgs& tail, const TailShape& s, cudaStream_t stream) {
  if (args.m <= 8)
    return launch_programmatic(decode_tail_kernel<WARPS, STAGES, TILES, 8>, s.ctas, 32 * WARPS, s.smem, stream, args,
                               s.slices, s.groups, tail);
  return launch_programmatic(decode_tail_kernel<WARPS, STAGES, TILES, 16>, s.ctas, 32 * WARPS, s.smem, stream, args,
                             s.slices, s.groups, tail);
}

template <int WARPS, int STAGES, int TILES>
void allow_tail_kernels(int optin_bytes) {
  cudaFuncSetAttribute(decode_tail_kernel<WARPS, STAGES, TILES, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
  cudaFuncSetAttribute(decode_tail_kernel<WARPS, STAGES, TILES, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       optin_bytes);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void allow_tail_shared(int optin_bytes) {
  tail_optin_bytes = optin_bytes;
  allow_tail_kernels<4, 8, 2>(optin_bytes);
  allow_tail_kernels<4, 12, 1>(optin_bytes);
  allow_tail_kernels<8, 6, 2>(optin_bytes);
}

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

bool decode_tail_fits(int64_t m, const DeviceMatrix& w, const bf16* x, const bf16* y, const DecodeTail& tail) {
  if (m < 1 || m > 16 || w.rows < 8 || w.rows % 8 != 0 || w.rows > (1 << 20) || w.cols < 8 || w.cols % 8 != 0 ||
      w.cols > (1 << 20))
    return false;
  using gemm_detail::aligned16;
  if (!aligned16(x) || !aligned16(w.w) || !aligned16(y)) return false;
  if (tail.h != nullptr && (!aligned16(tail.h) || !aligned16(tail.weight) || !aligned16(tail.norm_out) ||
                            tail.ticket == nullptr || tail.norm_out == tail.h || tail.norm_out == y || tail.h == y))
    return false;
  if (tail.l2_next != nullptr && (!aligned16(tail.l2_next) || tail.l2_next_bytes < 16)) return false;
  gemm_detail::GemmArgs args{};
  args.m = static_cast<int>(m);
  args.n = static_cast<int>(w.rows);
  args.k = static_cast<int>(w.cols);
  const int smem = gemm_detail::shape_for(args, tail.h != nullptr).smem;
  return gemm_detail::tail_optin_bytes > 0 && smem <= gemm_detail::tail_optin_bytes;
}

Status gemm_decode_tail(const GemmEngine& engine, const bf16* x, int64_t m, const DeviceMatrix& w, bf16* y,
                        const DecodeTail& tail, cudaStream_t stream) {
  if (!decode_tail_fits(m, w, x, y, tail)) {  // the launches the tail replaces (the same bits by definition)
    LS_RETURN_IF_ERROR(engine.gemm(x, m, w, y, nullptr, stream));
    if (tail.h == nullptr) return ok_status();
    return add_rms_norm(tail.h, y, m, static_cast<int>(w.rows), tail.weight, tail.eps, tail.norm_out, stream);
  }
  gemm_detail::GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w.w),
                             w.bias, reinterpret_cast<__nv_bfloat16*>(y), nullptr, static_cast<int>(m),
                             static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
  gemm_detail::TailArgs t{reinterpret_cast<__nv_bfloat16*>(tail.h),
                          reinterpret_cast<const __nv_bfloat16*>(tail.weight),
                          tail.eps,
                          reinterpret_cast<__nv_bfloat16*>(tail.norm_out),
                          tail.ticket,
                          static_cast<const unsigned char*>(tail.l2_next),
                          tail.l2_next_bytes / 16 * 16};
  if (!cuda_features().pdl) t.l2_next = nullptr;  // the prefetch instruction is sm_90's
  const gemm_detail::TailShape s = gemm_detail::shape_for(args, tail.h != nullptr);
  if (s.warps == 4 && s.tiles == 2) return gemm_detail::launch_tail<4, 8, 2>(args, t, s, stream);
  if (s.warps == 4) return gemm_detail::launch_tail<4, 12, 1>(args, t, s, stream);
  return gemm_detail::launch_tail<8, 6, 2>(args, t, s, stream);
}

}  // namespace ls::cuda
