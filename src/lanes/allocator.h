// The row allocator: buys draft rows across streams, highest chance first, and keeps the round size with the most
// expected tokens per millisecond. Zero extra rows always competes.
#pragma once

#include <functional>
#include <span>
#include <vector>

namespace ls {

// One stream's offer: rows it takes whatever happens, then optional extra rows in order with their chances.
struct RowOffer {
  int fixed_rows = 1;             // the pending row plus any forced (probe) drafts
  double fixed_expected = 1.0;    // expected tokens from the fixed rows
  std::vector<float> chances;     // [extra] cumulative chance of each extra row, non-increasing
  double activation_ms = 0;       // paid once if any extra row is bought (e.g. the drafter catching up on taps)
};

// What a round would cost in ms for `total_rows` rows when `streams_with_extra` streams bought extra rows, the
// deepest `deepest_extra` of them.
using RoundCost = std::function<double(int total_rows, int streams_with_extra, int deepest_extra)>;

struct Allocation {
  std::vector<int> extra_rows;  // [offers] extra rows bought per offer
  int total_rows = 0;
  double expected_tokens = 0;
  double cost_ms = 0;
  double tokens_per_ms = 0;
};

// Greedy marginal purchase: because chances are non-increasing along each chain, taking the highest chance first
// gives the best set of rows at every total; the total with the best rate wins. The zero-extra rate is multiplied
// by `zero_margin` (>= 1 makes drafting beat plain by that factor before it is bought).
Allocation allocate_rows(std::span<const RowOffer> offers, int max_rows, const RoundCost& cost, double zero_margin);

}  // namespace ls
