// The drafter's few-row GEMMs through cublasLt with the algorithm picked by timing: each shape's heuristic
// candidates (deterministic reductions only) are timed once on the drafter's stream, the fastest is kept.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "base/status.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

class TunedGemms {
 public:
  TunedGemms() = default;
  ~TunedGemms();
  TunedGemms(const TunedGemms&) = delete;
  TunedGemms& operator=(const TunedGemms&) = delete;

  // `workspace` (device, `workspace_bytes`) is shared with the caller's cuBLAS handle: both run on one stream.
  Status create(void* workspace, size_t workspace_bytes);
  bool ready() const { return handle_ != nullptr; }
  // y [rows, n] (leading dimension ldy, bf16 or fp32) = x [rows, k] W^T (W [n, k] bf16), fp32 accumulate. A shape
  // seen for the first time is tuned now (several timed runs on `stream`, which must not be capturing: then the
  // call returns NotFound and enqueues nothing, and the caller takes its own GEMM).
  Status gemm(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t n, int64_t k, void* y, bool y_f32, int64_t ldy,
              cudaStream_t stream);
  // Shapes tuned so far, and the summed time of their picks against cuBLAS's default choice at tuning (bench).
  size_t shapes() const { return plans_.size(); }
  double tuned_us() const { return tuned_us_; }
  double default_us() const { return default_us_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t operation = nullptr;
    cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool usable = false;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, int64_t>;  // rows, n, k, y fp32, ldy
  Status tune(Plan& plan, const bf16_t* x, int64_t rows, const bf16_t* w, int64_t n, int64_t k, void* y, bool y_f32,
              int64_t ldy, cudaStream_t stream);
  Status run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const bf16_t* x, const bf16_t* w, void* y,
             cudaStream_t stream) const;

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
  double tuned_us_ = 0, default_us_ = 0;
};

}  // namespace ls::dspark::cuda
