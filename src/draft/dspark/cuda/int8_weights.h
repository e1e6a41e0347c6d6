// The CUDA drafter's int8 copies (--drafter-bits 8): quantized on the device at load from the bf16 weights, which the
// drafter keeps (passes wider than int8_rows() rows and the short-K scan GEMM stay bf16 on cuBLAS); found by the bf16
// matrix's device pointer and shape, so gemm() takes the copy wherever one was filed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "draft/dspark/cuda/device_memory.h"
#include "draft/dspark/cuda/int8_gemm.h"
#include "draft/dspark/init_steps.h"

namespace ls::dspark::cuda {

class DrafterInt8 {
 public:
  // Quantizes w [rows, cols] (device bf16, read on `stream`) into codes and scales of its own (two counted init
  // steps) and files them under w; a matrix whose cols are not a multiple of 16 is left bf16 (nothing filed).
  Status add(const bf16_t* w, int64_t rows, int64_t cols, const std::string& name, InitSteps& steps,
             cudaStream_t stream);
  // The int8 copy of the bf16 matrix w [rows, cols], or null (none filed, or filed with another shape).
  const Int8Weights* find(const bf16_t* w, int64_t rows, int64_t cols) const {
    auto found = by_matrix_.find(w);
    if (found == by_matrix_.end() || found->second.rows != rows || found->second.cols != cols) return nullptr;
    return &found->second;
  }
  size_t matrices() const { return by_matrix_.size(); }
  int64_t bytes() const { return bytes_; }

  // The K-split launches' shapes for narrow matrices (set_int8_splits 1 and 2): four W tiles a warp, 8 warps, K over
  // 4 CTAs; two tiles, 16 warps, K over 2. With the scratch of the stream that launches it (the pass's, or the absorb
  // branch's: they run at once).
  static constexpr Int8GemmShape kSplits[2] = {{4, 8, false, 4}, {2, 16, false, 2}};
  // Scratch for every matrix filed so far at up to kInt8GemmMaxRows rows, for both streams (after the last add()).
  Status reserve_splits(InitSteps& steps);
  Int8GemmShape split_shape(int kind, bool branch) const {
    Int8GemmShape shape = kSplits[kind == 2 ? 1 : 0];
    shape.slice_sums = split_sums_[branch ? 1 : 0].data();
    shape.tickets = split_tickets_[branch ? 1 : 0].data();
    return shape;
  }
  bool splits_ready() const { return split_tickets_[0].size() > 0; }

 private:
  struct Owned {
    TrackedBuffer<uint8_t> codes;
    TrackedBuffer<float> scales;
  };
  std::vector<std::unique_ptr<Owned>> owned_;
  std::unordered_map<const bf16_t*, Int8Weights> by_matrix_;
  int64_t bytes_ = 0;
  int64_t most_rows_ = 0;  // the most W rows of a matrix filed that the split launches take
  TrackedBuffer<float> split_sums_[2];
  TrackedBuffer<unsigned int> split_tickets_[2];
};

}  // namespace ls::dspark::cuda
