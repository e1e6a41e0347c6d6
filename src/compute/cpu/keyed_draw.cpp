// The keyed draw with an exact prune by the key's bits (keyed_draw.h).
#include "compute/cpu/keyed_draw.h"

#include <bit>
#include <cmath>
#include <limits>

#include "base/hash.h"

namespace ls::compute {
namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kMargin = 1e-6;  // covers the logs' and the sums' rounding (scores are far below 1e6)

// draw_token's greedy pick: the first largest non-NaN logit (0 when all are NaN).
int32_t first_largest(std::span<const float> logits, bool& found) {
  int32_t best = 0;
  float best_logit = -std::numeric_limits<float>::infinity();
  found = false;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (!found ? !std::isnan(logits[id]) : logits[id] > best_logit) {
      best = static_cast<int32_t>(id);
      best_logit = logits[id];
      found = true;
    }
  }
  return best;
}

// An upper bound of the Gumbel noise of `key` (see keyed_draw.h); infinite where u may round to 1.
double noise_bound(uint64_t key) {
  const uint64_t j = ((uint64_t{1} << 53) - 1) - (key >> 11);
  if (j == 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(54 - static_cast<int>(std::bit_width(j))) * kLn2;
}

}  // namespace

int32_t draw_token_pruned(std::span<const float> logits, const Sampling& sampling, int64_t position) {
  const bool filtered = (sampling.top_k > 0 && sampling.top_k < static_cast<int>(logits.size())) ||
                        sampling.top_p < 1.0f || sampling.min_p > 0.0f;
  if (logits.empty() || sampling.greedy() || filtered) return draw_token(logits, sampling, position);
  bool found = false;
  const int32_t start = first_largest(logits, found);
  if (!found) return start;  // every logit NaN: draw_token's greedy fallback
  const double temperature = sampling.temperature;
  // As draw_token: the largest logit first, then every id in order; ties go to the lower id.
  int32_t best = start;
  double best_score =
      static_cast<double>(logits[start]) / temperature + sampling_gumbel(sampling.seed, position, start);
  // The key's first two rounds depend only on (seed, position).
  const uint64_t prefix = splitmix64(splitmix64(sampling.seed) ^ static_cast<uint64_t>(position));
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (id == start) continue;
    const double scaled = static_cast<double>(logits[id]) / temperature;
    if (std::isnan(scaled)) continue;
    const uint64_t key = splitmix64(prefix ^ static_cast<uint64_t>(static_cast<uint32_t>(id)));
    if (scaled + noise_bound(key) + kMargin < best_score) continue;  // cannot reach the best score
    const double score = scaled - std::log(-std::log(uniform_open01(key)));
    if (score > best_score || (score == best_score && id < best)) {
      best = id;
      best_score = score;
    }
  }
  return best;
}

}  // namespace ls::compute
