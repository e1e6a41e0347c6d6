// The batched absorb's scatter: each row of a chunk's K and V to its own stream's context row, one launch a layer.
#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/absorb_kernels.h"

namespace ls::dspark::cuda {
namespace {

// One block per row; threads stride over the row's width.
__global__ void scatter_rows_kernel(const bf16_t* keys, const bf16_t* values, int64_t width,
                                    bf16_t* const* key_rows, bf16_t* const* value_rows) {
  const int64_t row = blockIdx.x;
  bf16_t* key_row = key_rows[row];
  bf16_t* value_row = value_rows[row];
  for (int64_t column = threadIdx.x; column < width; column += blockDim.x) {
    key_row[column] = keys[row * width + column];
    value_row[column] = values[row * width + column];
  }
}

}  // namespace

Status scatter_context_rows(const bf16_t* keys, const bf16_t* values, int64_t rows, int64_t width,
                            bf16_t* const* key_rows, bf16_t* const* value_rows, cudaStream_t stream) {
  if (rows == 0) return ok_status();
  scatter_rows_kernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(keys, values, width, key_rows, value_rows);
  LS_CUDA_TRY_LAUNCH("scatter_context_rows");
  return ok_status();
}

}  // namespace ls::dspark::cuda
