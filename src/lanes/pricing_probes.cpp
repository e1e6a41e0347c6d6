// Probes: when a stream or the group re-measures the drafter, and whether a probe (or a round of drafts) could pay.
#include <algorithm>
#include <vector>

#include "base/log.h"
#include "lanes/allocator.h"
#include "lanes/pricing.h"

namespace ls {

void Pricing::plan_group_probe(std::span<Stream* const> drafting, std::span<const int> caps, bool bought,
                               std::vector<DepthPlan>& plans) {
  if (options_.always_draft) return;
  if (bought || std::any_of(plans.begin(), plans.end(), [](const DepthPlan& plan) { return plan.depth > 0; })) {
    // Drafts bought or a probe run this decision: the pool is being measured.
    group_zero_decisions_ = 0;
    if (bought) group_wait_ = options_.probe_first_wait;
    return;
  }
  const bool due = group_probe_due();
  ++group_zero_decisions_;
  if (!due) return;
  // The stream Lanes::choose_tapping tapped for it (group_probe_would_run said yes there), so the probe drafts over
  // this round's rows, never blind past skipped ones.
  int prober = -1;
  for (size_t index = 0; index < drafting.size(); ++index) {
    if (drafting[index]->group_prober && caps[index] > 0) prober = static_cast<int>(index);
  }
  if (prober < 0) {
    // No stream was tapped for it, so it would not run (or no stream could probe); its answer moves only with
    // verified drafts or passes, so it is asked again after a doubling wait, not every round (lanes12, the default
    // since H200 batch s11A: host work over plain's at 16 streams 1.0-1.8 against 3.1-3.6 ms a run asked every
    // round, the same passes and drafts).
    group_zero_decisions_ = 0;
    group_wait_ = std::min(group_wait_ * 2, options_.probe_most_wait);
    return;
  }
  Stream& stream = *drafting[prober];
  plans[prober] = {has_confidence_ ? caps[prober] : 1, 1, true};
  stream.backoff.zero_rounds = 0;
  group_zero_decisions_ = 0;
  group_wait_ = std::min(group_wait_ * 2, options_.probe_most_wait);
}

bool Pricing::could_pay(const RowOffer& pending_rows, const Stream& stream, int cap, int alike,
                        bool always_right) const {
  std::vector<RowOffer> offers(1 + std::max(alike, 1));
  offers[0] = pending_rows;
  // Every alike stream offers the same chain and activation (computed once: hopeful_chain calibrates every depth).
  RowOffer offer;
  offer.fixed_rows = 0;
  offer.fixed_expected = 0;
  offer.chances = always_right ? std::vector<float>(std::max(cap, 1), 1.0f) : hopeful_chain(std::max(cap, 1));
  // Its catch-up spread over the few rounds such a stream would still run.
  offer.activation_ms = activation_ms(stream, cap, offer.chances);
  for (size_t index = 1; index < offers.size(); ++index) offers[index] = offer;
  const Allocation best = allocate_rows(offers, max_rows_, round_cost(mode_of(stream)), options_.plain_margin);
  for (size_t index = 1; index < offers.size(); ++index) {
    if (best.extra_rows[index] > 0) return true;
  }
  return false;
}

bool Pricing::probe_affordable() const {
  if (!drafter_proven()) return true;  // the scout probes whatever the budget
  return probe_credit_ms_ + options_.probe_budget * last_plain_round_ms_ >= last_probe_ms_;
}

bool Pricing::probe_would_run(const Stream& stream, int cap, int round_streams) const {
  if (cap <= 0) return false;
  if (options_.always_draft || !drafter_proven()) return true;
  const int wait = stream.backoff.wait == 0 ? options_.probe_first_wait : stream.backoff.wait;
  if (!probe_pays(stream, cap, std::clamp(round_streams, 1, max_rows_))) return false;
  if (wait >= options_.probe_most_wait) return true;
  RowOffer pending_rows;
  pending_rows.fixed_rows = std::clamp(round_streams, 1, max_rows_);
  pending_rows.fixed_expected = pending_rows.fixed_rows;
  return could_pay(pending_rows, stream, cap);
}

bool Pricing::group_probe_would_run(const Stream& stream, int cap, int round_streams) const {
  if (cap <= 0 || !group_probe_due()) return false;
  ++group_checks_;
  RowOffer pending_rows;
  pending_rows.fixed_rows = std::clamp(round_streams, 1, max_rows_);
  pending_rows.fixed_expected = pending_rows.fixed_rows;
  // Where the stream alone could pay its own probes measure it; the group's is for where only streams together can
  // (probes that pay their way: at the chances pricing has, not only if every draft landed).
  return !could_pay(pending_rows, stream, cap) &&
         could_pay(pending_rows, stream, cap, pending_rows.fixed_rows, /*always_right=*/false);
}

double Pricing::probe_cost_ms(int cap, int round_streams, PassMode mode) const {
  const int rows = std::clamp(round_streams, 1, max_rows_);
  const int depth = has_confidence_ ? cap : 1;
  return draft_ms(1, depth, mode) + verify_ms(std::min(rows + depth, max_rows_), mode) - verify_ms(rows, mode);
}

bool Pricing::probe_pays(const Stream& stream, int cap, int round_streams) const {
  if (cap <= 0) return false;
  const int rows = std::clamp(round_streams, 1, max_rows_);
  const int depth = has_confidence_ ? cap : 1;
  // Every draft landing wins `cap` tokens (a probe without confidences verifies one draft, but measures the first
  // step of a chain that may grow to the cap), each worth what plain pays a token at this many streams.
  const PassMode mode = mode_of(stream);
  const double plain_token_ms = (verify_ms(rows, mode) + overhead_ms_) / rows;
  // Its absorb: its rows in the batched device call, or a host call with the stream's rows.
  const int absorb_rows = stream.unabsorbed_rows + 1;
  const double absorb_ms = batched_absorbs_ ? tables_.absorb_ms_per_row * absorb_rows : tables_.absorb_ms(absorb_rows);
  const double cost_ms = draft_ms(1, depth, mode) + verify_ms(std::min(rows + depth, max_rows_), mode) -
                         verify_ms(rows, mode) + absorb_ms + one_off_ms_;
  return cap * plain_token_ms >= cost_ms;  // (a clock that never moves: every probe pays)
}

void Pricing::observe_drafting_round(Stream& stream, int tokens, double measured_ms) {
  if (!options_.stop_on_measured_loss || options_.always_draft || mode_of(stream) != PassMode::Sampled) return;
  const double plain_token_ms = verify_ms(1, PassMode::Sampled) + overhead_ms_;
  stream.drafting_gain_ms += tokens * plain_token_ms - measured_ms;
  if (++stream.drafting_rounds < options_.loss_stop_rounds || stream.drafting_gain_ms >= 0) return;
  log_debug("loss stop: stream %llu lost %.3f ms over %d drafting rounds (plain %.3f ms a token)",
            static_cast<unsigned long long>(stream.id), -stream.drafting_gain_ms, stream.drafting_rounds,
            plain_token_ms);
  stream.loss_stopped = true;
  stream.drafting_gain_ms = 0;
  stream.drafting_rounds = 0;
  // Measured, not estimated: probing again soon would measure the same loss (and, restarted, a worse one).
  stream.backoff.wait = options_.probe_most_wait;
  stream.backoff.zero_rounds = 0;
}

void Pricing::observe_slow_forward(double excess_ms) {
  if (excess_ms <= 0) return;
  one_off_ms_ = slow_forwards_seen_++ == 0 ? excess_ms : one_off_ms_ + options_.cost_rate * (excess_ms - one_off_ms_);
}

bool Pricing::group_probe_due() const {
  return !options_.always_draft && drafter_proven() &&
         group_zero_decisions_ + 1 >= group_wait_;
}

Allocation Pricing::pooled_round(int round_streams, int cap, bool always_right, PassMode mode) const {
  // Every stream of the round offering the same: a pass's fixed cost shared by all can pay where one's cannot.
  const int streams = std::clamp(round_streams, 1, max_rows_);
  std::vector<RowOffer> offers(1 + streams);
  offers[0].fixed_rows = streams;
  offers[0].fixed_expected = streams;
  std::vector<float> chances(cap, 1.0f);
  if (!always_right) {
    // sampled_prior: an unproven drafter's sampled rounds at the sampled prior (nothing measured to pool yet).
    AcceptanceByDepth sampled;
    const bool sampled_prior = mode == PassMode::Sampled && !drafter_proven() && !options_.sampled_prior.empty();
    if (sampled_prior) sampled.reset(options_.sampled_prior);
    chances = sampled_prior ? sampled.chain(cap) : pooled_acceptance_.chain(cap);
  }
  for (size_t index = 1; index < offers.size(); ++index) {
    offers[index].fixed_rows = 0;
    offers[index].fixed_expected = 0;
    offers[index].chances = chances;
  }
  return allocate_rows(offers, max_rows_, round_cost(mode), options_.plain_margin);
}

bool Pricing::could_draft(int round_streams, int cap, bool always_right, PassMode mode) const {
  if (cap <= 0) return false;
  if (options_.always_draft) return true;
  const int streams = std::clamp(round_streams, 1, max_rows_);
  const Allocation best = pooled_round(streams, cap, always_right, mode);
  if (best.total_rows <= streams) return false;
  if (always_right || drafter_proven() || options_.whole_context_share <= 0) return true;
  // whole_context_share: the prior's round must save that share of plain's time a token.
  const double plain_ms = round_cost(mode)(streams, 0, 0);
  return plain_ms > 0 && best.tokens_per_ms > 0 &&
         1.0 - (streams / plain_ms) / best.tokens_per_ms >= options_.whole_context_share;
}

bool Pricing::exploration_repays(int round_streams, int cap, int tokens_left, int absorb_rows, PassMode mode) const {
  if (options_.always_draft) return true;
  if (sampled_too_wide(round_streams, mode)) return false;  // no sampled exploration, no prompt tapped for it
  if (options_.explore_repay <= 0 || drafter_proven()) return true;
  if (cap <= 0 || tokens_left <= 0) return false;
  const int streams = std::clamp(round_streams, 1, max_rows_);
  const ClosedGate& closed = closed_gate_;
  if (closed.streams == streams && cap <= closed.cap && closed.absorb_rows == absorb_rows && closed.mode == mode &&
      tokens_left <= closed.tokens_left) {
    return false;
  }
  const double plain_ms = round_cost(mode)(streams, 0, 0);
  if (plain_ms <= 0) return true;  // (a clock that never moves: exploring costs nothing)
  const double one_off_ms = scout_one_off_ms(streams, cap, absorb_rows, mode);
  // scout_gate_if_right: with several streams and the scout alone (whole contexts not bought), the prior promises
  // what whole contexts land, which the group the scout wakes over restarted contexts does not keep: only an
  // always-right drafter's gain opens the gate.
  const bool restarted_group = options_.scout_gate_if_right && streams > 1 &&
                               !(options_.whole_contexts_priced &&
                                 whole_contexts_repay(streams, cap, tokens_left, absorb_rows, mode));
  const double prior_gain_ms = restarted_group ? 0.0 : best_round_gain_ms(streams, cap, tokens_left, false, mode);
  bool repays = prior_gain_ms >= options_.explore_repay * one_off_ms;
  double right_gain_ms = -1;  // (not priced when the prior's gain repays)
  if (!repays && options_.explore_repay_if_right > 0) {
    right_gain_ms = best_round_gain_ms(streams, cap, tokens_left, true, mode);
    repays = right_gain_ms >= options_.explore_repay_if_right * one_off_ms;
  }
  log_debug("explore gate: %d streams, cap %d, %d tokens left, %d prompt rows: one-off %.3f ms, prior's gain %.3f ms,"
            " an always-right one's %.3f ms: %s", streams, cap, tokens_left, absorb_rows, one_off_ms, prior_gain_ms,
            right_gain_ms, repays ? "open" : "closed");
  if (!repays) closed_gate_ = {streams, cap, absorb_rows, mode, tokens_left};
  return repays;
}

double Pricing::scout_one_off_ms(int streams, int cap, int absorb_rows, PassMode mode) const {
  if (graphless_target_) {
    // cpu20: a target on a CPU pool captures no graphs, so a new forward shape costs what its table says, and the
    // probe's drafts past its forced one reach the verify only where the trim buys them at their chances (rows
    // that pay their way, as in any round): what exploring costs there is the pass, the forced draft's verify row
    // and the prompt's absorb. (The probe's whole chain and two forwards for a new shape, as on a target with graphs,
    // kept the Xeon's 1-stream gate shut at 64 tokens: 4.1-4.2 ms against a prior's gain of 6.4-8.0, b6.)
    const int rows = std::clamp(streams, 1, max_rows_);
    const int depth = has_confidence_ ? cap : 1;
    const double forced_row_ms = verify_ms(std::min(rows + 1, max_rows_), mode) - verify_ms(rows, mode);
    return draft_ms(1, depth, mode) + forced_row_ms + tables_.absorb_ms(absorb_rows);
  }
  // Its probe (pass and verify rows), its prompt's absorb, and a new forward shape (eager, then captured: about a
  // forward each on a CUDA target).
  const double shape_ms = 2 * round_cost(mode)(streams, 0, 0);
  return probe_cost_ms(cap, streams, mode) + tables_.absorb_ms(absorb_rows) + shape_ms;
}

double Pricing::best_round_gain_ms(int streams, int cap, int tokens_left, bool always_right, PassMode mode) const {
  // A token costs plain_ms / streams plainly, 1 / tokens_per_ms drafted.
  const double plain_ms = round_cost(mode)(streams, 0, 0);
  const Allocation best = pooled_round(streams, cap, always_right, mode);
  ++gate_allocations_;
  if (plain_ms <= 0 || best.total_rows <= streams || best.tokens_per_ms <= 0) return 0.0;
  const double saved_share = 1.0 - (static_cast<double>(streams) / plain_ms) / best.tokens_per_ms;
  return saved_share * plain_ms * tokens_left;
}

bool Pricing::whole_contexts_repay(int round_streams, int cap, int tokens_left, int prompt_rows, PassMode mode) const {
  if (drafter_proven() || cap <= 0 || tokens_left <= 0 || sampled_too_wide(round_streams, mode)) return false;
  const int streams = std::clamp(round_streams, 1, max_rows_);
  // Every other stream's prompt absorbed too (one batched call with the scout's on the device, else a call each),
  // and, on a target with graphs, the group's first verify and pass once the scout proves the drafter: new shapes,
  // each run eagerly and captured. Bought on the prior's gain alone (an always-right drafter is a long shot, not
  // worth every prompt).
  const double others_ms = (streams - 1) * (tables_.absorb_ms_per_row * prompt_rows +
                                            (batched_absorbs_ ? 0.0 : tables_.absorb_call_ms));
  const int group_rows = std::min(streams * (1 + cap), max_rows_);
  const double group_ms = graphless_target_ || streams <= 1
                              ? 0.0
                              : 2 * (verify_ms(group_rows, mode) + draft_ms(streams, cap, mode));
  const double one_off_ms = scout_one_off_ms(streams, cap, prompt_rows, mode) + others_ms + group_ms;
  const double gain_ms = best_round_gain_ms(streams, cap, tokens_left, false, mode);
  const bool repays = gain_ms >= std::max(options_.explore_repay, 1.0) * one_off_ms;
  log_debug("whole contexts: %d streams, cap %d, %d tokens left, %d prompt rows each: one-off %.3f ms (the others' "
            "prompts %.3f, the group's shapes %.3f), prior's gain %.3f ms: %s", streams, cap, tokens_left, prompt_rows,
            one_off_ms, others_ms, group_ms, gain_ms, repays ? "every prompt" : "the scout's");
  return repays;
}

std::vector<float> Pricing::hopeful_chain(int depth) const {
  // A group probe re-measures a pool that bad luck may have pulled down (an unlucky scout probe at 16 streams), so it
  // is judged on the better of the pool and a hopeful estimate: the drafter's calibrated confidences where it reports
  // them (the nano pair's head, calibrated by its windows, says what its drafts land), else the prior.
  const std::vector<double> confidences = has_confidence_ ? pooled_confidence_.calibrated(calibration_)
                                                          : std::vector<double>{};
  const std::vector<double>& hopeful = confidences.empty() ? options_.depth_prior : confidences;
  std::vector<float> chances(std::max(depth, 0));
  double product = 1.0;
  for (int index = 0; index < depth; ++index) {
    double conditional = pooled_acceptance_.conditional(index);
    if (!hopeful.empty()) conditional = std::max(conditional, hopeful[std::min<size_t>(index, hopeful.size() - 1)]);
    product *= conditional;
    chances[index] = static_cast<float>(product);
  }
  return chances;
}

}  // namespace ls
