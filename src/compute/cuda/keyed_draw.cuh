// Device pieces of the keyed draw (DESIGN.md "Keyed sampling"), shared by the target's sampler and the drafter's
// Markov scan so both draw exactly as compute::draw_token does on the CPU.
#pragma once

#include <cstdint>

namespace ls::cuda::keyed {

// splitmix64's finaliser, as ls::splitmix64.
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// -log(-log u) with u from the (seed, position, token) key, as ls::sampling_gumbel.
__device__ __forceinline__ double gumbel(uint64_t seed, int64_t position, int32_t token) {
  uint64_t key = mix(seed);
  key = mix(key ^ static_cast<uint64_t>(position));
  key = mix(key ^ static_cast<uint64_t>(static_cast<uint32_t>(token)));
  const double u = __dmul_rn(static_cast<double>(key >> 11) + 0.5, 1.0 / 9007199254740992.0);
  return -log(-log(u));
}

// Candidate order as one integer, larger = earlier: larger logit first, then lower id (+0 and -0 compare equal, as
// floats do). Only for non-NaN logits.
__device__ __forceinline__ uint64_t order_key(float logit, int64_t id) {
  uint32_t bits = logit == 0.0f ? 0u : __float_as_uint(logit);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(bits) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

struct Best {
  double value;
  int32_t id;  // -1 = none yet
};
// The better of two: a larger value, a tie to the lower id; none loses.
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.id < 0) return a;
  if (a.id < 0) return b;
  return (b.value > a.value || (b.value == a.value && b.id < a.id)) ? b : a;
}

}  // namespace ls::cuda::keyed
