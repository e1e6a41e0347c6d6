// Trim and depth decisions through the row allocator, with probes so a bad estimate cannot stick.
#include "lanes/pricing.h"

#include <algorithm>
#include <string>

#include "base/log.h"
#include "lanes/allocator.h"

namespace ls {

Pricing::Pricing(CostTables tables, PricingOptions options, int max_rows, bool has_confidence)
    : tables_(std::move(tables)),
      options_(std::move(options)),
      max_rows_(max_rows),
      has_confidence_(has_confidence),
      calibration_(static_cast<int>(std::max<size_t>(options_.depth_prior.size(), 16))) {
  pooled_acceptance_.reset(options_.depth_prior);
  calibration_.set_mean_start(options_.calibration_mean_start);
  group_wait_ = std::max(options_.probe_first_wait, 1);
  // Until sampled passes are timed or measured they are priced as greedy ones.
  sampled_.table = tables_.sampled_draft.empty() ? tables_.draft : tables_.sampled_draft;
  sampled_verify_ = tables_.sampled_verify.empty() ? tables_.verify : tables_.sampled_verify;
}

PassMode Pricing::mode_of(const Stream& stream) const {
  return stream.request.sampling.greedy() ? PassMode::Greedy : PassMode::Sampled;
}

PassMode Pricing::mode_of(std::span<Stream* const> streams) const {
  for (const Stream* stream : streams) {
    if (mode_of(*stream) == PassMode::Sampled) return PassMode::Sampled;
  }
  return PassMode::Greedy;
}

std::vector<float> Pricing::held_chances(const Stream& stream) const {
  const int held = static_cast<int>(stream.held_drafts.size());
  if (has_confidence_ && static_cast<int>(stream.held_chances.size()) == held) {
    return calibration_.calibrate(stream.held_chances);
  }
  return stream.acceptance.chain(held);
}

void Pricing::trim(std::span<Stream* const> streams) const {
  // A round in which no stream holds drafts has nothing to trim (a round of plain or dormant streams costs no more
  // host work than plain's).
  if (std::all_of(streams.begin(), streams.end(), [](const Stream* stream) { return stream->held_drafts.empty(); })) {
    return;
  }
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
  // A round costs its verify plus the drafter pass that follows it whatever the trim keeps (the streams holding
  // drafts draft again), so rows are bought against the whole round: priced against the verify alone, the last
  // drafts of a deep window looked dear next to a nearly flat verify and the 1.2B's windows at one stream were cut
  // to about 7 drafts of 9 on the H200 (AtOneStreamTheWindowIsAsDeepAsTheChancesAndCostsSay...).
  int holding = 0;
  int deepest_held = 0;
  PassMode mode = PassMode::Greedy;
  for (Stream* stream : streams) {
    if (stream->held_drafts.empty()) continue;
    ++holding;
    if (mode_of(*stream) == PassMode::Sampled) mode = PassMode::Sampled;
    deepest_held = std::max(deepest_held, static_cast<int>(stream->held_drafts.size()));
  }
  // With confidences the next pass asks the whole block.
  const bool whole_block = has_confidence_;
  const int pass_depth = whole_block ? std::max(deepest_held, tables_.draft.max_depth()) : deepest_held;
  const double pass_ms = holding > 0 ? draft_ms(holding, pass_depth, mode) : 0.0;
  // With always_draft every row costs the same, so rows are bought while they fit. A sampled window makes the
  // whole verify sampled.
  const PassMode verify_mode = mode_of(streams);
  auto cost = [&](int rows, int, int) {
    return options_.always_draft ? 1.0 : verify_ms(rows, verify_mode) + overhead_ms_ + pass_ms;
  };
  Allocation allocation = allocate_rows(offers, max_rows_, cost, 1.0);
  for (size_t index = 0; index < streams.size(); ++index) {
    Stream& stream = *streams[index];
    const size_t keep = std::min(stream.held_drafts.size(),
                                 static_cast<size_t>(offers[index].fixed_rows - 1 + allocation.extra_rows[index]));
    if (log_level() == LogLevel::Debug) {
      std::string text;
      for (float chance : offers[index].chances) text += std::to_string(chance).substr(0, 5) + " ";
      log_debug("trim stream %llu: held %zu forced %d chances %skeep %zu verify(%d) %.3f verify(%d) %.3f",
                static_cast<unsigned long long>(stream.id), stream.held_drafts.size(), stream.held_forced,
                text.c_str(), keep, allocation.total_rows, tables_.verify.ms(allocation.total_rows),
                static_cast<int>(stream.held_drafts.size()) + 1,
                tables_.verify.ms(static_cast<int>(stream.held_drafts.size()) + 1));
    }
    if (keep == 0 && stream.held_forced == 0 && !stream.held_drafts.empty()) {
      stream.doubted_chances = held_chances(stream);
    } else if (keep > 0) {
      stream.doubted_chances.clear();
    }
    stream.held_drafts.resize(keep);
    if (stream.held_chances.size() > keep) stream.held_chances.resize(keep);
  }
}

double Pricing::activation_ms(const Stream& stream, int cap, std::span<const float> chances) const {
  // Every drafting round absorbs the rows kept since the last one (one call per stream, paid each round); rows
  // beyond a window are a catch-up of what the stream kept while plain (a whole prompt at first): that one-off
  // buys every later round's drafts, so it is spread over the rounds the stream may still run while drafting.
  const int steady_rows = std::min(stream.unabsorbed_rows, cap + 1);
  const int catch_up_rows = stream.unabsorbed_rows - steady_rows;
  double per_window = 1.0;
  for (float chance : chances) per_window += chance;
  if (batched_absorbs_) return tables_.absorb_ms_per_row * per_window;
  const int future_rounds =
      std::clamp(static_cast<int>(stream.remaining() / per_window), 1, options_.absorb_amortize_rounds);
  return tables_.absorb_call_ms + tables_.absorb_ms_per_row * (steady_rows + catch_up_rows / double(future_rounds));
}

void Pricing::depth_chances(const Stream& stream, int cap, std::vector<float>& chances) const {
  // A stream that has not verified a draft yet takes what the drafter showed on any stream since (its own copy
  // is only as fresh as its admission). Without a confidence head, depth grows into unexplored depths a step at
  // a time, so an optimistic prior costs one shallow round, not a deep one; with one, the trim cuts drafts the
  // confidences doubt before they cost a verify row, so the whole chain is priced.
  const AcceptanceByDepth& pool = pooled_acceptance_;
  // Per depth: the stream's own outcomes where it has some, else the pool's (seeded from the confidences).
  auto conditional = [&](int index) {
    return stream.acceptance.observations(index) > 0 ? stream.acceptance.conditional(index) : pool.conditional(index);
  };
  // (Into the caller's storage: a decision's chains reuse the last decision's.)
  auto merged_chain = [&](int depth) {
    chances.resize(std::max(depth, 0));
    double product = 1.0;
    for (int index = 0; index < depth; ++index) {
      product *= conditional(index);
      chances[index] = static_cast<float>(product);
    }
  };
  if (has_confidence_) {
    merged_chain(cap);
    // The last pass's drafts were all cut by the trim: its confidences are what the next pass will likely say.
    const std::vector<float>& doubted = stream.doubted_chances;
    for (size_t index = 0; index < chances.size() && !doubted.empty(); ++index) {
      chances[index] = std::min(chances[index], doubted[std::min(index, doubted.size() - 1)]);
    }
    return;
  }
  const int explored = std::max(stream.acceptance.explored_depth(), pooled_acceptance_.explored_depth());
  const int depth = std::min(cap, explored + 2);
  merged_chain(depth);
}

const std::vector<DepthPlan>& Pricing::plan_depths(std::span<Stream* const> drafting, std::span<const int> caps,
                                            int round_streams) {
  if (options_.always_draft) {
    plans_.assign(drafting.size(), DepthPlan{});
    for (size_t index = 0; index < drafting.size(); ++index) plans_[index].depth = std::max(0, caps[index]);
    return plans_;
  }
  // Outliers are one-offs: while no pass is measured (drafting priced out), their excess fades (halves in ~35).
  pass_scale_ += 0.02 * (1.0 - pass_scale_);
  sampled_.scale += 0.02 * (1.0 - sampled_.scale);
  // One pass serves every stream bought drafts: with a sampled one among them it is priced as sampled.
  const PassMode mode = mode_of(drafting);
  // The offers are kept from decision to decision (their chains' storage too): a decision over dormant streams that
  // buys nothing allocates nothing (lanes18).
  std::vector<RowOffer>& offers = offers_;
  offers.resize(drafting.size() + 1);
  // The first offer stands for every stream's pending row in the next round.
  offers[0] = RowOffer{};
  offers[0].fixed_rows = std::clamp(round_streams, 1, max_rows_);
  offers[0].fixed_expected = offers[0].fixed_rows;
  // Until some draft was verified, nothing is known about the drafter: one stream pays its catch-up and probes
  // for all, instead of every stream paying to learn the same thing.
  const bool drafter_unproven = !drafter_proven();
  // explore_repay: before the drafter is proven, nothing is offered where exploring it cannot pay back in this run.
  int widest_cap = 0;
  int most_left = 0;
  bool any_awake = false;
  int widest_prompt = 0;  // untapped: every drafting stream is dormant
  for (size_t index = 0; index < drafting.size() && drafter_unproven; ++index) {
    widest_cap = std::max(widest_cap, caps[index]);
    most_left = std::max(most_left, drafting[index]->remaining());
    any_awake = any_awake || (caps[index] > 0 && !drafting[index]->dormant);
    widest_prompt = std::max(widest_prompt, static_cast<int>(drafting[index]->request.prompt.size()));
  }
  // A scout that never tapped its prompt is priced as admission priced it, with the prompt's absorb (admission's
  // closed gate is then remembered here too, without an allocator run; lanes12, the default since H200 batch s12A:
  // priced without it, the dormant scout probed over a restarted context and the pool bought the group, 0 of 28).
  const int gate_rows = !any_awake ? widest_prompt : 0;
  const bool explore = !drafter_unproven || exploration_repays(round_streams, widest_cap, most_left, gate_rows, mode);
  if (sampled_too_wide(round_streams, mode)) return closed_gate_plans(drafting, offers[0].fixed_rows, mode);
  std::vector<char>& offered = offered_;
  offered.assign(drafting.size(), 0);
  bool scout_chosen = false;

  // Dormant streams only, and the last such decision bought nothing: reprice them together only every n-th time.
  const bool all_dormant = !drafting.empty() && std::all_of(drafting.begin(), drafting.end(),
                                                             [](const Stream* stream) { return stream->dormant; });
  const bool quiet = all_dormant && !drafter_unproven && options_.quiet_reprice_every > 1 &&
                     quiet_decisions_ % options_.quiet_reprice_every != 0;
  // (A quiet decision offers every stream with a cap and prices none: the drafter is proven, so no scout is chosen.)
  for (size_t index = 0; index < drafting.size() && !quiet; ++index) {
    const Stream& stream = *drafting[index];
    RowOffer& offer = offers[index + 1];
    offer.fixed_rows = 0;
    offer.fixed_expected = 0;
    offer.chances.clear();
    offer.activation_ms = 0;
    if (caps[index] <= 0 || !explore || (drafter_unproven && scout_chosen)) continue;
    // The scout is the stream that tapped its prompt (the others wait dormant): a dormant one only if none did.
    if (drafter_unproven && stream.dormant && any_awake) continue;
    offered[index] = 1;
    scout_chosen = true;
    if (quiet || (options_.stop_on_measured_loss && stream.loss_stopped)) continue;  // nothing bought; it may probe
    // wake_needs_landed: no dormant stream is bought drafts (woken) on the pool while every window verified so far kept
    // nothing; it may still probe.
    if (options_.wake_needs_landed && stream.dormant && landed_windows_ == 0) continue;
    // scout_vote: nor, with several streams, before wake_landed_share of the votes landed.
    if (options_.scout_vote && stream.dormant && round_streams > 1 && !wake_evidence()) continue;
    depth_chances(stream, caps[index], offer.chances);
    offer.activation_ms = activation_ms(stream, caps[index], offer.chances);
  }
  Allocation allocation;
  if (!quiet) {
    allocation = allocate_rows(offers, max_rows_, round_cost(mode), options_.plain_margin);
    ++depth_allocations_;
    if (log_level() == LogLevel::Debug) trace_depths(drafting, offers, allocation, round_streams);
  }
  const bool bought = !quiet && std::any_of(allocation.extra_rows.begin() + 1, allocation.extra_rows.end(),
                                            [](int rows) { return rows > 0; });
  quiet_decisions_ = all_dormant && !bought ? quiet_decisions_ + 1 : 0;

  std::vector<DepthPlan>& plans = plans_;
  plans.assign(drafting.size(), DepthPlan{});
  // Streams priced to zero probe one draft after a doubling wait; at most one probes per decision (the one
  // waiting longest past its wait), so a probe never makes every stream pay its catch-up in the same round.
  int prober = -1;
  int most_overdue = -1;
  for (size_t index = 0; index < drafting.size(); ++index) {
    Stream& stream = *drafting[index];
    ProbeBackoff& backoff = stream.backoff;
    if (backoff.wait == 0) backoff.wait = options_.probe_first_wait;
    DepthPlan& plan = plans[index];
    plan.depth = quiet ? 0 : allocation.extra_rows[index + 1];
    const int cap = caps[index];
    if (cap <= 0 || !(quiet || offered[index])) continue;
    if (plan.depth == 0) {
      // The scout's first zero decision is due at once: nothing is known about the drafter yet, and one stream
      // probing early measures it for every stream.
      const bool scouting = drafter_unproven && !backoff.scouted;
      const int overdue = scouting ? options_.probe_most_wait : ++backoff.zero_rounds - backoff.wait;
      if (overdue >= 0 && overdue > most_overdue) {
        most_overdue = overdue;
        prober = static_cast<int>(index);
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
      // The trim cuts what the confidences doubt, so asking the whole depth costs only the scan's last steps, and
      // every pass of a round has the same depth (a CUDA drafter keeps one graph per request count and depth).
      // (Asking the deepest depth bought, lanes9's --depth-ask priced, lost where drafting does not pay: a cheaper
      // pass made pricing buy more of it, H200 s8A nano sampled 0.44 / 0.51x at 4 / 8 streams against 0.71 / 0.74x;
      // removed in lanes17.)
      plan.depth = cap;
    }
  }
  // Probes draw on a budget: a share of each plain round's cost, banked up to one probe's cost, so at many
  // streams (where every stream would probe on its own schedule) probing stays a small part of the time.
  const double plain_round_ms = round_cost(mode)(offers[0].fixed_rows, 0, 0);
  last_plain_round_ms_ = plain_round_ms;
  if (prober >= 0) {
    const Stream& stream = *drafting[prober];
    const int probe_depth = has_confidence_ ? caps[prober] : 1;
    const double probe_ms = draft_ms(1, probe_depth, mode_of(stream)) + tables_.absorb_ms(stream.unabsorbed_rows) +
                            verify_ms(offers[0].fixed_rows + 1, mode) - verify_ms(offers[0].fixed_rows, mode);
    last_probe_ms_ = probe_ms;
    probe_credit_ms_ = std::min(probe_credit_ms_ + options_.probe_budget * plain_round_ms, probe_ms);
    const bool scouting = drafter_unproven && !stream.backoff.scouted;
    // Not yet affordable: the stream stays due and probes once the budget allows.
    if (!scouting && probe_credit_ms_ < probe_ms) prober = -1;
    if (prober >= 0 && !scouting) probe_credit_ms_ -= probe_ms;
  } else {
    probe_credit_ms_ = std::min(probe_credit_ms_ + options_.probe_budget * plain_round_ms,
                                options_.probe_budget * plain_round_ms * options_.probe_most_wait);
  }
  if (prober >= 0) {
    Stream& stream = *drafting[prober];
    // A probe re-measures acceptance; when the costs alone rule drafting out (every draft landing would still
    // lose to plain) that buys nothing, so it waits for the longest wait, where it re-measures the drafter's
    // cost instead (a pass timed slow at load must not rule drafting out for good).
    const bool scouting = drafter_unproven && !stream.backoff.scouted;
    // The scout probes for every stream: its probe is worth it when the streams together could pay (a pass's
    // fixed cost shared by many can pay where one stream's alone cannot).
    const int alike = scouting ? static_cast<int>(drafting.size()) : 1;
    // Probes that pay their way: a stream's own only where its window could win what it costs (not even at the
    // longest wait). The scout's stays on the always-right test: before any draft there are no confidences, and at
    // the prior a confident drafter at 16 streams would never be found (LanesPricedCosts.WhereOnlyDeepWindowsPay...).
    const bool worth = scouting ||
                       probe_pays(stream, caps[prober], offers[0].fixed_rows);
    const bool longest_wait = stream.backoff.wait >= options_.probe_most_wait;
    if (worth && (longest_wait || could_pay(offers[0], stream, caps[prober], alike))) {
      // One draft forced through the trim; with a confidence head the rest of the chain rides along for the
      // trim to keep as the confidences justify (deeper acceptance gets measured too).
      plans[prober] = {has_confidence_ ? scout_depth(stream, caps[prober], scouting) : 1, 1, true};
      stream.loss_stopped = false;  // the probe's rounds start a new sum (stop_on_measured_loss)
    }
    stream.backoff.scouted = true;
    stream.backoff.zero_rounds = 0;
    if (!scouting) stream.backoff.wait = std::min(stream.backoff.wait * 2, options_.probe_most_wait);
    // The streams Lanes::tap_restarted_scout tapped beside the scout (scout_probes) probe in the same pass.
    std::vector<Stream*> voters{&stream};
    for (size_t index = 0; scouting && plans[prober].probe && index < drafting.size(); ++index) {
      Stream& beside = *drafting[index];
      if (!beside.scout_prober || caps[index] <= 0 || static_cast<int>(index) == prober) continue;
      plans[index] = {has_confidence_ ? scout_depth(beside, caps[index], scouting) : 1, 1, true};
      beside.backoff.scouted = true;
      beside.backoff.zero_rounds = 0;
      voters.push_back(&beside);
    }
    // scout_vote: the scout pass's windows vote once.
    for (Stream* voter : voters) {
      voter->vote_share = options_.scout_vote && scouting && plans[prober].probe ? 1.0 / voters.size() : 0.0;
    }
  }
  if (!drafter_unproven) plan_group_probe(drafting, caps, bought, plans);
  return plans;
}

int Pricing::scout_depth(const Stream& stream, int cap, bool scouting) const {
  // (The restarted scout and its probers: dormant streams probing before the drafter is proven.)
  if (!scouting || !stream.dormant || options_.scout_depth <= 0) return cap;
  return std::min(cap, options_.scout_depth);
}

const std::vector<DepthPlan>& Pricing::closed_gate_plans(std::span<Stream* const> drafting, int pending_rows, PassMode mode) {
  // What the full decision does when nothing is offered, without its offers and allocator run: no stream is bought
  // drafts or probes; waits start, dormant-only decisions are counted, and the probe budget banks a plain round.
  const bool all_dormant = std::all_of(drafting.begin(), drafting.end(), [](const Stream* s) { return s->dormant; });
  quiet_decisions_ = all_dormant ? quiet_decisions_ + 1 : 0;
  for (Stream* stream : drafting) {
    if (stream->backoff.wait == 0) stream->backoff.wait = options_.probe_first_wait;
  }
  const double plain_round_ms = verify_ms(pending_rows, mode) + overhead_ms_;
  last_plain_round_ms_ = plain_round_ms;
  probe_credit_ms_ = std::min(probe_credit_ms_ + options_.probe_budget * plain_round_ms,
                              options_.probe_budget * plain_round_ms * options_.probe_most_wait);
  plans_.assign(drafting.size(), DepthPlan{});
  return plans_;
}

RoundCost Pricing::round_cost(PassMode mode) const {
  return [this, mode](int rows, int streams_with_extra, int deepest) {
    if (streams_with_extra == 0) return verify_ms(rows, mode) + overhead_ms_;
    // With confidences a drafting stream asks its whole depth (see plan_depths), and the pass costs that.
    const bool whole_block = has_confidence_;
    const int depth = whole_block ? std::max(deepest, tables_.draft.max_depth()) : deepest;
    return verify_ms(rows, mode) + draft_ms(streams_with_extra, depth, mode) + overhead_ms_;
  };
}

void Pricing::trace_depths(std::span<Stream* const> drafting, std::span<const RowOffer> offers,
                           const Allocation& allocation, int round_streams) const {
  log_debug("depth: %zu drafting of %d, verify(%d) %.3f ms, draft(1,1) %.3f ms, overhead %.3f ms, absorb %.3f ms"
            " + %.4f ms/row, bought %d rows at %.4f tok/ms", drafting.size(), round_streams, offers[0].fixed_rows,
            tables_.verify.ms(offers[0].fixed_rows), tables_.draft.ms(1, 1), overhead_ms_, tables_.absorb_call_ms,
            tables_.absorb_ms_per_row, allocation.total_rows - offers[0].fixed_rows, allocation.tokens_per_ms);
  for (size_t index = 0; index < drafting.size(); ++index) {
    const RowOffer& offer = offers[index + 1];
    std::string chances;
    for (float chance : offer.chances) chances += std::to_string(chance).substr(0, 5) + " ";
    log_debug("  stream %llu: chances %sactivation %.3f ms (%d rows), extra %d",
              static_cast<unsigned long long>(drafting[index]->id), chances.c_str(), offer.activation_ms,
              drafting[index]->unabsorbed_rows, allocation.extra_rows[index + 1]);
  }
}

std::vector<double> Pricing::unexplored_conditionals() const {
  // The better of the prior and the calibrated confidences: a depth no verify has reached is explored on the more
  // hopeful estimate (its outcomes then correct it). A drafter whose head is underconfident (the DSpark nano pair's,
  // whose greedy windows land 3.9 of 7 at one stream) keeps the prior; one whose head says 0.83 a draft (the
  // synthetic profile of the 1.2B) is no longer priced at the prior's 0.5-0.6 past depth 4.
  std::vector<double> conditionals = pooled_confidence_.calibrated(calibration_);
  const std::vector<double>& prior = options_.depth_prior;
  for (size_t index = 0; index < conditionals.size() && !prior.empty(); ++index) {
    conditionals[index] = std::max(conditionals[index], prior[std::min(index, prior.size() - 1)]);
  }
  return conditionals;
}

void Pricing::observe_confidences(std::span<const float> raw_chances) {
  if (!has_confidence_) return;
  pooled_confidence_.observe(raw_chances, options_.acceptance_rate);
  pooled_acceptance_.seed_unobserved(unexplored_conditionals());
}

void Pricing::observe_acceptance(Stream& stream, int proposed, int accepted) {
  if (has_confidence_) {
    // A depth's first outcomes move the confidences' estimate; they do not replace it.
    pooled_acceptance_.seed_unobserved(unexplored_conditionals());
    stream.acceptance.seed_unobserved(pooled_acceptance_.conditionals());
  }
  stream.acceptance.observe(proposed, accepted, options_.acceptance_rate);
  // scout_vote: a window of the scout pass moves the pool by its share of one window.
  const double share = stream.vote_share > 0 ? stream.vote_share : 1.0;
  stream.vote_share = 0;
  pooled_acceptance_.observe(proposed, accepted, options_.acceptance_rate * share);
  if (accepted > 0) ++landed_windows_;
  votes_ += share;
  landed_votes_ += accepted > 0 ? share : 0.0;
  // A dormant-only decision right after the evidence allows a wake reprices at once (not at the every-8th).
  if (options_.scout_vote && accepted > 0 && wake_evidence()) quiet_decisions_ = 0;
  if (has_confidence_ && static_cast<int>(stream.held_chances.size()) >= proposed) {
    calibration_.observe(std::span<const float>(stream.held_chances).first(proposed), accepted,
                         options_.acceptance_rate);
  }
}

}  // namespace ls
