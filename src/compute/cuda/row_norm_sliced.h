// The CTA-per-row norms in the sliced order (session 12; norm_order.h, row_norm.cuh): rms_norm, add_rms_norm and
// gather_rms_norm take it under set_norm_sliced for rows wider than one slice. Plain C++ header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/bf16.h"
#include "base/status.h"

namespace ls::cuda {

// Whether the CTA-per-row norms of rows of `width` take the sliced order now (set_norm_sliced, width > 256).
bool row_norm_sliced_for(int width);
// y row i = RMSNorm(row) * weight (row_norm_kernel's arithmetic, the sliced order), the row being in row r (r =
// index[i] with an index, a staged device array read before the programmatic wait, else i), or round(in + delta)
// of it with delta, written to h_out row r when h_out is set. For the shapes row_kernel_fits takes (the caller checks).
Status row_norm_sliced(const bf16* in, bf16* h_out, const bf16* delta, const int32_t* index, int64_t rows, int width,
                       const bf16* weight, float eps, bf16* y, cudaStream_t stream);

}  // namespace ls::cuda
