// The absorb inside the next pass's graph (session 19, CudaDsparkDrafter::set_absorb_in_pass): the absorb waiting for
// the pass and the side branch, cuBLAS handle and workspace it runs on there.
#pragma once

#include <cstdint>
#include <vector>

#include "draft/drafter.h"
#include "draft/dspark/cuda/device_memory.h"

namespace ls::dspark::cuda {

struct AbsorbPass {
  std::vector<TapRows> rows;  // checked pieces whose contexts hold their rows already (lengths moved on)
  DeviceTaps taps;
  int64_t total_rows = 0;
  SideBranch branch;                   // the side stream the pass forks the absorb onto
  CublasHandle cublas;                 // the absorb's GEMMs' own handle and workspace (concurrent with the pass's)
  TrackedBuffer<uint8_t> workspace;
  bool open = false;                   // forked in this pass, not yet joined (block_pass joins it)
  bool waiting() const { return !rows.empty(); }
  void clear() {
    rows.clear();
    taps = DeviceTaps{};
    total_rows = 0;
  }
};

// Graph key first parts of a pass of `padded` requests with an absorb of `bucket` rows inside.
inline int absorb_pass_first(int padded, int bucket) { return padded + 1000 * bucket; }

}  // namespace ls::dspark::cuda
