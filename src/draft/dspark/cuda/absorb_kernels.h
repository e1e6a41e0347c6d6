// Kernels of the CUDA drafter's batched absorb: K/V rows of many streams scattered into their contexts in one launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/status.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

// Row r of keys [rows, width] goes to key_rows[r] and row r of values [rows, width] to value_rows[r] (device arrays
// of device pointers, one per row: each stream's context row at its position).
Status scatter_context_rows(const bf16_t* keys, const bf16_t* values, int64_t rows, int64_t width,
                            bf16_t* const* key_rows, bf16_t* const* value_rows, cudaStream_t stream);

}  // namespace ls::dspark::cuda
