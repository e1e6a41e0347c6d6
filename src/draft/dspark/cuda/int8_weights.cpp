// DrafterInt8: the drafter's int8 copies, quantized on the device (int8_weights.h).
#include "draft/dspark/cuda/int8_weights.h"

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
  owned_.push_back(std::move(owned));
  return ok_status();
}

}  // namespace ls::dspark::cuda
