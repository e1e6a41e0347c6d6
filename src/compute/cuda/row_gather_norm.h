// The final norm of the drawn rows in one launch (step10): the gather of the drawn rows, the last residual add and
// the final RMSNorm, with add_rms_norm's (rms_norm's) bits. Plain C++ header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/bf16.h"
#include "base/status.h"

namespace ls::cuda {

// y [n, width] row i = RMSNorm(round(h[index[i]] + delta[index[i]])) * weight (delta null: RMSNorm(h[index[i]])); h is
// not written. index: device rows staged before the forward's first kernel (read before the programmatic wait).
// fault_no_add_for_test: a planted fault, the residual add left out.
Status gather_rms_norm(const bf16* h, const bf16* delta, const int32_t* index, int64_t n, int width,
                       const bf16* weight, float eps, bf16* y, cudaStream_t stream, bool fault_no_add_for_test = false);
// Whether gather_rms_norm takes rows of `width` at these pointers (the CTA-per-row norm kernel's shapes).
bool gather_rms_norm_fits(int width, const bf16* h, const bf16* delta, const bf16* weight, const bf16* y);

}  // namespace ls::cuda
