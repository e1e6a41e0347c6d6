// The keyed sampler: greedy argmax, or Gumbel-max over the top-k / top-p / min-p survivors keyed by (seed, position,
// id), pruned exactly by each key's noise bound.
#include "compute/sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/hash.h"

namespace ls {
namespace {

// An upper bound of one key's Gumbel noise from its bits, so that most ids are skipped after the key without the two
// logs: -log(-log u) <= -log(1 - u), and 1 - u >= 2^(bit_width(j) - 54) for the key's 53-bit j = 2^53 - 1 - (key >>
// 11), so the bound is (54 - bit_width(j)) ln 2 plus a margin for the logs' and sums' rounding (scores are far below
// 1e6). j = 0 can round u to 1: no bound.
double key_noise_bound(uint64_t key) {
  constexpr double kLn2 = 0.69314718055994530942;
  const uint64_t j = ((uint64_t{1} << 53) - 1) - (key >> 11);
  if (j == 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(54 - static_cast<int>(std::bit_width(j))) * kLn2 + 1e-6;
}

// Candidate order for top-k and top-p: larger logit first, ties to the lower id.
struct ByLogitThenId {
  std::span<const float> logits;
  bool operator()(int32_t a, int32_t b) const {
    if (logits[a] != logits[b]) return logits[a] > logits[b];
    return a < b;
  }
};

int32_t greedy_token(std::span<const float> logits) {
  int32_t best = 0;
  float best_logit = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (size_t id = 0; id < logits.size(); ++id) {
    // NaN compares false, so a NaN logit never wins; the first maximum wins ties.
    if (!found ? !std::isnan(logits[id]) : logits[id] > best_logit) {
      best = static_cast<int32_t>(id);
      best_logit = logits[id];
      found = true;
    }
  }
  return best;
}

// The candidates (ids, ascending) that survive top-k, then top-p, then min-p; empty means "every non-NaN id".
std::vector<int32_t> surviving_candidates(std::span<const float> logits, const Sampling& sampling, bool& all) {
  const int vocab = static_cast<int>(logits.size());
  const bool use_top_k = sampling.top_k > 0 && sampling.top_k < vocab;
  const bool use_top_p = sampling.top_p < 1.0f;
  const bool use_min_p = sampling.min_p > 0.0f;
  all = !use_top_k && !use_top_p && !use_min_p;
  std::vector<int32_t> ids;
  if (all) return ids;
  ids.reserve(vocab);
  for (int32_t id = 0; id < vocab; ++id) {
    if (!std::isnan(logits[id])) ids.push_back(id);
  }
  if (ids.empty()) return ids;
  ByLogitThenId order{logits};
  if (use_top_k && static_cast<int>(ids.size()) > sampling.top_k) {
    std::nth_element(ids.begin(), ids.begin() + (sampling.top_k - 1), ids.end(), order);
    ids.resize(sampling.top_k);
  }
  const double temperature = sampling.temperature;
  double max_logit = -std::numeric_limits<double>::infinity();
  for (int32_t id : ids) max_logit = std::max(max_logit, static_cast<double>(logits[id]));
  auto weight = [&](int32_t id) { return std::exp((static_cast<double>(logits[id]) - max_logit) / temperature); };
  if (use_top_p) {
    // Normalizer summed in ascending id order; the kept prefix is summed in probability order.
    std::sort(ids.begin(), ids.end());
    double total = 0;
    for (int32_t id : ids) total += weight(id);
    const double target_mass = static_cast<double>(sampling.top_p) * total;
    size_t sorted = 0;
    size_t kept = ids.size();
    double mass = 0;
    for (size_t index = 0; index < ids.size(); ++index) {
      if (index == sorted) {
        // Sort a growing prefix only: most of the vocabulary never needs ordering.
        size_t next = std::min(ids.size(), std::max<size_t>(64, sorted * 4));
        std::partial_sort(ids.begin() + sorted, ids.begin() + next, ids.end(), order);
        sorted = next;
      }
      mass += weight(ids[index]);
      if (mass >= target_mass) {
        kept = index + 1;
        break;
      }
    }
    ids.resize(kept);
  }
  if (use_min_p) {
    const double floor = static_cast<double>(sampling.min_p);
    std::erase_if(ids, [&](int32_t id) { return weight(id) < floor; });
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

uint64_t sampling_key(uint64_t seed, int64_t position, int32_t token) {
  uint64_t key = splitmix64(seed);
  key = splitmix64(key ^ static_cast<uint64_t>(position));
  return splitmix64(key ^ static_cast<uint64_t>(static_cast<uint32_t>(token)));
}

double sampling_gumbel(uint64_t seed, int64_t position, int32_t token) {
  return -std::log(-std::log(uniform_open01(sampling_key(seed, position, token))));
}

uint64_t seed_from_prompt(std::span<const int32_t> prompt) {
  std::string text;
  for (size_t index = 0; index < prompt.size(); ++index) {
    if (index > 0) text += ',';
    text += std::to_string(prompt[index]);
  }
  auto digest = sha256(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  uint64_t seed = 0;
  for (int byte = 7; byte >= 0; --byte) seed = (seed << 8) | digest[byte];
  return seed & 0x7fffffffffffffffull;
}

int32_t draw_token(std::span<const float> logits, const Sampling& sampling, int64_t position) {
  if (logits.empty()) return 0;
  if (sampling.greedy()) return greedy_token(logits);
  bool all = false;
  const std::vector<int32_t> candidates = surviving_candidates(logits, sampling, all);
  if (!all && candidates.empty()) return greedy_token(logits);
  // Start from the candidates' first largest logit so the bound prunes most of them, then scan them in id order;
  // ties still go to the lower id because a tie with the start is resolved by comparing ids.
  int32_t best = all ? greedy_token(logits) : candidates[0];
  if (!all) {
    for (int32_t id : candidates) best = logits[id] > logits[best] ? id : best;
  }
  if (std::isnan(logits[best])) return best;  // every logit NaN: greedy's fallback
  const double temperature = sampling.temperature;
  const int32_t start = best;
  double best_score =
      static_cast<double>(logits[start]) / temperature + sampling_gumbel(sampling.seed, position, start);
  // The key's first two rounds depend only on (seed, position).
  const uint64_t prefix = splitmix64(splitmix64(sampling.seed) ^ static_cast<uint64_t>(position));
  auto consider = [&](int32_t id) {
    const double scaled = static_cast<double>(logits[id]) / temperature;
    if (id == start || std::isnan(scaled)) return;
    const uint64_t key = splitmix64(prefix ^ static_cast<uint64_t>(static_cast<uint32_t>(id)));
    if (scaled + key_noise_bound(key) < best_score) return;  // this key's noise cannot reach the best score
    const double score = scaled - std::log(-std::log(uniform_open01(key)));
    if (score > best_score || (score == best_score && id < best)) {
      best = id;
      best_score = score;
    }
  };
  if (all) {
    for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) consider(id);
  } else {
    for (int32_t id : candidates) consider(id);
  }
  return best;
}

}  // namespace ls
