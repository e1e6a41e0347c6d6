// One request's decoding state inside the lanes: prompt, generated tokens, pending token, drafts held, stop rules.
//
// Glossary. The pending token is the last token produced (drawn by the target) and not yet run through it; it sits
// at position `committed` (the target holds state for positions 0 .. committed-1). Held drafts are the drafter's
// guesses for positions committed+1 .. committed+k, made after the last round and verified in the next one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/sampling.h"
#include "lanes/chances.h"
#include "model/target.h"

namespace ls {

enum class FinishReason { None, Stop, Length, Cancelled, Error };

// "stop", "length", "cancelled", "error" (OpenAI's finish_reason words where they exist).
const char* finish_reason_name(FinishReason reason);

// Called after each generated token with all generated tokens so far; returning true ends the stream right there
// (the server matches stop strings on detokenized text through this).
using StopHook = std::function<bool(std::span<const int32_t> generated)>;

struct Request {
  std::vector<int32_t> prompt;         // [prompt_tokens], at least one
  Sampling sampling;                   // sampling.seed is used only when has_seed
  bool has_seed = false;               // else the seed is seed_from_prompt(prompt)
  bool draft = true;                   // false: this stream never reaches the drafter
  int max_draft = -1;                  // most drafts per round for this stream; -1 = the engine's limit
  int max_tokens = 256;                // generated tokens, eos included
  std::optional<std::vector<int32_t>> eos_ids;  // default: the target's eos id
  StopHook stop;                       // optional
};

struct StreamStats {
  int64_t rounds = 0;           // verify rounds the stream took part in
  int64_t rows_verified = 0;    // window rows, pending row included
  int64_t drafts_verified = 0;  // draft rows verified
  int64_t drafts_accepted = 0;  // draft rows kept
  int64_t drafter_faults = 0;   // draft passes that failed for this stream (decoded plainly instead)
};

// What the lanes tell a stream's owner after a round: new tokens and, at the end, why it ended.
struct StreamEvent {
  StreamId stream = 0;
  std::vector<int32_t> tokens;  // new generated tokens, in order
  FinishReason finish = FinishReason::None;
  std::string error;            // set when finish == Error
  StreamStats stats;
};

struct Stream {
  StreamId id = 0;
  int64_t admission = 0;  // admission order, ties in least-recently-served picking
  Request request;
  std::vector<int32_t> eos_ids;

  std::vector<int32_t> generated;  // everything delivered or about to be, eos included
  size_t delivered = 0;            // generated[0 .. delivered) went out in events
  int32_t pending = -1;            // the last generated token, not yet run through the target
  int64_t committed = 0;           // positions the target holds for this stream
  bool prefilled = false;
  FinishReason finish = FinishReason::None;
  std::string error;

  bool drafting = false;              // takes part in drafting (request.draft, a drafter, no absorb failure)
  bool drafter_open = false;          // the drafter holds state for it (released exactly once)
  bool target_open = false;           // the target holds state for it (released exactly once)
  int64_t kv_pages = 0;               // KV pages reserved for it at admission (Lanes::kv_budget), until release
  std::vector<int32_t> held_drafts;   // [k] for positions committed+1 .. committed+k
  std::vector<float> held_chances;    // [k] cumulative acceptance estimates of held_drafts
  int held_forced = 0;                // leading held drafts a probe forces into the window
  // The calibrated chances of the last held drafts when the trim cut every one of them (the drafter's confidences
  // doubted them all); empty once a trim keeps a draft. The depth decision prices no better than these, else a
  // drafter whose confidences say "hopeless" is run every round for drafts no verify ever takes.
  std::vector<float> doubted_chances;
  bool needs_draft = false;           // its state moved since the last draft pass
  // Kept rows' taps not yet given to the drafter: absorbed lazily, right before the stream's next draft, so a
  // stream priced to plain costs the drafter nothing. [unabsorbed_rows, tap_layers, hidden] fp32.
  std::vector<float> unabsorbed_taps;
  int64_t unabsorbed_start = 0;       // position of the first unabsorbed row
  int unabsorbed_rows = 0;
  // What drafting that does not pay costs: nothing. After a few zero-draft decisions in a row a stream of a drafter
  // that restarts goes dormant: its windows ask the target for no taps, it holds none and absorbs none, until it is
  // the next stream due to probe; then it taps again and its context restarts past the rows it skipped.
  bool dormant = false;
  bool wants_taps = false;            // this round's window asks the target for taps
  bool group_prober = false;          // tapping this round for a group probe (Pricing::plan_group_probe)
  bool scout_prober = false;          // tapping this round to probe beside the restarted scout (scout_probes)
  // PricingOptions::scout_vote: this stream's next verified window is one of the scout pass's k restarted windows,
  // which move the pool as one window together (1 / k each); 0 = a window of its own.
  double vote_share = 0;
  int zero_decisions = 0;             // depth decisions in a row that gave it no drafts
  int64_t drafter_end = 0;            // positions the drafter's context reaches (absorbed or skipped by a restart)
  bool restarted = false;             // its drafter context restarted past skipped rows (it drafts without them)
  // PricingOptions::stop_on_measured_loss: what its drafting rounds alone won over plain rounds (tokens at plain's ms
  // a token less the round's measured ms), summed since it last stopped, over this many rounds; stopped: priced to
  // zero until its next probe.
  double drafting_gain_ms = 0;
  int drafting_rounds = 0;
  bool loss_stopped = false;

  int64_t last_served_round = -1;
  AcceptanceByDepth acceptance;
  ProbeBackoff backoff;
  StreamStats stats;

  bool finished() const { return finish != FinishReason::None; }
  // Tokens the stream may still generate before max_tokens.
  int remaining() const { return request.max_tokens - static_cast<int>(generated.size()); }
  // Appends one generated token and applies eos / max_tokens / stop hook; returns false once the stream ended.
  bool append(int32_t token);
};

}  // namespace ls
