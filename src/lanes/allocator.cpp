// Greedy row purchase by chance with the best expected-tokens-per-ms cut.
#include "lanes/allocator.h"

#include <algorithm>
#include <queue>
#include <tuple>

namespace ls {

Allocation allocate_rows(std::span<const RowOffer> offers, int max_rows, const RoundCost& cost, double zero_margin) {
  Allocation best;
  best.extra_rows.assign(offers.size(), 0);
  for (const RowOffer& offer : offers) {
    best.total_rows += offer.fixed_rows;
    best.expected_tokens += offer.fixed_expected;
  }
  auto rate = [&](double expected, double ms) { return ms > 0 ? expected / ms : expected * 1e9; };
  best.cost_ms = cost(best.total_rows, 0, 0);
  best.tokens_per_ms = rate(best.expected_tokens, best.cost_ms);
  double best_score = best.tokens_per_ms * zero_margin;

  // Max-heap on (chance, lower offer index first).
  using Entry = std::tuple<float, int>;
  auto lower = [](const Entry& a, const Entry& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
    return std::get<1>(a) > std::get<1>(b);
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(lower)> heap(lower);
  for (size_t index = 0; index < offers.size(); ++index) {
    if (!offers[index].chances.empty()) heap.push({offers[index].chances[0], static_cast<int>(index)});
  }
  // Rows the chains could still add, and whether every chain is non-increasing (the contract; a drafter's chances are
  // not checked for it): only then may the scan stop early (below).
  int rows_left = 0;
  double mass_left = 0;  // the chances of those rows, summed
  bool monotone = true;
  for (const RowOffer& offer : offers) {
    rows_left += static_cast<int>(offer.chances.size());
    for (float chance : offer.chances) mass_left += chance;
    for (size_t at = 1; at < offer.chances.size() && monotone; ++at) {
      monotone = !(offer.chances[at] > offer.chances[at - 1]);
    }
  }
  std::vector<int> counts(offers.size(), 0);
  int rows = best.total_rows;
  double expected = best.expected_tokens;
  int streams_with_extra = 0;
  int deepest = 0;
  double activation_ms = 0;
  while (!heap.empty() && rows < max_rows) {
    auto [chance, index] = heap.top();
    heap.pop();
    if (counts[index] == 0) {
      ++streams_with_extra;
      activation_ms += offers[index].activation_ms;
    }
    ++counts[index];
    deepest = std::max(deepest, counts[index]);
    ++rows;
    --rows_left;
    mass_left -= chance;
    expected += chance;
    if (counts[index] < static_cast<int>(offers[index].chances.size())) {
      heap.push({offers[index].chances[counts[index]], index});
    }
    const double ms = cost(rows, streams_with_extra, deepest) + activation_ms;
    const double candidate = rate(expected, ms);
    if (candidate > best_score) {
      best_score = candidate;
      best.extra_rows = counts;
      best.total_rows = rows;
      best.expected_tokens = expected;
      best.cost_ms = ms;
      best.tokens_per_ms = candidate;
    }
    // No later cut can win: a round costs no less with more rows, streams or depth (monotone tables, activations
    // >= 0), and the rows left add at most their chances' sum, nor more than the rows that fit at the heap's top (no
    // row left has a higher chance: each chain is non-increasing), so every later rate is at most that at this
    // cost. Lanes18: the dormant streams' decisions and the gate's pooled rounds scanned every row up to max_rows for
    // the same answer (the early stop gives it to the bit; the slack covers rounding).
    if (!monotone || ms <= 0) continue;
    constexpr double kRoundingSlack = 1e-9;
    const double top = heap.empty() ? 0.0 : std::get<0>(heap.top());
    const double gain_left = std::min(mass_left, std::min(rows_left, max_rows - rows) * top);
    if ((expected + std::max(gain_left, 0.0)) / ms * (1.0 + kRoundingSlack) <= best_score) break;
  }
  return best;
}

}  // namespace ls
