// DrafterInt8: the drafter's int8 copies, quantized on the device (int8_weights.h).
#include "draft/dspark/cuda/int8_weights.h"

#include <algorithm>

namespace ls::dspark::cuda {

Status DrafterInt8::add(const bf16_t* w, int64_t rows, int64_t cols, const std::string& name, InitSteps& steps,
                        cudaStream_t stream) {
  if (cols % 16 != 0 || rows <= 0) return ok_status();  // int8_gemm's K: such a matrix stays bf16
  auto owned = std::make_unique<Owned>();
  const size_t count = static_cast<size_t>(rows * cols);
  LS_RETURN_IF_ERROR(owned->codes.allocate(count, name + " (int8 codes)", steps));
  LS_RETURN_IF_ERROR(owned->scales.allocate(static_cast<size_t>(rows), name + " (int8 scales)", steps));
  LS_RETURN_IF_ERROR(quantize_rows_int8(w, rows, cols, owned->codes.data(), owned->scales.data(), stream));
  by_matrix_[w] = Int8Weights{owned->codes.data(), owned->scales.data(), rows, cols};
  bytes_ += static_cast<int64_t>(owned->codes.bytes() + owned->scales.bytes());
  Int8Gemm probe;  // only the matrices the drafter's launches split (one W tile a warp automatically) count
  probe.rows = 1;
  probe.w.rows = rows;
  probe.w.cols = cols;
  if (int8_gemm_shape(probe).m_tiles == 1) most_rows_ = std::max(most_rows_, rows);
  owned_.push_back(std::move(owned));
  return ok_status();
}

Status DrafterInt8::reserve_splits(InitSteps& steps) {
  if (most_rows_ == 0) return ok_status();
  // The most any launch of kSplits takes, as int8_gemm resolves it at every x-tile count (two W tiles above 16 rows:
  // twice the tiles). Plain: most_rows_ W rows; SwiGLU's most_rows_ / 2 columns of 8-column tiles are as many.
  int64_t floats = 0, tiles = 0;
  for (const Int8GemmShape& split : kSplits) {
    for (const int rows : {8, 16, kInt8GemmMaxRows}) {
      Int8Gemm widest;
      widest.rows = rows;
      widest.w.rows = most_rows_;
      widest.shape = split;
      const Int8GemmShape shape = int8_gemm_shape(widest);
      floats = std::max(floats, int8_gemm_slice_floats(widest, shape));
      tiles = std::max(tiles, int8_gemm_tiles(widest, shape));
    }
  }
  for (int branch = 0; branch < 2; ++branch) {
    LS_RETURN_IF_ERROR(split_sums_[branch].allocate(static_cast<size_t>(floats), "int8 split sums", steps));
    LS_RETURN_IF_ERROR(split_tickets_[branch].allocate(static_cast<size_t>(tiles), "int8 split tickets", steps));
    LS_CUDA_TRY(cudaMemset(split_tickets_[branch].data(), 0, static_cast<size_t>(tiles) * sizeof(unsigned int)));
  }
  return ok_status();
}

}  // namespace ls::dspark::cuda
