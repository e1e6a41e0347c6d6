// The CUDA drafter's graph cache: running a graph shape (eagerly, captured at its second sighting, or replayed) and
// capturing one without running it. Included at the end of cuda_drafter.h.
#pragma once

#include "draft/dspark/cuda/cuda_drafter.h"

namespace ls::dspark::cuda {

template <typename Enqueue>
inline Status CudaDsparkDrafter::run_shape(std::pair<int, int> key, Enqueue&& enqueue) {
  const cudaStream_t stream = stream_.get();
  if (!graphs_on_ || profile_.on()) return enqueue();
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphShapes) return enqueue();
    found = graphs_.emplace(key, GraphShape{}).first;
  }
  GraphShape& shape = found->second;
  if (shape.failed || (!shape.exec.ready() && ++shape.sightings < 2)) return enqueue();
  if (!shape.exec.ready()) {
    // Second sighting: capture (nothing runs), then replay below; a capture that fails runs eagerly for good.
    if (!shape.exec.capture(stream, enqueue).ok()) {
      shape.failed = true;
      ++graph_failures_;
      return enqueue();
    }
  }
  ++graph_replays_;
  return shape.exec.launch(stream);
}

template <typename Enqueue>
inline bool CudaDsparkDrafter::capture_shape(std::pair<int, int> key, Enqueue&& enqueue) {
  if (!graphs_on_ || profile_.on()) return false;
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphShapes) return false;
    found = graphs_.emplace(key, GraphShape{}).first;
  }
  GraphShape& shape = found->second;
  if (shape.failed || shape.exec.ready()) return false;
  if (!shape.exec.capture(stream_.get(), enqueue).ok()) {
    shape.failed = true;
    ++graph_failures_;
    return false;
  }
  return true;
}

}  // namespace ls::dspark::cuda
