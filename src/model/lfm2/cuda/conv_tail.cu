// The conv layer's in_proj GEMM with the ShortConv tail (conv_tail.h): the streaming decode GEMM, then the last CTA
// to finish computes every row's conv outputs (short_conv.cuh, short_conv_kernel's arithmetic) from the GEMM's
// output read through L2.
#include "model/lfm2/cuda/conv_tail.h"

#include <mutex>

#include "compute/cuda/gemm_decode_tail.cuh"
#include "model/lfm2/cuda/short_conv.cuh"

namespace ls::lfm2::gpu {
namespace {

struct ConvTail {
  ConvArgs conv;
  const int32_t* row_window;
  const WindowInfo* windows;
  bf16* z;
  bf16* y;
  unsigned* ticket;
  const unsigned char* l2_next = nullptr;  // (no prefetch)
  int64_t l2_next_bytes = 0;

  __device__ __forceinline__ void run(const cuda::gemm_detail::GemmArgs&, unsigned char* shared) const {
    if (!cuda::gemm_detail::last_cta_to_finish(ticket, reinterpret_cast<unsigned*>(shared))) return;
    conv_outputs<8, true>(conv, row_window, windows, z, y, threadIdx.x, blockDim.x);
  }
};

int conv_tail_optin = 0;  // set by allow_conv_tail_shared

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void allow_conv_tail_shared() {
  static std::once_flag once;
  std::call_once(once, [] {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess && optin > 0) {
      cuda::gemm_detail::allow_decode_tail_kernels<ConvTail>(optin);
      conv_tail_optin = optin;
    }
    cudaGetLastError();
  });
}

bool conv_tail_fits(const bf16* x, const cuda::DeviceMatrix& in_proj, const ConvArgs& args, const unsigned* ticket) {
  const int64_t D = args.width;
  if (args.rows < 1 || args.rows > 16 || D < 8 || D % 8 != 0 || in_proj.rows != 3 * D || in_proj.rows > (1 << 20) ||
      in_proj.cols < 8 || in_proj.cols % 8 != 0 || in_proj.cols > (1 << 20) || args.kernel < 1 ||
      args.kernel > kConvMaxTaps || ticket == nullptr)
    return false;
  if (!aligned16(x) || !aligned16(in_proj.w) || !aligned16(args.bcx)) return false;
  cuda::gemm_detail::GemmArgs g{};
  g.m = static_cast<int>(args.rows);
  g.n = static_cast<int>(in_proj.rows);
  g.k = static_cast<int>(in_proj.cols);
  const int smem = cuda::gemm_detail::tail_shape(g, 16).smem;
  return conv_tail_optin > 0 && smem <= conv_tail_optin;
}

Status gemm_conv_tail(const cuda::GemmEngine& engine, const bf16* x, const cuda::DeviceMatrix& in_proj,
                      const ConvArgs& args, const int32_t* row_window, const WindowInfo* windows, bf16* z, bf16* y,
                      unsigned* ticket, cudaStream_t stream) {
  if (!conv_tail_fits(x, in_proj, args, ticket)) {  // the two launches the tail replaces (the same bits)
    LS_RETURN_IF_ERROR(engine.gemm(x, args.rows, in_proj, const_cast<bf16*>(args.bcx), nullptr, stream));
    return short_conv(args, row_window, windows, z, y, stream);
  }
  cuda::gemm_detail::GemmArgs g{reinterpret_cast<const __nv_bfloat16*>(x),
                                reinterpret_cast<const __nv_bfloat16*>(in_proj.w),
                                in_proj.bias,
                                reinterpret_cast<__nv_bfloat16*>(const_cast<bf16*>(args.bcx)),
                                nullptr,
                                static_cast<int>(args.rows),
                                static_cast<int>(in_proj.rows),
                                static_cast<int>(in_proj.cols),
                                0};
  const ConvTail tail{args, row_window, windows, z, y, ticket};
  return cuda::gemm_detail::launch_decode_tail(g, tail, 16, stream);
}

}  // namespace ls::lfm2::gpu
