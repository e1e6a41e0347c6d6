// The drafter's sampled pick (draft/dspark/markov_scan.cpp) under its old name: draw_token prunes by its keys' bits
// itself now (compute/sampling.cpp), so this is draw_token; it goes when markov_scan.cpp calls draw_token.
#pragma once

#include <cstdint>
#include <span>

#include "compute/sampling.h"

namespace ls::compute {

inline int32_t draw_token_pruned(std::span<const float> logits, const Sampling& sampling, int64_t position) {
  return draw_token(logits, sampling, position);
}

}  // namespace ls::compute
