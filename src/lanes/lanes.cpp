// The round loop and the public API of the lanes; admission and drafting live in lanes_steps.cpp.
#include "lanes/lanes.h"

#include <algorithm>
#include <string>

#include "base/check.h"
#include "base/log.h"
#include "lanes/accept.h"
#include "model/exact_width.h"

namespace ls {

Result<std::unique_ptr<Lanes>> Lanes::create(Target& target, Drafter* drafter, const LanesOptions& options,
                                             Clock& clock) {
  const TargetFacts& facts = target.facts();
  // Verify rounds are short (a few rows per stream); prompts may use the target's whole row budget.
  constexpr int kDefaultVerifyRows = 128;
  int max_rows = options.max_rows > 0 ? options.max_rows : kDefaultVerifyRows;
  if (facts.max_rows > 0) max_rows = std::min(max_rows, facts.max_rows);
  if (max_rows < 1) {
    return Status(ErrorCode::InvalidArgument, "lanes need at least 1 row per forward, got " + std::to_string(max_rows));
  }
  int measured_width = facts.exact_width;
  if (options.measure_width > 0) {
    LS_ASSIGN_OR_RETURN(measured_width, measure_exact_width(target, options.measure_width));
  }
  const int width = std::clamp(options.exact_width > 0 ? options.exact_width : measured_width, 1, max_rows);
  int most_drafts = 0;
  bool has_confidence = false;
  if (drafter != nullptr) {
    if (width < 2) {
      return Status(ErrorCode::DrafterNeedsWideVerify,
                    "the target reproduces one-row steps bit for bit only in windows of " + std::to_string(width) +
                        " row; verifying drafts needs at least 2");
    }
    const DraftFacts& draft_facts = drafter->facts();
    for (int layer : draft_facts.tap_layers) {
      if (layer < 0 || layer >= facts.num_layers) {
        return Status(ErrorCode::DraftTargetMismatch, "drafter taps layer " + std::to_string(layer) +
                                                          ", the target has " + std::to_string(facts.num_layers));
      }
    }
    if (draft_facts.max_depth < 1) {
      return Status(ErrorCode::InvalidArgument,
                    "drafter max depth " + std::to_string(draft_facts.max_depth) + ", need at least 1");
    }
    LS_RETURN_IF_ERROR(target.set_taps(draft_facts.tap_layers));
    target.keep_taps_on_device(false);  // host taps for the timing below (an earlier lanes may have left it on)
    most_drafts = std::min({options.max_draft, draft_facts.max_depth, width - 1});
    has_confidence = draft_facts.has_confidence;
  }
  auto lanes = std::make_unique<Lanes>(Key{}, target, most_drafts > 0 ? drafter : nullptr, options, clock, width,
                                       max_rows);
  lanes->most_drafts_ = std::max(most_drafts, 0);
  lanes->restarts_ = lanes->drafter_ != nullptr && drafter->facts().restarts;
  CostTables tables;
  if (lanes->most_drafts_ > 0) {
    CalibrationOptions calibration = options.calibration;
    calibration.max_rows = max_rows;
    calibration.width = width;
    calibration.max_streams = std::max(1, std::min(options.max_streams, max_rows));
    calibration.max_depth = lanes->most_drafts_;
    calibration.sampled_passes = options.calibration.sampled_passes;
    LS_ASSIGN_OR_RETURN(tables, time_costs(target, drafter, clock, calibration));
  }
  lanes->pricing_ = Pricing(std::move(tables), options.pricing, max_rows, has_confidence);
  lanes->pricing_.set_graphless_target(target.cpu_pool() != nullptr);
  // Taps stay on the device when both sides can (after the timing above, which absorbs host taps).
  if (options.device_taps && lanes->drafter_ != nullptr && drafter->facts().tap_device >= 0 && lanes->restarts_) {
    lanes->device_taps_ = target.keep_taps_on_device(true);
    lanes->pricing_.set_batched_absorbs(lanes->device_taps_);
  }
  return lanes;
}

Lanes::Lanes(Key, Target& target, Drafter* drafter, const LanesOptions& options, Clock& clock, int width,
             int max_rows)
    : target_(target), drafter_(drafter), options_(options), clock_(clock), width_(width), max_rows_(max_rows) {}

StreamId Lanes::submit(Request request) {
  auto stream = std::make_unique<Stream>();
  stream->id = next_id_++;
  if (!request.has_seed) request.sampling.seed = seed_from_prompt(request.prompt);
  if (request.eos_ids) {
    stream->eos_ids = *request.eos_ids;
  } else if (target_.facts().eos_token_id >= 0) {
    stream->eos_ids = {target_.facts().eos_token_id};
  }
  stream->drafting = request.draft && most_drafts_ > 0 && request.max_draft != 0;
  stream->acceptance.reset(options_.pricing.depth_prior);
  // Spread the periodic deeper probes so streams do not all widen in the same round.
  if (options_.pricing.deeper_probe_every > 0) {
    stream->backoff.drafted_rounds = static_cast<int>(stream->id % options_.pricing.deeper_probe_every);
  }
  stream->request = std::move(request);
  const StreamId id = stream->id;
  waiting_.push_back(std::move(stream));
  return id;
}

void Lanes::cancel(StreamId id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == id) {
      (*it)->finish = FinishReason::Cancelled;
      events_.push_back({id, {}, FinishReason::Cancelled, "", (*it)->stats});
      waiting_.erase(it);
      return;
    }
  }
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Stream& stream = *it->second;
  if (!stream.finished()) stream.finish = FinishReason::Cancelled;
  StreamEvent event{id, {stream.generated.begin() + stream.delivered, stream.generated.end()}, stream.finish,
                    stream.error, stream.stats};
  events_.push_back(std::move(event));
  release(stream);
  live_.erase(it);
}

