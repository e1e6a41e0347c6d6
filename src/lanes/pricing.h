// Pricing: which drafts a round verifies and how deep each stream drafts next, by expected tokens per ms.
//
// Two decisions. Trim (before verify): the drafts are already paid for, so rows are bought against the verify
// cost alone, with chances from calibrated confidences or measured acceptance. Depth (before the drafter pass):
// rows are bought against verify plus drafter cost, with chances from measured acceptance, and plain must be
// beaten by `plain_margin`; a stream priced to zero probes one draft after an exponentially growing wait.
#pragma once

#include <map>
#include <span>
#include <utility>
#include <vector>

#include "lanes/allocator.h"
#include "lanes/chances.h"
#include "lanes/cost_tables.h"
#include "lanes/stream.h"

namespace ls {

struct PricingOptions {
  std::vector<double> depth_prior = default_depth_prior();  // acceptance by depth before measurements
  double acceptance_rate = 0.15;  // moving-average weight of acceptance outcomes
  // cpu20 (A/B, off): the confidence calibration's first outcomes as a running mean (ConfidenceCalibration::
  // set_mean_start): the nano head's raw chances at 1 stream on the CPU (0.37 / 0.19 for the first drafts against
  // 0.84 / 0.71 landing) took ~10 windows at 0.15 to be believed, and the trim cut the first windows to 2 drafts.
  // lanes_bench --calibration-start mean.
  bool calibration_mean_start = false;
  double cost_rate = 0.2;         // moving-average weight of measured times
  double plain_margin = 1.05;     // drafting must beat plain by this factor to be drafted at all
  int probe_first_wait = 8;       // zero-draft decisions before the first probe
  int probe_most_wait = 128;      // cap of the doubling wait
  double probe_budget = 0.05;     // probes may take this share of the plain rounds' time (banked up to one probe)
  int deeper_probe_every = 8;     // every n-th drafting decision asks one draft deeper than priced
  int absorb_amortize_rounds = 32;  // a stream's catch-up absorb is spread over up to this many future rounds
  // Tests and exactness checks: every drafting stream asks its whole cap each round and the trim keeps every draft
  // that fits the row budget, whatever the timings say (the tokens never change; only speed does).
  bool always_draft = false;
  // Decisions over dormant streams only, after one that bought nothing, run the row allocator only every n-th time
  // (the others are zero decisions, probes as usual): a round that buys nothing costs what a plain round costs
  // (64 streams on the H200: +0.03 ms of host work a round, 1.5%; s6B 16 streams, nothing drafted for 255 rounds:
  // host 0.0205 vs plain 0.0110 ms a round). 8: the default since lanes7 (a waking waits at most 8 rounds; probes
  // run as usual); 1 = every decision (the sixth session's first half: lanes_bench --quiet-reprice 1).
  int quiet_reprice_every = 8;
  // Exploration that its run can repay (lanes11). Before any draft was verified, the scout (its prompt's taps, its
  // probe, the new forward shapes they bring) runs only where drafting at the prior, every stream of the round
  // offering, would save at least `explore_repay` times that one-off over the tokens the streams have left. The nano
  // pair on the H200 at 8-16 streams, 64 tokens: the prior's best round beats plain by 4-15 %, about 2 ms of a 14-16
  // ms run, while scouting (taps, absorbs, passes, new shapes) cost 2-4 ms and nothing it found paid. 3 by default
  // since H200 batch s10A (same binary, decode speedup at 1 / 4 / 8 / 16 streams): nano greedy 1.69 / 0.81 / 0.98 /
  // 0.97x against 1.76 / 0.81 / 0.81 / 0.85x ungated, nano sampled 0.98 / 0.98 / 0.98 / 0.97x against 0.90 / 0.86 /
  // 0.76 / 0.82x, the 1.2B synth greedy at 8 streams 1.21x against 1.20x, sampled at 1 / 4 / 16 1.00 / 1.00 / 1.00x
  // against 1.11 / 1.03 / 0.94x. 0: off (lanes_bench --explore-gate X).
  double explore_repay = 3;
  // ... or where an always-right drafter's gain would repay this many times the one-off: a confident drafter the
  // prior undersells, in runs long enough to find it (the 1.2B at 16-64 streams, where only deep windows pay; the
  // nano pair's 64-token runs reach 5-11x). lanes_bench --explore-gate X,Y.
  double explore_repay_if_right = 15;
  // Eleventh session (lanes12). Whole contexts where the prior pays well: while the drafter is unproven, could_draft
  // (admission's "drafts would be bought at this many streams") says yes only where the prior's best round saves at
  // least this share of plain's time a token; with LanesOptions::scout_prompt_only off, every prompt is then tapped
  // and the group drafts over whole contexts instead of restarted ones. H200 s11A, nano greedy 256 tokens, every
  // prompt tapped where the prior pays at all (share > 0): 1.25x at 4 streams (5.4 tokens a window) against 0.93-0.95x
  // with the scout alone, but 0.67x at 16 (where the prior's round saves 6 %, at 4 streams 14 %). 0: any gain
  // (lanes_bench --admit all); lanes_bench --admit whole[:SHARE] (0.10 unless given).
  double whole_context_share = 0;
  // Eleventh session (lanes12): sampled passes are bought (and sampled exploration runs) only in rounds of at most
  // this many streams (0: any). With pass11's cheap sampled pass (1 stream 0.63 ms) the synth 1.2B seeded sampled
  // drafted 2.32x at 1 stream but 0.82 / 0.89x at 4 / 16 (H200 s11B: passes 1.7 ms against a 1.38 ms table, 7-9 new
  // shapes' eager forwards), where nothing drafted was 1.00x. The default 1 since the final batch's interleaved arms
  // (1 / 4 / 16 streams: 2.33 / 1.00 / 1.00 and 2.34 / 1.00 / 0.99x against 2.33 / 0.85 / 0.95 and 2.32 / 0.84 /
  // 0.89x), until multi-request sampled passes are priced from what they cost in a round. The fakes' tests of sampled
  // drafting at several streams set 0. lanes_bench --sampled-streams N.
  int sampled_most_streams = 1;
  // Thirteenth session (lanes14). A sampled stream alone in its rounds stops drafting once its drafting rounds, as
  // measured (tokens at plain's ms a token against each round's clock time: verify, absorbs, pass, host; a new
  // shape's one-off left out), have lost over at least `loss_stop_rounds` of them since it last stopped; it is priced
  // to zero until its next probe (at the longest wait), whose rounds start a new sum. Every estimate pricing reads
  // moves at 0.15 a window from the prior, so a drafter that lands ~0.8 of 7 a window after a lucky first one (the
  // nano pair's seeded sampled windows on the H200: 6 of 6, then 1, 0, 0, 0, 0, 0, 1, 0, 3, 0, 0, 0) kept being bought
  // for 11-15 passes (0.81-0.87x). Rounds of several streams are left out (one clock time for several streams'
  // windows). Greedy streams are left out too: in H200 batch s13A the rule stopped the nano pair's greedy stream after
  // its first windows (64 tokens 1.75x -> 0.93x, 256 tokens 2.69x -> 0.97x) while the sampled one went 0.83-0.86x ->
  // 0.95x. The default since H200 batch s13B (alternated A B B A, nano seeded sampled 64 tokens, 1 stream, 5 repeats:
  // 0.936 / 0.957x with 6-7 passes against 0.862 / 0.847x with 10; greedy 1 stream with the rule 1.91x at 64 tokens
  // and 2.75x at 256, as gpu-check's 1.80 / 2.82x). lanes_bench --loss-stop on|off.
  bool stop_on_measured_loss = true;
  int loss_stop_rounds = 3;
  // Fourteenth session (lanes15). Before any draft was verified, a sampled round is priced at this prior (conditional
  // acceptance by depth) instead of depth_prior: a seeded sampled draw matches the drafter's only where both pick the
  // same token, and the nano pair's sampled windows on the H200 land ~1 draft of 7 (1.9-2.0 tokens a window, a
  // conditional ~0.5), where the greedy prior promises ~3. The gate (exploration_repays) and admission (could_draft)
  // then see what a sampled stream's exploring can win: the nano pair's 64-token sampled stream explored, lost 3-4
  // rounds before the loss stop and ran 0.93x (s13final). The default (0.5 at every depth) since H200 batch s14A
  // (alternated A B B A, nano seeded sampled 64 tokens, 1 stream, 5 repeats: 0.994 / 0.996x with no pass against
  // 0.954 / 0.951x with 7; the synth 1.2B sampled 1 stream 128 tokens 2.686 / 2.696x, 26 passes either way: its
  // always-right gain still opens the gate). Empty: depth_prior. lanes_bench --sampled-prior X|off.
  std::vector<double> sampled_prior = std::vector<double>(16, 0.5);
  // Fourteenth session (lanes15). Whole contexts priced per stream count: while the drafter is unproven, every
  // prompt is tapped (LanesOptions::scout_prompt_only's restarted contexts avoided) where the prior's best round,
  // over the tokens left, repays explore_repay times the scout's one-off plus every other prompt's absorb
  // (whole_contexts_repay). The nano pair on the H200 at 4 streams, 256 tokens: whole contexts 1.40 / 1.44x against
  // 0.94x scouted (s13final), where the scout's restarted group lands 5 of 55; the global --admit whole lost the
  // synth 1.2B's 64 streams in s11 (a slow first absorb priced as every row's cost: fixed in 0307c44). The default
  // since H200 batch s14B (alternated A B B A, 256 tokens): nano 4 / 8 / 16 streams 1.411 / 0.958 / 0.952x and
  // 1.454 / 0.956 / 0.946x against 0.945 / 0.957 / 0.956x and 0.949 / 0.954 / 0.953x; the synth 1.2B at 4 / 16 / 64
  // 1.583 / 1.352 / 1.282x and 1.629 / 1.347 / 1.267x against 1.642 / 1.351 / 1.291x and 1.650 / 1.342 / 1.362x (its
  // synthetic drafter lands as well over restarted contexts, so whole ones only add their absorbs there).
  // lanes_bench --admit scout for the scout alone.
  bool whole_contexts_priced = true;
  // Fourteenth session (lanes15), off: with several streams and the scout alone (whole contexts not bought), the gate
  // opens only on an always-right drafter's gain (explore_repay_if_right), not the prior's: gpu-check s14B's nano
  // greedy 64 tokens at 4 streams (0.84x, 7 passes; s14A 0.99x) sat on the prior's edge (2.15 ms against 3 x
  // 0.68-0.83 ms, moved by the load-time absorb call) and its woken group landed 1.54 a window over restarted
  // contexts. lanes_bench --scout-gate right|prior.
  bool scout_gate_if_right = false;
  // Seventeenth session (lanes19). Streams that probe together over restarted contexts where the scout is restarted
  // (several streams, whole contexts not bought): the scout and the next dormant streams by id tap the same round
  // and probe in one pass, so the group is woken on what several restarted windows land, not on one. On the H200 a
  // nano pass is launch-bound (about the same for 1 and 4 requests) and the verify nearly flat in rows, so the
  // extra windows cost a few rows and one batched absorb; one restarted window (lucky, or one that kept nothing and
  // barely moved the pool: batch b1's trace) no longer decides for the group alone (gpu-check b84ae38 at 8 / 16
  // streams: the woken group kept 1.3 a window for 3 passes, 0.93x). 1 (the scout alone) until a batch decides: on
  // b1-like fakes a drafter right for the scout's stream alone at 16 streams 0.960 -> 0.978x, a pass-wide lucky first
  // window at 8 0.942 -> 0.911x (all four land), a good drafter 0.996 -> 0.986x. Still 1 after H200 batch b4: with
  // wake_needs_landed it gave nano 8 / 16 streams 0.985 / 0.989 and 1.000 / 0.997x (default 0.991 / 0.963 and 0.957 /
  // 0.931x), but made the default the two turned 11 lanes tests red (81acbe2, reverted): a drafter that lands as well
  // over restarted contexts no longer woke its group, and a right drafter resumed after 129 rounds instead of <= 64.
  // lanes_bench --scout-probes N.
  int scout_probes = 1;
  // Seventeenth session (lanes19). The host overhead pricing adds to every round (observe_overhead) leaves out the
  // device absorb that follows a commit: it is the drafter's time, priced per row in each drafting stream's
  // activation, not work a plain round does. Counted in it, the restarted group's first absorbs on the H200 (batch b1,
  // nano 16 streams: 0.42 / 0.13 ms) moved the overhead 0.013 -> 0.155 ms; plain's round then looked 0.36 ms instead
  // of 0.24 and the allocator bought the group a second pass at 54.6 tok/ms against a true plain rate of ~67 (it kept
  // 5 of 76). Off since H200 batch b3 (lanes_bench --overhead without-absorbs): priced at the true plain cost, the
  // nano pair's 4 whole-context streams stopped drafting after a few early windows (0.918 / 0.910x, 6-10 passes,
  // against 1.398 / 1.339x with 49) and the synth 1.2B at 16 streams ran 1.114x against 1.328x; at 8 / 16 nano
  // streams it gained ~1 point. The old overhead's absorbs make plain look dearer by the drafter's absorb call: an
  // optimism the 4-stream win leans on.
  bool overhead_without_absorbs = false;
  // Seventeenth session (lanes19). No dormant stream is woken (bought drafts on the pool's chances) while every window
  // verified so far kept nothing: one failed window moves the pool's first depth only 0.85 -> 0.72 and deeper depths
  // sit at the calibrated confidences, so the every-8th reprice woke the whole group over restarted contexts after the
  // scout's probe kept 0 of 7 (H200 batch b1, nano 16 streams: 16 restarts, a pass keeping 5 of 76). Probes (the
  // streams' own and group probes) still run and a window that lands lifts it. Off (lanes_bench --wake-needs-landed
  // on): on b1-like fakes 8 streams 0.970 -> 0.978x, a good drafter whose scout window failed 1.130 -> 1.112x, and with
  // the H200's flat pass a good drafter's 16 streams were never woken; H200 b4 alone 0.969 / 0.980x at 8 streams and
  // 0.981 / 0.971x at 16 (with scout_probes 4: see there).
  bool wake_needs_landed = false;
  // Eighteenth session (lanes20). The scout pass's restarted windows vote once (with scout_probes > 1): the scout's and
  // its probers' windows move the pooled acceptance as ONE window together (each at 1 / k of the rate), and, in rounds
  // of several streams, no dormant stream is woken on the pool until at least `wake_landed_share` of the votes landed
  // (kept a draft; the scout pass votes the share of its windows that did, every other window votes 0 or 1). Four
  // restarted windows weighed as four made one unlucky scout pass (a forced-wrong pass on the fakes) pull the pool
  // down so far that single landed group probes lifted it back only after 129 rounds; weighed as one, the pool moves
  // as it did with the scout alone. lanes19's wake_needs_landed asked only that some window kept a draft: one of four
  // restarted windows keeping one (about half the nano pair's scout passes, restarted drafts landing ~15 %) would let
  // the pool wake the group. lanes_bench --scout-vote on|off.
  bool scout_vote = false;
  double wake_landed_share = 0.5;
  // Eighteenth session (lanes20). Drafts each window of the restarted scout's pass asks (0: its cap). Its windows
  // decide a wake by whether they land at all (scout_vote); on the H200 four windows of 7 drafts verify 36 rows beside
  // 8 streams (0.30 against 0.19 ms, a new shape run eagerly), four of 2 verify 16. lanes_bench --scout-depth N.
  int scout_depth = 0;
};

// What a drafter pass costs depends on how its picks are drawn: a sampled pick (keyed Gumbel over the filtered
// vocabulary) can cost several times a greedy argmax.
enum class PassMode { Greedy = 0, Sampled = 1 };

struct DepthPlan {
  int depth = 0;   // drafts to ask for
  int forced = 0;  // leading drafts the next trim must keep (probes)
  bool probe = false;  // a probe of a stream priced to zero (not drafts bought on their merit)
};

class Pricing {
 public:
  Pricing() = default;
  Pricing(CostTables tables, PricingOptions options, int max_rows, bool has_confidence);

