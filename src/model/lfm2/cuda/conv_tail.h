// The conv layer's in_proj GEMM with the ShortConv as its tail (issue 8: fewer kernel boundaries in the decode
// step): up to 16 rows, the last CTA of the GEMM bcx = x @ in_proj^T (GemmEngine::gemm's bits) runs short_conv's
// arithmetic on the whole output instead of the short_conv launch. Plain C++ header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/bf16.h"
#include "base/status.h"
#include "compute/cuda/kernels.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {

// Whether gemm_conv_tail runs as one launch: 1..16 rows, in_proj [3D, K] with D = args.width, K and D multiples of
// 8, at most 4 taps, 16-byte aligned x / W / bcx, a ticket; the opt-ins made (allow_conv_tail_shared).
bool conv_tail_fits(const bf16* x, const cuda::DeviceMatrix& in_proj, const ConvArgs& args, const unsigned* ticket);
// args.bcx [rows, 3D] = x @ in_proj^T, then short_conv(args) -> z, y (its bits); elsewhere the two launches.
// ticket: a device counter at zero (left at zero).
Status gemm_conv_tail(const cuda::GemmEngine& engine, const bf16* x, const cuda::DeviceMatrix& in_proj,
                      const ConvArgs& args, const int32_t* row_window, const WindowInfo* windows, bf16* z, bf16* y,
                      unsigned* ticket, cudaStream_t stream);
// The conv tail kernels' shared-memory opt-ins: once per process, outside graph capture (the target's load).
void allow_conv_tail_shared();

}  // namespace ls::lfm2::gpu
