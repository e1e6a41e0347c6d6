// Measured costs: the tables' online corrections (outliers, pass scale, absorbs), per sampling mode.
#include <algorithm>
#include <vector>

#include "lanes/pricing.h"

namespace ls {

double Pricing::verify_ms(int rows, PassMode mode) const {
  const bool sampled = mode == PassMode::Sampled;
  return sampled ? sampled_verify_.ms(rows) : tables_.verify.ms(rows);
}


namespace {
// A measurement above this times the table's value is an outlier; only a run of kOutliersToMove in a row (the cost
// really moved) reaches the table.
constexpr double kOutlierRatio = 1.5;
constexpr int kOutliersToMove = 3;

// Whether a measurement should move the table, counting the entry's outliers in a row.
bool accept_measurement(int& outliers_in_a_row, double ms, double table_ms) {
  if (ms <= kOutlierRatio * table_ms) {
    outliers_in_a_row = 0;
    return true;
  }
  return ++outliers_in_a_row >= kOutliersToMove;
}
}  // namespace

void Pricing::observe_verify(int rows, double ms, PassMode mode) {
  if (rows < 1) return;
  const bool sampled = mode == PassMode::Sampled;
  std::vector<int>& outliers = sampled ? sampled_verify_outliers_ : verify_outliers_;
  VerifyCosts& table = sampled ? sampled_verify_ : tables_.verify;
  if (outliers.size() <= static_cast<size_t>(rows)) outliers.resize(rows + 1, 0);
  if (!accept_measurement(outliers[rows], ms, table.ms(rows))) return;
  table.observe(rows, ms, options_.cost_rate);
}

void Pricing::observe_draft(int streams, int depth, double ms, PassMode mode) {
  if (mode == PassMode::Sampled) {
    observe_sampled_pass(streams, depth, ms);
    return;
  }
  const double table_ms = tables_.draft.ms(streams, depth);
  const bool accepted = accept_measurement(draft_outliers_in_a_row_, ms, table_ms);
  // Outliers left out of the table still cost what they cost: their excess, averaged over every pass, scales the
  // priced pass (a CUDA drafter's first two passes of each new shape, one in two passes in a short run of many
  // request counts, made passes cost 2-4x the table on average while every single one was left out).
  const double ratio = accepted || table_ms <= 0 ? 1.0 : ms / table_ms;
  pass_scale_ += options_.cost_rate * (ratio - pass_scale_);
  if (accepted) tables_.draft.observe(streams, depth, ms, options_.cost_rate);
}

double Pricing::draft_ms(int streams, int depth, PassMode mode) const {
  if (mode == PassMode::Sampled) {
    return sampled_.table.ms(streams, depth) * sampled_.scale;
  }
  return tables_.draft.ms(streams, depth) * pass_scale_;
}

void Pricing::observe_sampled_pass(int streams, int depth, double ms) {
  // As greedy passes (outliers left out of the table unless three come in a row, their excess scaling the price),
  // and: two passes in a row far above the table are not a new shape's one-off (an eager run, then a capture, each
  // at most once a shape and cheaper than this) but what sampled passes cost: the scale jumps to the lesser of the
  // two ratios at once instead of creeping toward them.
  constexpr double kFarRatio = 3.0;
  constexpr int kFarToJump = 2;
  const double table_ms = sampled_.table.ms(streams, depth);
  const bool accepted = accept_measurement(sampled_.outliers_in_a_row, ms, table_ms);
  const double ratio = table_ms > 0 ? ms / table_ms : 1.0;
  if (ratio > kFarRatio) {
    sampled_.far_least = sampled_.far_in_a_row++ == 0 ? ratio : std::min(sampled_.far_least, ratio);
  } else {
    sampled_.far_in_a_row = 0;
  }
  sampled_.scale += options_.cost_rate * ((accepted ? 1.0 : ratio) - sampled_.scale);
  if (sampled_.far_in_a_row >= kFarToJump) sampled_.scale = std::max(sampled_.scale, sampled_.far_least);
  if (accepted) sampled_.table.observe(streams, depth, ms, options_.cost_rate);
}

void Pricing::observe_absorb(int rows, double ms) {
  if (rows <= 0) return;
  // A one-off (a batched call's first sighting of a row count captures a graph: 9.9 ms for 64 streams' rows of the
  // synth 1.2B on the H200, 0.29 ms after) is left out unless three come in a row, as slow forwards and passes are:
  // spread over its 64 rows it priced every row at 12x its cost, and 64 whole contexts never paid a pass (s14A).
  if (!accept_measurement(absorb_outliers_in_a_row_, ms, tables_.absorb_ms(rows))) return;
  // Short absorbs (a round's kept rows) measure the call; long ones (catch-ups) the rows on top of it.
  constexpr int kLongestShortAbsorb = 16;
  if (rows <= kLongestShortAbsorb) {
    const double call_ms = ms - tables_.absorb_ms_per_row * rows;
    tables_.absorb_call_ms = std::max(0.0, tables_.absorb_call_ms + options_.cost_rate * (call_ms - tables_.absorb_call_ms));
  } else {
    const double per_row = (ms - tables_.absorb_call_ms) / rows;
    tables_.absorb_ms_per_row =
        std::max(0.0, tables_.absorb_ms_per_row + options_.cost_rate * (per_row - tables_.absorb_ms_per_row));
  }
}

}  // namespace ls