std::vector<StreamEvent> Lanes::take_events() {
  std::vector<StreamEvent> events;
  events.swap(events_);
  return events;
}

Status Lanes::round() {
  const double round_start_ms = clock_.now_ms();
  const int64_t prefills_before = stats_.prefill_forwards;
  Status status = admit();
  const bool admitted = stats_.prefill_forwards != prefills_before;
  const double admitted_ms = clock_.now_ms();
  ledger_ = RoundLedger{};
  std::vector<Stream*> streams = pick_streams();
  const size_t generated_before = streams.size() == 1 ? streams[0]->generated.size() : 0;
  double verify_ms = 0;
  // Device absorbs right after the commit: the drafter's time, not the host's (overhead_without_absorbs).
  const double absorbs_before_ms = stats_.absorb_ms;
  if (!streams.empty()) {
    pricing_.trim(streams);
    std::vector<std::vector<int32_t>> windows;
    const double verify_start_ms = clock_.now_ms();
    Result<Verified> verified = verify(streams, windows);
    verify_ms = clock_.now_ms() - verify_start_ms;
    if (verified.ok()) {
      accept_and_commit(streams, windows, *verified);
    } else {
      for (Stream* stream : streams) fail_stream(*stream, verified.status());
      if (status.ok()) status = verified.status();
    }
  }
  const double commit_absorb_ms = stats_.absorb_ms - absorbs_before_ms;
  const double draft_ms = draft();
  const double measured_ms = clock_.now_ms() - admitted_ms;
  if (!streams.empty()) {
    // The host's own work: the round less its verify, its drafter pass and absorbs, and (overhead_without_absorbs) the
    // device absorb after the commit. Counted as host work, a group's first absorbs (0.13-0.42 ms on the H200 at 16
    // streams) raised the overhead 0.013 -> 0.155 ms, plain rounds looked that much dearer, and the allocator bought
    // the restarted group a second pass (lanes19, batch b1's trace).
    const bool without_absorbs = options_.pricing.overhead_without_absorbs;
    pricing_.observe_overhead(measured_ms - verify_ms - draft_ms - (without_absorbs ? commit_absorb_ms : 0.0));
    // A round after prefills waits for their absorbs at its first settle: not a round of its own.
    if (!admitted && ledger_.drafting && streams.size() == 1) {
      const int tokens = static_cast<int>(streams[0]->generated.size() - generated_before);
      pricing_.observe_drafting_round(*streams[0], tokens, measured_ms - ledger_.slow_excess_ms);
    }
  }
  log_debug("round %lld: %zu streams, verify %.3f ms, draft %.3f ms, round %.3f ms (after admit)",
            static_cast<long long>(round_index_), streams.size(), verify_ms, draft_ms, clock_.now_ms() - admitted_ms);
  deliver();
  ++round_index_;
  ++stats_.rounds;
  stats_.round_ms += clock_.now_ms() - round_start_ms;
  return status;
}

