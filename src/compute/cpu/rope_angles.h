// A per-thread cache of RoPE angles: fp32 cos/sin of position * inv_freq[i], computed once per (table, position).
#pragma once

#include <cstdint>

#include "compute/ops.h"

namespace ls::compute {

// cos [head_dim / 2] and sin [head_dim / 2] of float(position) * inv_freq[i], the values std::cos / std::sin give.
struct RopeAngles {
  const float* cos = nullptr;
  const float* sin = nullptr;
};

// The angles of `position` under `table` (the q and k of a layer, and every layer, share a row's positions). The
// pointers stay valid until this thread's next call; a table with other inv_freq values empties the cache.
RopeAngles rope_angles(const RopeTable& table, int64_t position);

}  // namespace ls::compute