  // The mode a stream's passes are priced in. Ninth session (lanes10): a pass with a sampled request, and a verify
  // with a sampled window, are priced from their own tables (timed at load with sampled requests and windows,
  // CalibrationOptions::sampled_passes, corrected online apart from greedy ones); sampled passes keep their own
  // outlier scale, which jumps to the measured ratio after two passes in a row far above it (the EMA took 5-8
  // passes to see the H200's 1.2B sampled pass at ~4.5 ms against a 0.69 ms greedy table). The default since s9B
  // (nano sampled 0.95 / 0.93 / 0.97 / 0.94x at 1 / 4 / 8 / 16 streams against 0.92 / 0.86 / 0.88 / 0.85x with one
  // table); lanes_bench --pass-modes off removed in lanes17.
  PassMode mode_of(const Stream& stream) const;
  // The mode of a pass over these streams: Sampled when any of them is.
  PassMode mode_of(std::span<Stream* const> streams) const;

  // Trim: cuts each stream's held drafts to the rows worth verifying this round (streams in round order).
  void trim(std::span<Stream* const> streams) const;
  // Depth: drafts to ask for each of `drafting` (streams whose state moved), with `round_streams` streams expected
  // to share the next verify. `caps[i]` is the most drafts stream i may take.
  // (The plans live in the pricing until its next decision.)
  const std::vector<DepthPlan>& plan_depths(std::span<Stream* const> drafting, std::span<const int> caps,
                                     int round_streams);