std::vector<Stream*> Lanes::pick_streams() {
  std::vector<Stream*> candidates;
  for (auto& [id, stream] : live_) {
    if (stream->prefilled && !stream->finished()) candidates.push_back(stream.get());
  }
  std::sort(candidates.begin(), candidates.end(), [](const Stream* a, const Stream* b) {
    if (a->last_served_round != b->last_served_round) return a->last_served_round < b->last_served_round;
    return a->admission < b->admission;
  });
  // Fairness first: every picked stream gets its pending row; forced (probe) rows only from what is left.
  std::vector<Stream*> picked;
  for (Stream* stream : candidates) {
    if (static_cast<int>(picked.size()) >= std::min(options_.max_streams, max_rows_)) break;
    picked.push_back(stream);
  }
  int spare_rows = max_rows_ - static_cast<int>(picked.size());
  for (Stream* stream : picked) {
    int forced = std::min<int>(stream->held_forced, static_cast<int>(stream->held_drafts.size()));
    forced = std::min(forced, spare_rows);
    stream->held_forced = forced;
    spare_rows -= forced;
  }
  std::sort(picked.begin(), picked.end(), [](const Stream* a, const Stream* b) { return a->admission < b->admission; });
  for (Stream* stream : picked) stream->last_served_round = round_index_;
  return picked;
}

Result<Verified> Lanes::verify(std::span<Stream* const> streams, std::vector<std::vector<int32_t>>& windows) {
  windows.resize(streams.size());
  std::vector<Window> batch(streams.size());
  int total_rows = 0;
  choose_tapping(streams);
  settle_drafter();
  for (size_t index = 0; index < streams.size(); ++index) {
    const Stream& stream = *streams[index];
    windows[index].assign(1, stream.pending);
    windows[index].insert(windows[index].end(), stream.held_drafts.begin(), stream.held_drafts.end());
    batch[index].stream = stream.id;
    batch[index].tokens = windows[index];
    batch[index].sampling = stream.request.sampling;
    batch[index].start_position = stream.committed;
    batch[index].want_taps = stream.wants_taps;
    if (stream.wants_taps) stats_.tap_rows += static_cast<int64_t>(windows[index].size());
    total_rows += static_cast<int>(windows[index].size());
  }
  const PassMode mode = pricing_.mode_of(streams);
  const double table_ms = pricing_.verify_ms(total_rows, mode);
  const bool with_drafts = total_rows > static_cast<int>(streams.size());
  ledger_.drafting = ledger_.drafting || with_drafts;
  const bool tapping = std::any_of(streams.begin(), streams.end(), [](const Stream* stream) { return stream->wants_taps; });
  const double start_ms = clock_.now_ms();
  Result<Verified> verified = target_.forward(batch);
  const double elapsed_ms = clock_.now_ms() - start_ms;
  ++stats_.verify_forwards;
  stats_.forward_ms += elapsed_ms;
  if (with_drafts) {
    ++stats_.draft_forwards;
    stats_.draft_forward_ms += elapsed_ms;
  } else if (tapping) {
    ++stats_.tap_only_forwards;
    stats_.tap_only_forward_ms += elapsed_ms;
  } else {
    ++stats_.quiet_forwards;
    stats_.quiet_forward_ms += elapsed_ms;
  }
  if (table_ms > 0 && elapsed_ms > 1.5 * table_ms) {
    ++stats_.slow_forwards;
    stats_.slow_forward_excess_ms += elapsed_ms - table_ms;
    ledger_.slow_excess_ms += elapsed_ms - table_ms;
    pricing_.observe_slow_forward(elapsed_ms - table_ms);
  }
  if (verified.ok()) pricing_.observe_verify(total_rows, elapsed_ms, mode);
  return verified;
}

