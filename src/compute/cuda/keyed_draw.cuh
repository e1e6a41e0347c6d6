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

// The (seed, position) part of every token's key: mix(mix(seed) ^ position).
__device__ __forceinline__ uint64_t row_key(uint64_t seed, int64_t position) {
  return mix(mix(seed) ^ static_cast<uint64_t>(position));
}

// The 53 uniform bits of `token`'s key under `row_key` (the key >> 11).
__device__ __forceinline__ uint64_t uniform_bits(uint64_t row_key, int32_t token) {
  return mix(row_key ^ static_cast<uint64_t>(static_cast<uint32_t>(token))) >> 11;
}

// u = (bits + 0.5) 2^-53, as ls::uniform_open01.
__device__ __forceinline__ double uniform_of_bits(uint64_t bits) {
  return __dmul_rn(static_cast<double>(bits) + 0.5, 1.0 / 9007199254740992.0);
}

// -log(-log u) for u = uniform_of_bits(bits).
__device__ __forceinline__ double gumbel_of_bits(uint64_t bits) { return -log(-log(uniform_of_bits(bits))); }

// -log(-log u) with u from the (seed, position, token) key, as ls::sampling_gumbel.
__device__ __forceinline__ double gumbel(uint64_t seed, int64_t position, int32_t token) {
  return gumbel_of_bits(uniform_bits(row_key(seed, position), token));
}

// Candidate order as one integer, larger = earlier: larger logit first, then lower id (+0 and -0 compare equal, as
// floats do). Only for non-NaN logits.
__device__ __forceinline__ uint64_t order_key(float logit, int64_t id) {
  uint32_t bits = logit == 0.0f ? 0u : __float_as_uint(logit);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(bits) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

// The id an order key was made from.
__device__ __forceinline__ int32_t id_of_key(uint64_t key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}

// A candidate's weight exp((l - max) / T) as a float (the argument rounded to float, expf), and an upper bound on
// its distance from the CPU's double weight in units of 2^-24: wf (2 |arg| + 8) (the argument's rounding moves
// the weight by <= |arg| 2^-24 relative, expf by <= 2 ulp = 4 units; twice that). Weights below 2^-126 (denormal
// or zero) are off by at most 2^-126 each, which the band adds per candidate.
struct FloatWeight {
  float weight;
  float error;
};
__device__ __forceinline__ FloatWeight float_weight(float logit, double max_logit, double inverse_temperature) {
  const float arg = static_cast<float>((static_cast<double>(logit) - max_logit) * inverse_temperature);
  const float weight = expf(arg);
  return FloatWeight{weight, weight > 0.0f ? weight * (2.0f * fabsf(arg) + 8.0f) : 0.0f};
}

// The verified top-p check's band (session 9): a winner whose float mass above sits below top_p x total minus
// it is kept, above plus it cut, by the CPU's one-by-one sums too. The float weights of `above` are within
// above_error 2^-24 of the CPU's, those of `total` within total_error 2^-24 (relative to each chunk's max when the
// sums were spread and rescaled); any two orders of adding n terms differ by <= 2 (n - 1) u of the sum; the
// products and a rescaling (<= (n + 4) u total) a few u more; weights below 2^-126 are off by <= 2^-126 each. The
// band covers all of it, the u terms twice over.
__device__ __forceinline__ double top_p_band(double above_error, double total_error, float top_p, double count,
                                             double total) {
  return 1.01 * (above_error + top_p * total_error) * 0x1p-24 + (24.0 * count + 160.0) * 0x1p-53 * total +
         count * 0x1p-124;
}

// A member j < n of a known candidate set whose order keys are keys [0, n), descending (the merged top-k sets): its
// id, logit and the CPU's double weight exp((l - max) / T), stored best-first at weights[j] and in id order at
// weights[stride + its place by id] (the CPU's two summation orders).
struct SetMember {
  int32_t id;
  float logit;
  double weight;
};
__device__ __forceinline__ SetMember set_member(const float* row, const uint64_t* keys, int n, int j,
                                                double max_logit, double temperature, double* weights, int stride) {
  SetMember m;
  m.id = id_of_key(keys[j]);
  m.logit = __ldcg(row + m.id);
  m.weight = exp((static_cast<double>(m.logit) - max_logit) / temperature);
  int by_id = 0;
  for (int other = 0; other < n; ++other) by_id += id_of_key(keys[other]) < m.id;
  weights[j] = m.weight;
  weights[stride + by_id] = m.weight;
  return m;
}

// draw_token's top-p over such a set (one thread): the normaliser one by one in id order, then the kept prefix
// best-first until its mass reaches top_p x the normaliser; the kept count.
__device__ __forceinline__ int set_kept(const double* weights, int stride, int n, float top_p) {
  if (!(top_p < 1.0f)) return n;
  double total = 0;
  for (int i = 0; i < n; ++i) total += weights[stride + i];
  const double target = static_cast<double>(top_p) * total;
  double mass = 0;
  for (int i = 0; i < n; ++i) {
    mass += weights[i];
    if (mass >= target) return i + 1;
  }
  return n;
}

// Sorts keys[0, N) descending (bitonic; empty slots hold 0 and sink to the end), every thread of the block taking
// part (blockDim.x == Threads); the block is synchronised on return.
template <int N, int Threads>
__device__ void sort_descending(uint64_t* keys) {
  for (int size = 2; size <= N; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < N; i += Threads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const bool descending = (i & size) == 0;
        const uint64_t a = keys[i], b = keys[j];
        if (descending ? a < b : a > b) {
          keys[i] = b;
          keys[j] = a;
        }
      }
    }
  }
  __syncthreads();
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
