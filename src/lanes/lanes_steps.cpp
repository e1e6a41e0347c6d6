// Two steps of the round: admit (prefill new streams, their prompts tapped where pricing says) and draft (one
// pass); which streams tap and when a stream goes dormant. The taps themselves: lanes_taps.cpp.
#include <algorithm>
#include <cmath>
#include <string>

#include "base/log.h"
#include "lanes/lanes.h"

namespace ls {
namespace {

// A draft the lanes can verify: the right length, picks inside the vocabulary, finite chances in [0, 1].
Status check_draft(const Draft& draft, int depth, int vocab_size, bool has_confidence) {
  if (!draft.status.ok()) return draft.status;
  if (static_cast<int>(draft.tokens.size()) != depth) {
    return Status(ErrorCode::DraftNonfinite, "asked for " + std::to_string(depth) + " drafts, got " +
                                                 std::to_string(draft.tokens.size()));
  }
  for (int32_t token : draft.tokens) {
    if (token < 0 || token >= vocab_size) {
      return Status(ErrorCode::DraftNonfinite,
                    "draft pick " + std::to_string(token) + " outside the vocabulary of " + std::to_string(vocab_size));
    }
  }
  if (has_confidence) {
    if (static_cast<int>(draft.chances.size()) != depth) {
      return Status(ErrorCode::DraftNonfinite, "asked for " + std::to_string(depth) + " chances, got " +
                                                   std::to_string(draft.chances.size()));
    }
    for (float chance : draft.chances) {
      if (!std::isfinite(chance) || chance < 0.0f || chance > 1.0f) {
        return Status(ErrorCode::DraftNonfinite, "draft chance " + std::to_string(chance) + " is not in [0, 1]");
      }
    }
  }
  return ok_status();
}

}  // namespace

Status Lanes::admit() {
  std::vector<Stream*> admitted;
  const KvBudget kv = kv_budget();
  while (!waiting_.empty() && static_cast<int>(live_.size()) < options_.max_live_streams) {
    // In arrival order: a long request at the front waits for pages rather than being overtaken by short ones.
    const int64_t pages = kv.pages_for(waiting_.front()->request);
    const bool fits = kv.pages == 0 || kv_pages_reserved_ + pages <= kv.pages;
    if (!fits && !live_.empty()) break;  // pages free up as live streams end
    std::unique_ptr<Stream> owned = std::move(waiting_.front());
    waiting_.pop_front();
    Stream* stream = owned.get();
    stream->admission = next_admission_++;
    // Start from what the drafter has shown on earlier streams, not from the fixed prior.
    stream->acceptance.reset(pricing_.pooled_acceptance().conditionals());
    live_[stream->id] = std::move(owned);
    stream->kv_pages = fits ? pages : 0;
    kv_pages_reserved_ += stream->kv_pages;
    if (!fits) {  // even an empty pool cannot hold it
      fail_stream(*stream, Status(ErrorCode::OutOfMemory, "the request needs " + std::to_string(pages) +
                                                              " KV pages, the pool holds " + std::to_string(kv.pages)));
    } else if (stream->request.prompt.empty()) {
      fail_stream(*stream, Status(ErrorCode::InvalidArgument, "a request needs at least one prompt token"));
    } else if (stream->request.max_tokens <= 0) {
      stream->finish = FinishReason::Length;
    } else {
      admitted.push_back(stream);
    }
  }
  // A stream admitted while drafting cannot pay at this many streams (acceptance pooled over earlier streams)
  // starts dormant: its prompt is not tapped; should it probe later, its context restarts there. Until a draft was
  // verified nothing is known about the drafter: the scout taps its whole prompt, so it measures the drafter over a
  // whole context (a scout restarted over a few rows would measure the restart's loss and rule drafting out for all).
  // Before the drafter is proven only one stream (the scout) taps its prompt (LanesOptions::scout_prompt_only; else
  // only where even the prior cannot pay at this many streams); the others start dormant and wake on merit should
  // the scout prove it: a stream that never drafts never costs a tap row or an absorb.
  const bool drafter_proven = pricing_.drafter_proven();
  bool scout_tapping = false;
  for (const auto& [id, live] : live_) {
    scout_tapping = scout_tapping || (live->prefilled && live->drafting && !live->dormant && !live->finished());
  }
  const int streams = std::min({static_cast<int>(live_.size()), options_.max_streams, max_rows_});
  // Pricing's answers here depend only on a stream's cap and sampling mode: asked once for each (an allocator run
  // per admitted stream cost 16 streams about 0.5 ms of the first round on the H200, batch s10A).
  struct Answers {
    int cap;
    PassMode mode;
    bool pays;        // drafts would be bought at the pooled acceptance
    bool right_pays;  // ... if every draft landed
  };
  std::vector<Answers> answers;
  auto answers_for = [&](int cap, PassMode mode) -> const Answers& {
    for (const Answers& known : answers) {
      if (known.cap == cap && known.mode == mode) return known;
    }
    answers.push_back({cap, mode, pricing_.could_draft(streams, cap, false, mode),
                       pricing_.could_draft(streams, cap, /*always_right=*/true, mode)});
    return answers.back();
  };
  // whole_contexts_repay and exploration_repays: asked once for each cap, mode, reply length and prompt length (an
  // allocator run per admitted stream cost 16 streams ~2 ms of host work on the H200, s14A; exploration_repays, which
  // remembers only a closed answer, still ran one per stream: 1.8 M host instructions in the first round at 16
  // streams against plain's 71 k, lanes_host_bench, lanes18).
  struct StreamAnswer {
    int cap;
    PassMode mode;
    int tokens_left;
    int prompt_rows;
    bool yes;
  };
  std::vector<StreamAnswer> whole_answers, repay_answers;
  auto ask_once = [&](std::vector<StreamAnswer>& known, const Stream& stream, int cap, PassMode mode, auto&& ask) {
    const int tokens_left = stream.remaining();
    const int prompt_rows = static_cast<int>(stream.request.prompt.size());
    for (const StreamAnswer& answer : known) {
      if (answer.cap == cap && answer.mode == mode && answer.tokens_left == tokens_left &&
          answer.prompt_rows == prompt_rows) {
        return answer.yes;
      }
    }
    known.push_back({cap, mode, tokens_left, prompt_rows, ask(tokens_left, prompt_rows)});
    return known.back().yes;
  };
  auto whole_for = [&](const Stream& stream, int cap, PassMode mode) {
    return ask_once(whole_answers, stream, cap, mode, [&](int tokens_left, int prompt_rows) {
      return pricing_.whole_contexts_repay(streams, cap, tokens_left, prompt_rows, mode);
    });
  };
  auto repays_for = [&](const Stream& stream, int cap, PassMode mode) {
    return ask_once(repay_answers, stream, cap, mode, [&](int tokens_left, int prompt_rows) {
      return pricing_.exploration_repays(streams, cap, tokens_left, prompt_rows, mode);
    });
  };
  std::vector<Stream*> restarted;  // restarted scouts the gate lets explore (scout_at_prefill)
  for (Stream* stream : admitted) {
    if (!stream->drafting || !restarts_) continue;
    const PassMode mode = pricing_.mode_of(*stream);
    const Answers& priced = answers_for(draft_cap(*stream), mode);
    const bool pays = priced.pays;
    // always_draft (exactness checks) drafts every stream from its first round: every prompt is tapped.
    // whole_contexts_priced: every prompt tapped where its absorb and the scout's one-off are repaid by the prior.
    const bool whole =
        !drafter_proven && options_.pricing.whole_contexts_priced && pays && whole_for(*stream, draft_cap(*stream), mode);
    const bool scout_only = !whole && ((options_.scout_prompt_only && !options_.pricing.always_draft) || !pays);
    // With several streams the scout too starts dormant (lanes17): it explores over a restarted context, as the group
    // it would wake does, so its probe measures what that group lands, not what a whole prompt's context does (the
    // nano pair on the H200: the whole-context scout's proof woke a group that kept 5 of 32 / 6 of 102 drafts, 0.92x
    // at 8 / 16 streams). H200 batch A of lanes17 (A B B A, 256 tokens): nano 8 / 16 streams 0.95 / 0.92x and
    // 0.96 / 0.96x against 0.92 / 0.93x and 0.93 / 0.95x; the synth 1.2B 1.11 / 1.32x and 1.14 / 1.28x against
    // 1.07 / 1.26x and 1.08 / 1.27x. choose_tapping taps it the round it probes.
    const bool restarted_scout = !drafter_proven && scout_only && streams > 1;
    // Where even an always-right drafter could not pay at this many streams the scout's probe would be skipped:
    // no prompt is tapped (the CPU nano pair at 4-16 streams tapped and absorbed the scout's 192-row prompt).
    const bool hopeless = !drafter_proven && options_.scout_prompt_only && !priced.right_pays;
    // Exploration its run cannot repay (PricingOptions::explore_repay): no prompt tapped, no scout.
    const bool unrepaid = !repays_for(*stream, draft_cap(*stream), mode);
    stream->dormant =
        hopeless || unrepaid || restarted_scout || (drafter_proven ? !pays : scout_tapping && scout_only);
    scout_tapping = scout_tapping || !stream->dormant;
    stream->wants_taps = !stream->dormant;
    stats_.dormant_entries += stream->dormant;
    if (restarted_scout && !hopeless && !unrepaid) restarted.push_back(stream);
  }
  // scout_at_prefill: these tap their prompt's last row in the prefill and probe right after it.
  const std::vector<Stream*> prefill_scouts =
      options_.scout_at_prefill && !drafter_proven && streams > 1 ? choose_prefill_scouts(restarted, streams)
                                                                  : std::vector<Stream*>{};
  auto prefill_scout = [&](const Stream* stream) {
    return std::find(prefill_scouts.begin(), prefill_scouts.end(), stream) != prefill_scouts.end();
  };
  for (Stream* stream : admitted) {
    if (!restarts_) stream->wants_taps = stream->drafting;
  }
  const int target_rows = target_.facts().max_rows > 0 ? target_.facts().max_rows : max_rows_;
  const int prefill_rows = std::min(options_.prefill_rows > 0 ? options_.prefill_rows : target_rows, target_rows);
  Status first_error;
  // Each forward carries at most prefill_rows rows; a long prompt runs as consecutive chunks of one stream.
  while (true) {
    std::vector<Window> windows;
    std::vector<Stream*> owners;
    int budget = prefill_rows;
    for (Stream* stream : admitted) {
      const int64_t prompt_rows = static_cast<int64_t>(stream->request.prompt.size());
      if (stream->finished() || stream->committed >= prompt_rows) continue;
      if (budget <= 0) break;
      const int rows = static_cast<int>(std::min<int64_t>(prompt_rows - stream->committed, budget));
      Window window;
      window.stream = stream->id;
      window.tokens = std::span<const int32_t>(stream->request.prompt).subspan(stream->committed, rows);
      window.sampling = stream->request.sampling;
      window.first_drawn_row = stream->committed + rows == prompt_rows ? rows - 1 : rows;
      window.start_position = stream->committed;
      const bool last_chunk = stream->committed + rows == prompt_rows;
      // (A prefill scout taps only its last chunk, and keeps only its last row: below.)
      window.want_taps = stream->wants_taps || (last_chunk && prefill_scout(stream));
      if (window.want_taps) stats_.tap_rows += prefill_scout(stream) ? 1 : rows;
      windows.push_back(window);
      owners.push_back(stream);
      stream->target_open = true;
      budget -= rows;
    }
    if (windows.empty()) break;
    settle_drafter();
    const double forward_start_ms = clock_.now_ms();
    Result<Verified> verified = target_.forward(windows);
    ++stats_.prefill_forwards;
    stats_.forward_ms += clock_.now_ms() - forward_start_ms;
    if (!verified.ok()) {
      for (Stream* stream : owners) fail_stream(*stream, verified.status());
      if (first_error.ok()) first_error = verified.status();
      continue;
    }
    std::vector<Stream*> tapped;
    std::vector<TapRows> tap_rows;
    for (size_t index = 0; index < owners.size(); ++index) {
      Stream& stream = *owners[index];
      const int rows = static_cast<int>(windows[index].tokens.size());
      Status committed = target_.commit(stream.id, rows);
      if (!committed.ok()) {
        fail_stream(stream, committed);
        continue;
      }
      const int64_t start = stream.committed;
      stream.committed += rows;
      if (stream.drafting && windows[index].want_taps) {
        const int skip = prefill_scout(&stream) ? rows - 1 : 0;  // a prefill scout keeps only its last row
        if (device_taps_) {
          tapped.push_back(&stream);
          tap_rows.push_back({stream.id, start + skip, verified->row_begin[index] + skip, rows - skip});
        } else {
          const std::span<const float> taps = window_taps(*verified, index, rows);
          hold_taps(stream, start + skip, rows - skip, taps.subspan(taps.size() / rows * skip));
        }
      }
      if (stream.committed == static_cast<int64_t>(stream.request.prompt.size())) {
        stream.prefilled = true;
        stream.pending = verified->draws[verified->row_begin[index] + rows - 1];
        stream.needs_draft = true;
        ++stats_.tokens_generated;
        stream.append(stream.pending);
      }
    }
    if (!tap_rows.empty()) absorb_on_device(*verified, tapped, tap_rows);
  }
  // The prefill scouts probe now (plan_depths: the scout, and beside it the streams marked scout_prober), so their
  // drafts are verified in this round's forward.
  if (!prefill_scouts.empty() && std::all_of(prefill_scouts.begin(), prefill_scouts.end(),
                                             [](const Stream* stream) { return stream->prefilled; })) {
    draft();
  }
  return first_error;
}

std::vector<Stream*> Lanes::choose_prefill_scouts(std::span<Stream* const> restarted, int round_streams) {
  // As tap_restarted_scout chooses at a round: the lowest id among the drafting streams with a cap (none awake, none
  // scouted), then the next scout_probes - 1 by id; the gate's checks as there.
  for (const auto& [id, live] : live_) {
    if (!live->drafting || draft_cap(*live) <= 0) continue;
    if (!live->dormant || live->backoff.scouted) return {};
    // The scout is the lowest id: it must be one of this admission's restarted scouts.
    if (std::find(restarted.begin(), restarted.end(), live.get()) == restarted.end()) return {};
    break;
  }
  std::vector<Stream*> scouts;
  for (const auto& [id, live] : live_) {
    Stream* stream = live.get();
    if (static_cast<int>(scouts.size()) >= std::max(pricing_.options().scout_probes, 1)) break;
    if (!stream->drafting || draft_cap(*stream) <= 0) continue;
    if (std::find(restarted.begin(), restarted.end(), stream) == restarted.end()) continue;
    scouts.push_back(stream);
  }
  if (scouts.empty()) return scouts;
  Stream& scout = *scouts.front();
  const int cap = draft_cap(scout);
  const PassMode mode = pricing_.mode_of(scout);
  if (!pricing_.exploration_repays(round_streams, cap, scout.remaining(), static_cast<int>(scout.request.prompt.size()),
                                   mode) ||
      !pricing_.could_draft(round_streams, cap, /*always_right=*/true, mode)) {
    return {};
  }
  for (Stream* stream : scouts) stream->scout_prober = stream != &scout;
  return scouts;
}

void Lanes::update_dormancy(Stream& stream, int depth, bool probe) {
  // Zero-draft decisions in a row before a stream stops tapping: a stream that drafts most rounds keeps its
  // context whole through a single unpaid round.
  constexpr int kZeroDecisionsBeforeDormant = 3;
  // A dormant stream's probe does not wake it: only a decision that buys drafts on their merit does.
  if (probe && stream.dormant) return;
  if (depth > 0) {
    stream.zero_decisions = 0;
    stream.dormant = false;
    return;
  }
  ++stream.zero_decisions;
  if (!restarts_ || stream.dormant || stream.zero_decisions < kZeroDecisionsBeforeDormant) return;
  if (options_.alone_keeps_context && live_.size() == 1 && target_.cpu_pool() != nullptr) return;
  stream.dormant = true;
  ++stats_.dormant_entries;
  stream.unabsorbed_rows = 0;
  stream.unabsorbed_taps.clear();
  stream.unabsorbed_taps.shrink_to_fit();
}

void Lanes::choose_tapping(std::span<Stream* const> streams) {
  // The dormant stream due to probe this round (the longest past its wait; ties: admission order) taps, so its probe
  // drafts over the rows of this round.
  Stream* next_prober = nullptr;
  int most_overdue = -1;
  for (Stream* stream : streams) {
    stream->wants_taps = stream->drafting && !stream->dormant;
    stream->group_prober = false;
    stream->scout_prober = false;
    if (!stream->drafting || !stream->dormant) continue;
    // Due at this round's decision (its taps are kept or absorbed after this verify, before the decision); a wait
    // not started yet is the first wait, as plan_depths counts it.
    const int wait = stream->backoff.wait > 0 ? stream->backoff.wait : options_.pricing.probe_first_wait;
    const int overdue = stream->backoff.zero_rounds + 1 - std::max(wait, 1);
    if (overdue >= 0 && overdue > most_overdue) {
      most_overdue = overdue;
      next_prober = stream;
    }
  }
  // Before the drafter is proven only the scout probes (plan_depths offers no other stream).
  const bool drafter_proven = pricing_.drafter_proven();
  int round_streams = 0;
  for (const auto& [id, live] : live_) round_streams += live->prefilled && !live->finished();
  round_streams = std::min({round_streams, options_.max_streams, max_rows_});
  if (!drafter_proven) tap_restarted_scout(streams, round_streams);
  bool probe_taps = false;
  if (next_prober != nullptr && drafter_proven && pricing_.probe_affordable() &&
      pricing_.probe_would_run(*next_prober, draft_cap(*next_prober), round_streams)) {
    // Only where the probe will run: a skipped probe's taps (and their device absorb) would be paid for nothing.
    next_prober->wants_taps = true;
    probe_taps = true;
  }
  if (probe_taps || !drafter_proven || !pricing_.group_probe_due()) return;
  // A group probe will run at this decision (no stream's own probe does): the dormant stream that waited longest
  // taps and plan_depths has it probe, over this round's rows.
  Stream* longest = nullptr;
  for (Stream* stream : streams) {
    if (!stream->drafting || !stream->dormant) continue;
    if (longest == nullptr || stream->backoff.zero_rounds > longest->backoff.zero_rounds) longest = stream;
  }
  if (longest == nullptr) return;
  if (!pricing_.group_probe_would_run(*longest, draft_cap(*longest), round_streams)) return;
  longest->wants_taps = true;
  longest->group_prober = true;
}

void Lanes::tap_restarted_scout(std::span<Stream* const> streams, int round_streams) {
  // The restarted scout (Lanes::admit): while every drafting stream is dormant, the one plan_depths offers as the scout
  // (the lowest id; it probes at once) taps this round's row, so its probe drafts over a context restarted here --
  // where the gate lets it explore at all (else its taps and absorbs would be paid every round for nothing).
  Stream* scout = nullptr;
  for (Stream* stream : streams) {
    if (!stream->drafting || draft_cap(*stream) <= 0) continue;
    if (!stream->dormant) return;  // an awake stream is the scout
    if (scout == nullptr || stream->id < scout->id) scout = stream;
  }
  if (scout == nullptr || scout->backoff.scouted) return;
  const int cap = draft_cap(*scout);
  const PassMode mode = pricing_.mode_of(*scout);
  // Nor where even an always-right drafter could not pay at this many streams (its probe would be skipped; the gate,
  // which remembers a closed answer, says so first where it is on).
  if (!pricing_.exploration_repays(round_streams, cap, scout->remaining(),
                                   static_cast<int>(scout->request.prompt.size()), mode) ||
      !pricing_.could_draft(round_streams, cap, /*always_right=*/true, mode)) {
    return;
  }
  scout->wants_taps = true;
  // PricingOptions::scout_probes: the next dormant streams by id tap too and probe beside it (plan_depths).
  for (int more = 1; more < pricing_.options().scout_probes; ++more) {
    Stream* next = nullptr;
    for (Stream* stream : streams) {
      if (!stream->drafting || draft_cap(*stream) <= 0 || stream->wants_taps || stream->backoff.scouted) continue;
      if (next == nullptr || stream->id < next->id) next = stream;
    }
    if (next == nullptr) break;
    next->wants_taps = true;
    next->scout_prober = true;
  }
}

double Lanes::draft() {
  if (drafter_ == nullptr) return 0.0;
  // Kept from round to round: a round that drafts nothing allocates nothing here (lanes18).
  std::vector<Stream*>& drafting = drafting_;
  std::vector<int>& caps = caps_;
  drafting.clear();
  caps.clear();
  int round_streams = 0;
  for (auto& [id, owned] : live_) {
    Stream& stream = *owned;
    if (!stream.prefilled || stream.finished()) continue;
    ++round_streams;
    if (stream.needs_draft && stream.drafting) {
      drafting.push_back(&stream);
      caps.push_back(draft_cap(stream));
    }
    stream.needs_draft = false;
  }
  if (drafting.empty()) return 0.0;
  stats_.depth_offers += static_cast<int64_t>(drafting.size());
  const std::vector<DepthPlan>& plans =
      pricing_.plan_depths(drafting, caps, std::min({round_streams, options_.max_streams, max_rows_}));
  std::vector<DraftRequest> requests;
  std::vector<Stream*> owners;
  std::vector<int> forced;
  int deepest = 0;
  // The drafter's time this round: absorbing the drafting streams' kept rows, then the pass.
  const double start_ms = clock_.now_ms();
  double absorb_ms = 0;
  int absorbed_rows = 0;
  for (size_t index = 0; index < drafting.size(); ++index) {
    const int depth = std::min(plans[index].depth, caps[index]);
    Stream& stream = *drafting[index];
    // A dormant stream bought drafts on their merit wakes: it taps from the next round and drafts from the one
    // after, over the rows it kept since, rather than drafting now over a context that ends in skipped rows.
    // (A deeper probe's forced drafts are bought on merit too: only a probe drafts over the rows it tapped for it.)
    // Rows held from an older round do not reach the anchor either: drafting over them would be blind.
    const int64_t context_end =
        stream.unabsorbed_rows > 0 ? stream.unabsorbed_start + stream.unabsorbed_rows : stream.drafter_end;
    const bool waking = depth > 0 && stream.dormant && !plans[index].probe && context_end < stream.committed;
    update_dormancy(stream, depth, plans[index].probe);
    if (depth <= 0 || waking) continue;
    const double absorb_start_ms = clock_.now_ms();
    absorbed_rows += stream.unabsorbed_rows;
    const bool flushed = flush_taps(stream);
    absorb_ms += clock_.now_ms() - absorb_start_ms;
    if (!flushed) continue;
    DraftRequest request;
    request.stream = stream.id;
    request.anchor_token = stream.pending;
    request.anchor_position = stream.committed;
    request.depth = depth;
    request.sampling = stream.request.sampling;
    requests.push_back(request);
    owners.push_back(&stream);
    forced.push_back(std::min(plans[index].forced, depth));
    deepest = std::max(deepest, depth);
  }
  // Drafting that does not pay costs nothing: no pass when no stream bought a draft.
  if (requests.empty()) return clock_.now_ms() - start_ms;
  ledger_.drafting = true;
  const double pass_start_ms = clock_.now_ms();
  std::vector<Draft> drafts = drafter_->draft(requests);
  const double elapsed_ms = clock_.now_ms() - start_ms;
  stats_.drafter_ms += clock_.now_ms() - pass_start_ms;
  stats_.pass_ms += clock_.now_ms() - pass_start_ms;
  ++stats_.drafter_passes;
  log_debug("draft pass: %zu streams, deepest %d, %.3f ms of which absorb %.3f ms (%d rows)", requests.size(),
            deepest, elapsed_ms, absorb_ms, absorbed_rows);
  // The table holds the pass alone: absorbs are priced by rows (a one-off catch-up must not inflate every pass).
  pricing_.observe_draft(static_cast<int>(requests.size()), deepest, elapsed_ms - absorb_ms, pricing_.mode_of(owners));
  const bool has_confidence = drafter_->facts().has_confidence;
  const int vocab_size = target_.facts().vocab_size;
  for (size_t index = 0; index < owners.size(); ++index) {
    Stream& stream = *owners[index];
    Status checked = index < drafts.size()
                         ? check_draft(drafts[index], requests[index].depth, vocab_size, has_confidence)
                         : Status(ErrorCode::Internal, "the drafter answered " + std::to_string(drafts.size()) +
                                                           " of " + std::to_string(requests.size()) + " requests");
    if (!checked.ok()) {
      // This stream decodes plainly next round; the fault is counted.
      ++stats_.drafter_faults;
      ++stream.stats.drafter_faults;
      continue;
    }
    stream.held_drafts = drafts[index].tokens;
    if (has_confidence) {
      stream.held_chances = drafts[index].chances;
      pricing_.observe_confidences(stream.held_chances);
    }
    stream.held_forced = forced[index];
  }
  return elapsed_ms;
}

}  // namespace ls
