// Keyed sampling (DESIGN.md): a draw at absolute position p for seed s is a pure function of (logits, s, p).
#pragma once

#include <cstdint>
#include <span>

namespace ls {

// How one request draws tokens. temperature == 0 means greedy (argmax, ties to the lower id).
struct Sampling {
  float temperature = 0.0f;
  int top_k = 0;        // 0 = off
  float top_p = 1.0f;   // 1 = off
  float min_p = 0.0f;   // 0 = off
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f; }
};

// The token drawn from `logits` [vocab] fp32 for the token at absolute `position`:
// argmax_i (logit_i / T - log(-log u(seed, position, i))) over the candidates that survive top-k, top-p, min-p.
int32_t draw_token(std::span<const float> logits, const Sampling& sampling, int64_t position);

// The key of one (seed, position, token) triple: splitmix64(splitmix64(splitmix64(seed) ^ position) ^ token).
uint64_t sampling_key(uint64_t seed, int64_t position, int32_t token);

// The Gumbel noise -log(-log u) with u = uniform_open01(sampling_key(seed, position, token)), in double.
double sampling_gumbel(uint64_t seed, int64_t position, int32_t token);

// The seed of a request that gave none: sha256 of the prompt ids as comma-joined decimal, first 8 bytes
// little-endian, masked to 63 bits.
uint64_t seed_from_prompt(std::span<const int32_t> prompt);

}  // namespace ls
