// The lanes' host work in rounds that buy nothing (lanes18): cheaper, and the same decisions to the bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "lanes/allocator.h"
#include "lanes/cost_tables.h"

namespace ls {
namespace {

// The allocator before lanes18: the same greedy purchase, scanning every row up to max_rows (no early stop).
Allocation full_scan(std::span<const RowOffer> offers, int max_rows, const RoundCost& cost, double zero_margin) {
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
  std::vector<int> counts(offers.size(), 0);
  int rows = best.total_rows, streams = 0, deepest = 0;
  double expected = best.expected_tokens, activation = 0;
  while (rows < max_rows) {
    // The highest next chance, the lower offer first on ties (as the allocator's heap).
    int pick = -1;
    for (size_t index = 0; index < offers.size(); ++index) {
      if (counts[index] >= static_cast<int>(offers[index].chances.size())) continue;
      if (pick < 0 || offers[index].chances[counts[index]] > offers[pick].chances[counts[pick]]) {
        pick = static_cast<int>(index);
      }
    }
    if (pick < 0) break;
    if (counts[pick] == 0) {
      ++streams;
      activation += offers[pick].activation_ms;
    }
    expected += offers[pick].chances[counts[pick]];
    ++counts[pick];
    deepest = std::max(deepest, counts[pick]);
    ++rows;
    const double ms = cost(rows, streams, deepest) + activation;
    const double candidate = rate(expected, ms);
    if (candidate > best_score) {
      best_score = candidate;
      best.extra_rows = counts;
      best.total_rows = rows;
      best.expected_tokens = expected;
      best.cost_ms = ms;
      best.tokens_per_ms = candidate;
    }
  }
  return best;
}

TEST(LanesHostWork, TheAllocatorsEarlyStopBuysWhatAFullScanBuysToTheBit) {
  // Random pools like the lanes' decisions: pending rows, chains of cumulative chances (restarted dormant streams'
  // low ones, whole contexts' high ones, always-right ones), activations, and monotone round costs with a pass.
  std::mt19937 random(1818);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int stopped_early = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int streams = 1 + static_cast<int>(random() % 24);
    const int max_rows = streams + 1 + static_cast<int>(random() % 128);
    std::vector<RowOffer> offers(streams + 1);
    offers[0].fixed_rows = streams;
    offers[0].fixed_expected = streams;
    const int kind = trial % 4;
    for (int index = 1; index <= streams; ++index) {
      RowOffer& offer = offers[index];
      offer.fixed_rows = 0;
      offer.fixed_expected = 0;
      const int depth = static_cast<int>(random() % 10);
      double chain = 1.0;
      for (int row = 0; row < depth; ++row) {
        const double conditional = kind == 0 ? 0.05 + 0.2 * unit(random) : kind == 1 ? 0.5 + 0.5 * unit(random)
                                   : kind == 2                            ? 1.0
                                                                          : unit(random);
        chain *= conditional;
        offer.chances.push_back(static_cast<float>(chain));
      }
      offer.activation_ms = unit(random) < 0.5 ? 0.0 : 0.01 * unit(random);
    }
    const double fixed = 0.05 + unit(random), per_row = 0.02 * unit(random), pass = 0.3 * unit(random);
    const double pass_row = 0.01 * unit(random), per_depth = 0.02 * unit(random);
    const RoundCost cost = [&](int rows, int with_extra, int deepest) {
      return fixed + per_row * rows + (with_extra > 0 ? pass + pass_row * with_extra + per_depth * deepest : 0.0);
    };
    const double margin = 1.0 + 0.1 * unit(random);
    int evaluations = 0;
    const RoundCost counted = [&](int rows, int with_extra, int deepest) {
      ++evaluations;
      return cost(rows, with_extra, deepest);
    };
    const Allocation stopped = allocate_rows(offers, max_rows, counted, margin);
    const Allocation scanned = full_scan(offers, max_rows, cost, margin);
    ASSERT_EQ(stopped.extra_rows, scanned.extra_rows) << trial;
    ASSERT_EQ(stopped.total_rows, scanned.total_rows) << trial;
    ASSERT_EQ(stopped.expected_tokens, scanned.expected_tokens) << trial;
    ASSERT_EQ(stopped.cost_ms, scanned.cost_ms) << trial;
    ASSERT_EQ(stopped.tokens_per_ms, scanned.tokens_per_ms) << trial;
    int rows_on_offer = 0;
    for (const RowOffer& offer : offers) rows_on_offer += static_cast<int>(offer.chances.size());
    stopped_early += evaluations < 1 + std::min(rows_on_offer, max_rows - streams);
  }
  // It does stop early where little is worth buying (the dormant streams' pools).
  EXPECT_GT(stopped_early, 1000);
}

TEST(LanesHostWork, ChainsThatRiseAreScannedToTheEnd) {
  // A drafter's chances are not checked to fall along a chain: where one rises no row is ruled out by the stop.
  std::vector<RowOffer> offers(2);
  offers[0].fixed_rows = 1;
  offers[0].fixed_expected = 1;
  offers[1].fixed_rows = 0;
  offers[1].fixed_expected = 0;
  offers[1].chances = {0.01f, 0.01f, 0.01f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f};
  const RoundCost cost = [](int rows, int with_extra, int) { return 1.0 + 0.01 * rows + (with_extra ? 0.2 : 0.0); };
  const Allocation stopped = allocate_rows(offers, 64, cost, 1.0);
  EXPECT_EQ(stopped.extra_rows, full_scan(offers, 64, cost, 1.0).extra_rows);
  EXPECT_EQ(stopped.extra_rows[1], 8);
}

TEST(LanesHostWork, AVerifyTableMovedInPlaceReadsAsOneRefreshedInFull) {
  // The table before lanes18: each entry's own estimate, lowered below a faster measurement, read as the running
  // maximum recomputed over every row count after each measurement.
  constexpr int kRows = 128;
  std::vector<TimedPoint> timed = {{1, 0, 0.19}, {8, 0, 0.2}, {32, 0, 0.27}, {128, 0, 0.6}};
  VerifyCosts table;
  table.init(kRows, timed);
  std::vector<double> measured(kRows + 1), running(kRows + 1, 0.0);
  for (int rows = 1; rows <= kRows; ++rows) measured[rows] = table.ms(rows);  // monotone after init
  std::mt19937 random(18);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int step = 0; step < 5000; ++step) {
    const int rows = 1 + static_cast<int>(random() % kRows);
    const double ms = step % 7 == 0 ? 3.0 * unit(random) : 0.1 + 0.6 * unit(random);
    const double value = table.ms(rows) + 0.2 * (ms - table.ms(rows));
    measured[rows] = value;
    for (int below = 1; below < rows; ++below) measured[below] = std::min(measured[below], value);
    for (int at = 1; at <= kRows; ++at) running[at] = std::max(measured[at], running[at - 1]);
    table.observe(rows, ms, 0.2);
    for (int at = 1; at <= kRows; ++at) ASSERT_EQ(table.ms(at), running[at]) << "step " << step << " rows " << at;
  }
}

}  // namespace
}  // namespace ls
