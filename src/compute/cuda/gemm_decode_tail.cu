// The decode GEMM with the residual add + RMSNorm tail (gemm_decode_tail.cuh; issue 8: fewer kernel boundaries in
// the decode step): the last CTA to finish runs add_rms_norm's arithmetic, bit for bit, on the GEMM's output instead
// of a norm launch; every CTA may first ask L2 for a share of weights a later launch reads. The shared tail shape.
#include <algorithm>
#include <string>

#include "compute/cuda/gemm_decode_tail.cuh"
#include "compute/cuda/kernels.h"
#include "compute/cuda/row_norm.cuh"

namespace ls::cuda::gemm_detail {
namespace {

// The residual add + RMSNorm tail: h [m, n] = round(h + y), norm_out = RMSNorm(h) * weight (null h: none).
struct NormTail {
  __nv_bfloat16* h;
  const __nv_bfloat16* weight;
  float eps;
  __nv_bfloat16* norm_out;
  unsigned* ticket;
  const unsigned char* l2_next;  // 16-byte aligned, or null
  int64_t l2_next_bytes;         // a multiple of 16

  // Scratch bytes in shared memory: [m, n] fp32 rows, 16 inverse RMS, the flag.
  static int scratch_bytes(int m, int n) { return (m * n + 17) * static_cast<int>(sizeof(float)); }

  // The last CTA computes the rows in row_norm_kernel<true>'s arithmetic: each row in shared memory as fp32, one
  // warp per row summing the squares in warp_inverse_rms's order.
  __device__ __forceinline__ void run(const GemmArgs& args, unsigned char* shared) const {
    if (h == nullptr) return;
    float* scratch = reinterpret_cast<float*>(shared);
    const int m = args.m, width = args.n;
    float* inverse_rms = scratch + m * width;
    if (!last_cta_to_finish(ticket, reinterpret_cast<unsigned*>(inverse_rms + 16))) return;
    const int threads = blockDim.x;
    const int chunks = width / 8, total = m * chunks;
    constexpr int kLoads = 4;  // chunks of h and y per thread in flight before any store
    for (int first = threadIdx.x; first < total; first += threads * kLoads) {
      Chunk v[kLoads], d[kLoads];
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int index = first + i * threads;
        if (index < total) {
          const int64_t offset = static_cast<int64_t>(index / chunks) * width + (index % chunks) * 8;
          v[i].raw = __ldcg(reinterpret_cast<const uint4*>(h + offset));
          d[i].raw = __ldcg(reinterpret_cast<const uint4*>(args.y_b16 + offset));
        }
      }
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int index = first + i * threads;
        if (index >= total) continue;
        const int row = index / chunks, at = (index % chunks) * 8;
#pragma unroll
        for (int p = 0; p < 4; ++p)
          v[i].pairs[p] = __floats2bfloat162_rn(__fadd_rn(__low2float(v[i].pairs[p]), __low2float(d[i].pairs[p])),
                                                __fadd_rn(__high2float(v[i].pairs[p]), __high2float(d[i].pairs[p])));
        *reinterpret_cast<uint4*>(h + static_cast<int64_t>(row) * width + at) = v[i].raw;
        float* values = scratch + row * width + at;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          values[2 * p] = __low2float(v[i].pairs[p]);
          values[2 * p + 1] = __high2float(v[i].pairs[p]);
        }
      }
    }
    __syncthreads();
    for (int row = threadIdx.x >> 5; row < m; row += threads / 32)
      warp_inverse_rms(scratch + row * width, width, eps, inverse_rms + row);
    __syncthreads();
    for (int first = threadIdx.x; first < total; first += threads * kLoads) {
      Chunk w[kLoads];  // the norm weight's chunks, all loads in flight first
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int index = first + i * threads;
        w[i].raw = index < total ? __ldg(reinterpret_cast<const uint4*>(weight + (index % chunks) * 8))
                                 : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int index = first + i * threads;
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
        *reinterpret_cast<uint4*>(norm_out + static_cast<int64_t>(row) * width + at) = out.raw;
      }
    }
  }
};

int optin_bytes_seen = 0;  // the device's opt-in limit, set by allow_tail_shared

template <int WARPS, int STAGES, int TILES>
TailShape shape_of(int variant, const GemmArgs& args, int tail_bytes) {
  const int slices = slice_count(args.k);
  const int groups = slices == 1 ? WARPS : std::max(1, WARPS / slices);
  const int cols = groups * 8 * TILES;
  const int a_rows = args.m <= 8 ? 8 : 16;
  const int stage_bytes = (a_rows + 8 * TILES) * 128;
  const int partial = slices == 1 ? 0 : slices * a_rows * cols * static_cast<int>(sizeof(float));
  return {variant, slices, groups, (args.n + cols - 1) / cols,
          std::max(WARPS * STAGES * stage_bytes + partial, tail_bytes)};
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

TailShape tail_shape(const GemmArgs& args, int tail_bytes) {
  switch (stream_variant_for(args)) {
    case 1: return shape_of<4, 8, 2>(1, args, tail_bytes);
    case 2: return shape_of<4, 12, 1>(2, args, tail_bytes);
    default: return shape_of<8, 6, 2>(3, args, tail_bytes);
  }
}

int tail_optin_bytes() { return optin_bytes_seen; }

void allow_tail_shared(int optin_bytes) {
  optin_bytes_seen = optin_bytes;
  allow_decode_tail_kernels<NormTail>(optin_bytes);
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
  const int tail_bytes = tail.h ? gemm_detail::NormTail::scratch_bytes(args.m, args.n) : 0;
  const int smem = gemm_detail::tail_shape(args, tail_bytes).smem;
  return gemm_detail::tail_optin_bytes() > 0 && smem <= gemm_detail::tail_optin_bytes();
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
  gemm_detail::NormTail t{reinterpret_cast<__nv_bfloat16*>(tail.h),
                          reinterpret_cast<const __nv_bfloat16*>(tail.weight),
                          tail.eps,
                          reinterpret_cast<__nv_bfloat16*>(tail.norm_out),
                          tail.ticket,
                          static_cast<const unsigned char*>(tail.l2_next),
                          tail.l2_next_bytes / 16 * 16};
  if (!cuda_features().pdl) t.l2_next = nullptr;  // the prefetch instruction is sm_90's
  const int tail_bytes = tail.h ? gemm_detail::NormTail::scratch_bytes(args.m, args.n) : 0;
  return gemm_detail::launch_decode_tail(args, t, tail_bytes, stream);
}

}  // namespace ls::cuda
