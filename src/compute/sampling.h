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

}  // namespace ls