  // Whether drafts would be bought at all if all `round_streams` streams offered drafts with the acceptance pooled
  // so far (absorbs left out): a stream admitted when this says no does not tap its prompt.
  // `always_right`: as if every draft landed (when even that cannot pay, no stream needs its prompt tapped: the
  // scout's probe would be skipped too).
  bool could_draft(int round_streams, int cap, bool always_right = false, PassMode mode = PassMode::Greedy) const;
  // Whether exploring the drafter (PricingOptions::explore_repay) can pay back within `tokens_left` tokens a stream:
  // the time the prior's best round of `round_streams` streams saves against plain, over that many rounds, against
  // the scout's one-off (a probe, absorbing `absorb_rows` rows, a new shape's eager forward and capture). True when
  // the gate is off or the drafter is proven.
  bool exploration_repays(int round_streams, int cap, int tokens_left, int absorb_rows,
                          PassMode mode = PassMode::Greedy) const;
  // Whether every prompt of `round_streams` streams (`prompt_rows` each) is worth tapping before the drafter is
  // proven (whole_contexts_priced): the prior's gain against the scout's one-off and the other prompts' absorbs.
  bool whole_contexts_repay(int round_streams, int cap, int tokens_left, int prompt_rows,
                            PassMode mode = PassMode::Greedy) const;
  // PricingOptions::sampled_most_streams: sampled passes are neither bought nor explored in a round this wide.
  bool sampled_too_wide(int round_streams, PassMode mode) const {
    return mode == PassMode::Sampled && options_.sampled_most_streams > 0 &&
           round_streams > options_.sampled_most_streams && !options_.always_draft;
  }
  // The target captures no graphs (a CPU target): whole contexts' group brings no new shapes' captures.
  void set_graphless_target(bool graphless) { graphless_target_ = graphless; }
  // Taps absorbed on the device: every tapping stream's kept rows go in one call per forward, so drafting costs a
  // stream its rows' share of that call, not a call of its own.
  void set_batched_absorbs(bool on) { batched_absorbs_ = on; }
  // Whether the probe budget would let the stream due to probe probe at the next decision (a dormant stream taps
  // only then, so one that waits for the budget costs nothing meanwhile).
  bool probe_affordable() const;
  // Whether the probe of dormant `stream` would run at the next decision with `round_streams` streams: at the
  // longest wait, or where the stream could pay if every draft landed (else the probe is skipped, and the taps a
  // dormant stream takes for it would be wasted: 25 tap rounds and device absorbs for 2 passes at 16 streams).
  bool probe_would_run(const Stream& stream, int cap, int round_streams) const;
  // Whether a group probe is due at the next decision (see plan_group_probe).
  bool group_probe_due() const;
  // Whether `stream` would run a group probe at the next decision: due, the stream alone could not pay, and the
  // round's `round_streams` streams drafting together could if every draft landed.
  bool group_probe_would_run(const Stream& stream, int cap, int round_streams) const;
  // What one stream's probe of `cap` drafts costs next to `round_streams` pending rows (pass and its verify rows).
  double probe_cost_ms(int cap, int round_streams, PassMode mode = PassMode::Greedy) const;
  // Whether `stream`'s own probe of `cap` drafts next to `round_streams` pending rows pays its way: the tokens its
  // window wins if every draft lands, at plain's ms a token, against its pass, verify rows, absorb and one-off.
  // (A group probe runs only where the round's streams drafting together could pay at the hopeful chances; the
  // scout keeps the always-right test.) The nano pair on the H200 at 4-16 streams: a 7-draft window wins at most
  // 7 x 0.05 ms next to a 0.19 ms pass and a 0.2 ms forward. The default since H200 batch s8A (lanes9: nano greedy
  // 0.77 / 0.86 / 0.81x at 4 / 8 / 16 streams against 0.73 / 0.72 / 0.72x); lanes_bench --probe-value off removed
  // in lanes17.
  bool probe_pays(const Stream& stream, int cap, int round_streams) const;
  // A verify forward took `excess_ms` over its table entry (a new shape's eager run and capture): the mean one-off
  // a probe's new shape costs (probe_pays).
  void observe_slow_forward(double excess_ms);
  double one_off_ms() const { return one_off_ms_; }
  // The chances trim prices a stream's held drafts with: [held] cumulative.
  std::vector<float> held_chances(const Stream& stream) const;
  // A verify offered `proposed` drafts of the stream and `accepted` landed.
  void observe_acceptance(Stream& stream, int proposed, int accepted);
  // A round of `stream` alone that drafted (verified drafts, absorbed or ran a pass) gave `tokens` tokens in
  // `measured_ms` (stop_on_measured_loss).
  void observe_drafting_round(Stream& stream, int tokens, double measured_ms);
  // The drafter proposed drafts with these raw chain chances (every draft of a pass, before the trim).
  void observe_confidences(std::span<const float> raw_chances);
  // Measured forwards and passes move the tables; one-off slow ones (a CUDA target's first forwards of a new shape,
  // run eagerly then captured as a graph; a preempted host) are left out unless they come three in a row, so they
  // cannot make wide windows look dear for good (they would never be bought again to be re-measured).
  void observe_verify(int rows, double ms, PassMode mode = PassMode::Greedy);
  // What pricing takes a verify of `rows` rows to cost: a forward with a sampled window from its own table
  // (the target draws sampled rows dearer than argmax rows).
  double verify_ms(int rows, PassMode mode = PassMode::Greedy) const;
  void observe_draft(int streams, int depth, double ms, PassMode mode = PassMode::Greedy);
  // Round time not explained by the verify and drafter tables (host work).
  void observe_overhead(double ms) { overhead_ms_ += options_.cost_rate * (ms - overhead_ms_); }
  // What the tables price a host absorb of `rows` rows at (one call per stream).
  double absorb_ms(int rows) const { return tables_.absorb_ms(rows); }
  // A drafter absorb of `rows` rows took `ms` (moves the call cost when short, the per-row cost when long).
  void observe_absorb(int rows, double ms);
  // The pass cost pricing uses: the mode's table times the average excess of the passes left out of it as outliers.
  double draft_ms(int streams, int depth, PassMode mode = PassMode::Greedy) const;
  // The sampled mode's table (the greedy one's copy until timed or measured).
  const DraftCosts& sampled_draft_table() const { return sampled_.table; }

