// The per-thread RoPE angle cache: direct-mapped by position, keyed by the table's inv_freq values.
#include "compute/cpu/rope_angles.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ls::compute {
namespace {

constexpr int64_t kSlots = 512;  // positions held per thread (a window and its block fit many times over)

struct AngleCache {
  std::vector<float> inv_freq;   // the table the entries belong to
  std::vector<int64_t> owner;    // [kSlots] the position each slot holds, -1 when empty
  std::vector<float> values;     // [kSlots, 2, half] cos then sin
};

}  // namespace

RopeAngles rope_angles(const RopeTable& table, int64_t position) {
  thread_local AngleCache cache;
  const int half = table.head_dim / 2;
  if (cache.inv_freq != table.inv_freq) {
    cache.inv_freq = table.inv_freq;
    cache.owner.assign(kSlots, -1);
    cache.values.assign(static_cast<size_t>(kSlots * 2 * half), 0.0f);
  }
  const int64_t slot = (position % kSlots + kSlots) % kSlots;
  float* cos = cache.values.data() + slot * 2 * half;
  float* sin = cos + half;
  if (cache.owner[slot] != position) {
    const float at = static_cast<float>(position);
    for (int i = 0; i < half; ++i) {
      const float angle = at * table.inv_freq[i];
      cos[i] = std::cos(angle);
      sin[i] = std::sin(angle);
    }
    cache.owner[slot] = position;
  }
  return RopeAngles{cos, sin};
}

}  // namespace ls::compute
