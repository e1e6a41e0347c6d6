// Trim and depth decisions through the row allocator, with probes so a bad estimate cannot stick.
#include "lanes/pricing.h"

#include <algorithm>

#include "lanes/allocator.h"

namespace ls {

Pricing::Pricing(CostTables tables, PricingOptions options, int max_rows, bool has_confidence)
    : tables_(std::move(tables)),
      options_(std::move(options)),
      max_rows_(max_rows),
      has_confidence_(has_confidence),
      calibration_(static_cast<int>(std::max<size_t>(options_.depth_prior.size(), 16))) {
  pooled_acceptance_.reset(options_.depth_prior);
}

std::vector<float> Pricing::held_chances(const Stream& stream) const {
  const int held = static_cast<int>(stream.held_drafts.size());
  if (has_confidence_ && static_cast<int>(stream.held_chances.size()) == held) {
    return calibration_.calibrate(stream.held_chances);
  }
  return stream.acceptance.chain(held);
}

void Pricing::trim(std::span<Stream* const> streams) const {
  std::vector<RowOffer> offers(streams.size());
  for (size_t index = 0; index < streams.size(); ++index) {
    const Stream& stream = *streams[index];
    std::vector<float> chances = held_chances(stream);
    const int forced = std::min<int>(stream.held_forced, static_cast<int>(chances.size()));
    offers[index].fixed_rows = 1 + forced;
    offers[index].fixed_expected = 1.0;
    for (int row = 0; row < forced; ++row) offers[index].fixed_expected += chances[row];
    offers[index].chances.assign(chances.begin() + forced, chances.end());
  }
  auto cost = [&](int rows, int, int) { return tables_.verify.ms(rows) + overhead_ms_; };
  Allocation allocation = allocate_rows(offers, max_rows_, cost, 1.0);
  for (size_t index = 0; index < streams.size(); ++index) {
    Stream& stream = *streams[index];
    const size_t keep = std::min(stream.held_drafts.size(),
                                 static_cast<size_t>(offers[index].fixed_rows - 1 + allocation.extra_rows[index]));
    stream.held_drafts.resize(keep);
    if (stream.held_chances.size() > keep) stream.held_chances.resize(keep);
  }
}

std::vector<DepthPlan> Pricing::plan_depths(std::span<Stream* const> drafting, std::span<const int> caps,
                                            int round_streams) {
  std::vector<RowOffer> offers(drafting.size() + 1);
  // The first offer stands for every stream's pending row in the next round.
  offers[0].fixed_rows = std::clamp(round_streams, 1, max_rows_);
  offers[0].fixed_expected = offers[0].fixed_rows;
  for (size_t index = 0; index < drafting.size(); ++index) {
    offers[index + 1].fixed_rows = 0;
    offers[index + 1].fixed_expected = 0;
    // Grow into unexplored depths a step at a time, so an optimistic prior costs one shallow round, not a deep one.
    const int explored = std::max(drafting[index]->acceptance.explored_depth(), pooled_acceptance_.explored_depth());
    offers[index + 1].chances = drafting[index]->acceptance.chain(std::min(caps[index], explored + 2));
    // Drafting first makes the drafter absorb the rows the stream kept while plain (a whole prompt at first);
    // that cost buys every later round's drafts, so it is spread over the rounds the stream may still run.
    const Stream& stream = *drafting[index];
    const int future_rounds = std::clamp(stream.remaining() / 2, 1, options_.absorb_amortize_rounds);
    offers[index + 1].activation_ms = tables_.absorb_ms_per_row * stream.unabsorbed_rows / future_rounds;
  }
  auto cost = [&](int rows, int streams_with_extra, int deepest) {
    return tables_.verify.ms(rows) + tables_.draft.ms(streams_with_extra, deepest) + overhead_ms_;
  };
  Allocation allocation = allocate_rows(offers, max_rows_, cost, options_.plain_margin);

  std::vector<DepthPlan> plans(drafting.size());
  for (size_t index = 0; index < drafting.size(); ++index) {
    Stream& stream = *drafting[index];
    ProbeBackoff& backoff = stream.backoff;
    if (backoff.wait == 0) backoff.wait = options_.probe_first_wait;
    DepthPlan& plan = plans[index];
    plan.depth = allocation.extra_rows[index + 1];
    const int cap = caps[index];
    if (cap <= 0) continue;
    if (plan.depth == 0) {
      // Priced to zero: after `wait` such decisions, probe one draft and double the wait.
      if (++backoff.zero_rounds >= backoff.wait) {
        plan = {1, 1};
        backoff.zero_rounds = 0;
        backoff.wait = std::min(backoff.wait * 2, options_.probe_most_wait);
      }
      continue;
    }
    backoff.zero_rounds = 0;
    backoff.wait = options_.probe_first_wait;
    ++backoff.drafted_rounds;
    if (!has_confidence_ && options_.deeper_probe_every > 0 &&
        backoff.drafted_rounds % options_.deeper_probe_every == 0 && plan.depth < cap) {
      // Keep deeper acceptance measured: ask one more and make the trim keep them all (a confidence head
      // measures depth itself: there the slack below lets the trim decide).
      plan.depth += 1;
      plan.forced = plan.depth;
    } else if (has_confidence_) {
      plan.depth = std::min(cap, plan.depth + options_.confidence_slack);
    }
  }
  return plans;
}

void Pricing::observe_absorb(int rows, double ms) {
  if (rows <= 0) return;
  tables_.absorb_ms_per_row += options_.cost_rate * (ms / rows - tables_.absorb_ms_per_row);
}

void Pricing::observe_acceptance(Stream& stream, int proposed, int accepted) {
  stream.acceptance.observe(proposed, accepted, options_.acceptance_rate);
  pooled_acceptance_.observe(proposed, accepted, options_.acceptance_rate);
  if (has_confidence_ && static_cast<int>(stream.held_chances.size()) >= proposed) {
    calibration_.observe(std::span<const float>(stream.held_chances).first(proposed), accepted,
                         options_.acceptance_rate);
  }
}

}  // namespace ls