void Lanes::accept_and_commit(std::span<Stream* const> streams, const std::vector<std::vector<int32_t>>& windows,
                              const Verified& verified) {
  std::vector<Stream*> tapped;
  std::vector<TapRows> tap_rows;
  for (size_t index = 0; index < streams.size(); ++index) {
    Stream& stream = *streams[index];
    const std::vector<int32_t>& window = windows[index];
    const int64_t row_begin = verified.row_begin[index];
    Accepted accepted = accept_window(window, std::span<const int32_t>(verified.draws).subspan(row_begin, window.size()));
    Status committed = target_.commit(stream.id, accepted.rows_kept());
    if (!committed.ok()) {
      fail_stream(stream, committed);
      continue;
    }
    const int proposed = static_cast<int>(window.size()) - 1;
    stats_.rows_verified += static_cast<int64_t>(window.size());
    stats_.drafts_verified += proposed;
    stats_.drafts_accepted += accepted.drafts_kept;
    ++stats_.windows_verified;
    if (proposed > 0) ++stats_.windows_with_drafts;
    stream.stats.rounds += 1;
    stream.stats.rows_verified += static_cast<int64_t>(window.size());
    stream.stats.drafts_verified += proposed;
    stream.stats.drafts_accepted += accepted.drafts_kept;
    if (proposed > 0) {
      pricing_.observe_acceptance(stream, proposed, accepted.drafts_kept);
      if (log_level() == LogLevel::Debug) {
        log_debug("accept stream %llu: kept %d of %d at position %lld, drafter context %s, its rows end at %lld",
                  static_cast<unsigned long long>(stream.id), accepted.drafts_kept, proposed,
                  static_cast<long long>(stream.committed), stream.restarted ? "restarted" : "whole",
                  static_cast<long long>(stream.drafter_end));
      }
    }

    const int64_t start = stream.committed;
    stream.committed += accepted.rows_kept();
    stream.pending = accepted.bonus;
    stream.held_drafts.clear();
    stream.held_chances.clear();
    stream.held_forced = 0;
    stream.needs_draft = true;
    for (int32_t token : accepted_tokens(window, accepted)) {
      ++stats_.tokens_generated;
      if (!stream.append(token)) break;
    }
    if (stream.drafting && stream.wants_taps && !stream.finished()) {
      if (device_taps_) {
        tapped.push_back(&stream);
        tap_rows.push_back({stream.id, start, row_begin, accepted.rows_kept()});
      } else {
        hold_taps(stream, start, accepted.rows_kept(), window_taps(verified, index, accepted.rows_kept()));
      }
    }
  }
  if (!tap_rows.empty()) absorb_on_device(verified, tapped, tap_rows);
}

void Lanes::deliver() {
  for (auto it = live_.begin(); it != live_.end();) {
    Stream& stream = *it->second;
    if (stream.generated.size() > stream.delivered || stream.finished()) {
      StreamEvent event{stream.id, {stream.generated.begin() + stream.delivered, stream.generated.end()},
                        stream.finish, stream.error, stream.stats};
      stream.delivered = stream.generated.size();
      events_.push_back(std::move(event));
    }
    if (stream.finished()) {
      release(stream);
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
}

void Lanes::fail_stream(Stream& stream, const Status& status) {
  if (stream.finished()) return;
  stream.finish = FinishReason::Error;
  stream.error = status.to_string();
}

void Lanes::release(Stream& stream) {
  kv_pages_reserved_ -= stream.kv_pages;
  stream.kv_pages = 0;
  if (stream.drafter_open) settle_drafter();
  if (stream.target_open) {
    target_.release(stream.id);
    stream.target_open = false;
  }
  if (stream.drafter_open) {
    drafter_->release(stream.id);
    stream.drafter_open = false;
  }
}

int Lanes::draft_cap(const Stream& stream) const {
  int cap = most_drafts_;
  if (stream.request.max_draft >= 0) cap = std::min(cap, stream.request.max_draft);
  return std::max(0, std::min(cap, stream.remaining() - 1));
}

std::span<const float> Lanes::window_taps(const Verified& verified, size_t window, int rows) const {
  const std::vector<int64_t>& begin = verified.tap_row_begin.empty() ? verified.row_begin : verified.tap_row_begin;
  const int64_t tap_rows = begin.empty() ? 0 : begin.back();
  if (tap_rows <= 0) return {};
  const size_t row_floats = verified.taps.size() / static_cast<size_t>(tap_rows);
  LS_CHECK(begin[window + 1] - begin[window] >= rows, "the target tapped every window that asked for taps");
  return std::span<const float>(verified.taps).subspan(begin[window] * row_floats, rows * row_floats);
}

}  // namespace ls
