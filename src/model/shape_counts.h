// Forwards that ran without a captured graph to replay, counted process-wide (benches: where a run's one-off forwards
// go, lanes18). A CUDA target counts a graphable shape's first sighting (run eagerly) and its capture; a target
// without graphs counts nothing.
#pragma once

#include <atomic>
#include <cstdint>

namespace ls {

struct ShapeCounts {
  int64_t first_sightings = 0;
  int64_t captures = 0;
};

inline std::atomic<int64_t> g_shape_first_sightings{0};
inline std::atomic<int64_t> g_shape_captures{0};

inline ShapeCounts shape_counts() { return {g_shape_first_sightings.load(), g_shape_captures.load()}; }

}  // namespace ls