  // Acceptance by depth pooled over every stream: a new stream starts from it instead of the fixed prior.
  const AcceptanceByDepth& pooled_acceptance() const { return pooled_acceptance_; }
  // Some draft has been verified: the scout's work is done.
  bool drafter_proven() const { return pooled_acceptance_.explored_depth() > 0; }
  const CostTables& tables() const { return tables_; }
  const PricingOptions& options() const { return options_; }
  // Depth decisions that ran the row allocator (the others priced dormant streams to zero from the last one).
  int64_t depth_allocations() const { return depth_allocations_; }
  // scout_vote: whether the verified windows kept enough drafts a vote for the pool to wake dormant streams.
  bool wake_evidence() const {
    return votes_ > 0 && landed_votes_ >= options_.wake_landed_share * votes_;
  }
  // Times group_probe_would_run priced a group round (host work of rounds that draft nothing).
  int64_t group_checks() const { return group_checks_; }
  // Allocator runs exploration_repays made (a closed gate is remembered: rounds of an unexplored drafter make none).
  int64_t gate_allocations() const { return gate_allocations_; }
  double overhead_ms() const { return overhead_ms_; }

 private:
  // What drafting this round costs the stream in absorbs: the call and its window's rows, plus its catch-up spread.
  double activation_ms(const Stream& stream, int cap, std::span<const float> chances) const;
  // What a depth no verify has reached is priced at: [depths] conditionals. Seventh session (lanes8): with a
  // confidence head, the better of the prior and the calibrated confidences, and every pooled depth starts its
  // average there (the 1.2B at 16 streams on the H200, s7A: 1.31x with 64 passes against 0.96x with 7 priced at the
  // prior past the depths its probes reached; lanes_bench --deep-chances prior, removed in lanes17).
  std::vector<double> unexplored_conditionals() const;
  // Chain chances at the better of the pooled acceptance and the calibrated confidences (else the prior): [depth].
  std::vector<float> hopeful_chain(int depth) const;
  // Chain chances for the depth decision: the stream's own acceptance once measured, else the pooled one.
  void depth_chances(const Stream& stream, int cap, std::vector<float>& chances) const;
  RoundCost round_cost(PassMode mode = PassMode::Greedy) const;
  // The scout's one-off before the drafter is proven: its probe, its prompt's absorb, a new shape's capture.
  double scout_one_off_ms(int streams, int cap, int absorb_rows, PassMode mode) const;
  // What the best pooled round (the prior's chances, or every draft landing) saves over `tokens_left` tokens a stream.
  double best_round_gain_ms(int streams, int cap, int tokens_left, bool always_right, PassMode mode) const;
  // The drafts a probe of `cap` asks: scout_depth for the restarted scout's pass (`scouting`, the stream dormant).
  int scout_depth(const Stream& stream, int cap, bool scouting) const;
  // plan_depths where no sampled pass is bought (sampled_too_wide): zero plans, with the full decision's bookkeeping.
  const std::vector<DepthPlan>& closed_gate_plans(std::span<Stream* const> drafting, int pending_rows, PassMode mode);
  // The best round if all `round_streams` streams offered `cap` drafts at the pooled chances (every one landing
  // with `always_right`), next to their pending rows.
  Allocation pooled_round(int round_streams, int cap, bool always_right, PassMode mode) const;
  // After a decision that bought nothing and ran no probe: one stream probes for the pool when the group wait is up.
  // Group probes re-measure the pooled acceptance (what every dormant stream is priced with) on a doubling wait of
  // their own (a decision that buys drafts starts it over), where the round's streams drafting together could pay:
  // at 16 streams on the H200 (s6B) one stream alone could never pay, so after one unlucky scout probe no stream
  // probed again for 255 rounds (lanes7; the per-stream probes alone, lanes_bench --probe alone, removed in lanes17).
  void plan_group_probe(std::span<Stream* const> drafting, std::span<const int> caps, bool bought,
                        std::vector<DepthPlan>& plans);
  // Whether `stream` would be bought drafts at all, next to the round's pending rows, if every one of its `cap`
  // drafts landed (its catch-up absorb included), drafting alongside `alike - 1` streams that offer the same.
  // `always_right` false: at the hopeful chances instead (hopeful_chain).
  bool could_pay(const RowOffer& pending_rows, const Stream& stream, int cap, int alike = 1,
                 bool always_right = true) const;
  // A sampled pass measured at `ratio` times its table: two in a row far above it set the mode's scale at once.
  void observe_sampled_pass(int streams, int depth, double ms);
  void trace_depths(std::span<Stream* const> drafting, std::span<const RowOffer> offers, const Allocation& allocation,
                    int round_streams) const;

  CostTables tables_;
  PricingOptions options_;
  int max_rows_ = 1;
  bool has_confidence_ = false;
  double overhead_ms_ = 0;
  double probe_credit_ms_ = 0;  // time probes may still spend (see PricingOptions::probe_budget)
  bool batched_absorbs_ = false;
  bool graphless_target_ = false;
  double last_probe_ms_ = 0;    // the cost of the last probe priced
  std::vector<int> verify_outliers_;               // [rows] outliers in a row per verify entry
  // Outlier passes in a row over every (streams, depth) entry: passes whose shapes vary round by round (a CUDA
  // drafter's graph per request count and depth) would otherwise never put three in a row on one entry, and a
  // pass that really costs more than the load-time table (sampled scans, a busy device) would never be priced.
  int draft_outliers_in_a_row_ = 0;
  int absorb_outliers_in_a_row_ = 0;  // absorbs in a row far above the table (first sightings' captures)
  double pass_scale_ = 1.0;  // moving average of measured / table over every pass (1 for passes the table took)
  // Sampled passes (mode_of): their own table, outlier run and scale, and the run of passes far above it.
  struct ModePasses {
    DraftCosts table;
    double scale = 1.0;
    int outliers_in_a_row = 0;
    int far_in_a_row = 0;       // passes in a row above kFarRatio x the table
    double far_least = 0;       // the least ratio of that run
  };
  ModePasses sampled_;
  VerifyCosts sampled_verify_;                     // verifies with a sampled window (mode_of)
  std::vector<int> sampled_verify_outliers_;
  double last_plain_round_ms_ = 0;
  double one_off_ms_ = 0;           // moving average of a slow forward's excess over its table entry
  int64_t slow_forwards_seen_ = 0;
  // The last exploration_repays that said no: it says no again for as many streams, no deeper cap, the same mode and
  // absorb rows and no more tokens left, without an allocator run (rounds of an unexplored drafter cost what plain's
  // do).
  struct ClosedGate {
    int streams = -1;
    int cap = -1;
    int absorb_rows = -1;
    PassMode mode = PassMode::Greedy;
    int tokens_left = 0;
  };
  mutable ClosedGate closed_gate_;
  mutable int64_t gate_allocations_ = 0;
  int quiet_decisions_ = 0;         // decisions in a row over dormant streams only that bought nothing
  int group_zero_decisions_ = 0;    // decisions in a row that bought nothing and ran no probe (group probes)
  int group_wait_ = 8;              // decisions before the next group probe (doubling; first wait after a purchase)
  int64_t landed_windows_ = 0;      // verified windows that kept at least one draft (wake_needs_landed)
  double votes_ = 0;                // verified windows, the scout pass's counted as one (scout_vote)
  double landed_votes_ = 0;         // of them, the windows that kept a draft (the scout pass: the share that did)
  int64_t depth_allocations_ = 0;
  mutable int64_t group_checks_ = 0;
  // plan_depths' scratch, kept between decisions (a decision that buys nothing allocates nothing).
  std::vector<RowOffer> offers_;
  std::vector<char> offered_;
  std::vector<DepthPlan> plans_;
  ConfidenceCalibration calibration_;
  PooledConfidence pooled_confidence_;
  AcceptanceByDepth pooled_acceptance_;
};

}  // namespace ls
