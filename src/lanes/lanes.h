// The lanes: many streams decoding together; each round verifies every served stream's window in one target
// forward, keeps drafts that equal the target's keyed draws, and drafts for all drafting streams in one pass.
//
// A round: admit (prefill new streams; their taps are kept for the drafter) -> pick (least recently served first,
// within the row budget) -> price (trim held drafts) -> verify (ONE forward) -> accept -> commit (kept rows' taps
// kept for the drafter) -> draft (the drafting streams absorb their kept taps, then ONE drafter pass, depths from
// pricing) -> deliver (events).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "draft/drafter.h"
#include "lanes/calibrate.h"
#include "lanes/kv_budget.h"
#include "lanes/pricing.h"
#include "lanes/stream.h"
#include "model/target.h"

namespace ls {

struct LanesOptions {
  int max_rows = 0;           // rows per verify forward, all windows together; 0 = min(target's max_rows, 128)
  int max_streams = 64;       // streams served per round
  int max_live_streams = 256; // streams admitted (prefilled) at once; more wait in the queue
  int max_draft = 16;         // engine-wide cap on drafts per stream per round
  int exact_width = 0;        // widest window verified; 0 = the target's facts().exact_width
  int measure_width = 0;      // > 0: measure the exact width up to this at setup (model/exact_width.h)
  int prefill_rows = 0;       // rows per prefill forward; 0 = the target's max_rows
  bool device_taps = true;    // keep taps on the target's device when the drafter can absorb them there
  // Until a draft is verified, only the scout (the first drafting stream admitted) taps its prompt; the others start
  // dormant and wake on merit once the scout has proven the drafter. false: every prompt is tapped where the prior
  // says drafting pays (the fifth session's: 8389 rows tapped and absorbed at 64 streams on the H200, for nothing).
  bool scout_prompt_only = true;
  // cpu20 (A/B, off): a stream alone in the lanes on a CPU target never goes dormant: it keeps tapping through rounds
  // that buy nothing (a tap is a copy in the CPU target's layer loop, its absorb ~0.005 ms a row when it drafts
  // again), so its drafter context stays whole instead of restarting past the skipped rows (one missing position cost
  // the nano pair 10-25 % of its kept drafts, six 25-55 %: cpu19's short_block_bench --gaps). lanes_bench --alone-whole.
  bool alone_keeps_context = false;
  PricingOptions pricing;
  CalibrationOptions calibration;  // max_rows, width, max_streams, max_depth are filled in by create()
};

// Totals over the life of the lanes, for tests, metrics and the benchmark.
struct LanesStats {
  int64_t rounds = 0;
  int64_t verify_forwards = 0;
  int64_t prefill_forwards = 0;
  int64_t drafter_passes = 0;
  int64_t drafter_faults = 0;       // per stream: draft errors, non-finite chances, bad picks, absorb errors
  int64_t rows_verified = 0;
  int64_t drafts_verified = 0;
  int64_t drafts_accepted = 0;
  int64_t tokens_generated = 0;
  int64_t windows_verified = 0;
  int64_t windows_with_drafts = 0;
  int64_t tap_rows = 0;             // rows whose taps the lanes asked the target for (prefill and verify)
  int64_t absorb_calls = 0;         // Drafter::absorb calls
  int64_t absorbed_rows = 0;        // rows handed to the drafter
  int64_t drafter_restarts = 0;     // Drafter::restart calls (a dormant stream resuming past the rows it skipped)
  int64_t dormant_entries = 0;      // times a stream went dormant (stopped tapping, dropped its held taps)
  int64_t depth_offers = 0;         // streams handed to depth decisions (Pricing::plan_depths)
  // Time by the lanes' clock: whole rounds (admit included), target forwards (prefill and verify), drafter calls
  // (absorbs, restarts, passes). round_ms - forward_ms - drafter_ms is the lanes' own host work.
  double round_ms = 0;
  double forward_ms = 0;
  double drafter_ms = 0;
  // Where a drafted run's time goes (lanes_bench's phase line). Verify forwards by kind: quiet (no window taps or
  // verifies drafts: plain's forward), tap-only (some window taps, none verifies drafts), with drafts; and slow ones
  // (over 1.5x the verify table for their rows: a CUDA target's first sightings of a shape, eager then captured),
  // with their time above the table. The drafter's time split: passes, absorb calls (restarts included), settles.
  int64_t quiet_forwards = 0;
  double quiet_forward_ms = 0;
  int64_t tap_only_forwards = 0;
  double tap_only_forward_ms = 0;
  int64_t draft_forwards = 0;
  double draft_forward_ms = 0;
  int64_t slow_forwards = 0;
  double slow_forward_excess_ms = 0;
  double pass_ms = 0;
  double absorb_ms = 0;
  double settle_ms = 0;
};

class Lanes {
  struct Key {
    explicit Key() = default;
  };

 public:
  // Checks the pair (DrafterNeedsWideVerify when the exact width is 1, DraftTargetMismatch for taps out of
  // range), declares the taps, and times the cost tables.
  static Result<std::unique_ptr<Lanes>> create(Target& target, Drafter* drafter, const LanesOptions& options,
                                               Clock& clock);

  // Queues a request; it is prefilled at the next round.
  StreamId submit(Request request);
  // Ends a stream now (queued or live): releases it from the target and the drafter; emits a Cancelled event.
  void cancel(StreamId stream);
  // Runs one round. An error from the target fails the streams it touched (they end with Error) and is returned.
  Status round();
  // No stream queued or live.
  bool idle() const { return waiting_.empty() && live_.empty(); }
  // Events since the last call, in order.
  std::vector<StreamEvent> take_events();

  const LanesStats& stats() const { return stats_; }
  const Pricing& pricing() const { return pricing_; }
  int width() const { return width_; }
  int max_rows() const { return max_rows_; }
  size_t live_streams() const { return live_.size(); }
  bool device_taps() const { return device_taps_; }
  int most_drafts() const { return most_drafts_; }
  // The target's KV pool as admission sees it (pages 0: no fixed pool).
  KvBudget kv_budget() const { return KvBudget::of(target_.facts(), width_); }

  // Built by create() only (the key keeps the constructor out of other hands).
  Lanes(Key, Target& target, Drafter* drafter, const LanesOptions& options, Clock& clock, int width, int max_rows);

 private:

  // What the current round did that the measured-loss stop counts (stop_on_measured_loss).
  struct RoundLedger {
    bool drafting = false;   // it verified drafts, absorbed taps or ran a pass
    double slow_excess_ms = 0;  // a slow forward's excess over its table (a new shape's eager run and capture)
  };

  Status admit();
  std::vector<Stream*> pick_streams();
  Result<Verified> verify(std::span<Stream* const> streams, std::vector<std::vector<int32_t>>& windows);
  void accept_and_commit(std::span<Stream* const> streams, const std::vector<std::vector<int32_t>>& windows,
                         const Verified& verified);
  double draft();
  void deliver();

  // Keeps a stream's newly committed rows' taps for the drafter (flushed when it drafts, or when many pile up).
  void hold_taps(Stream& stream, int64_t start, int rows, std::span<const float> taps);
  // Stops drafting for a stream whose drafter context could not follow (still exact: it decodes plainly).
  void drop_drafting(Stream& stream);
  // Gives the drafter the held taps (restarting its context past skipped rows, and up to the stream's committed
  // position); false (and drafting off for the stream) when it refuses them.
  bool flush_taps(Stream& stream);
  // Taps on the device: the kept rows of every tapping stream of a forward go to the drafter in one batched absorb
  // right after it (the taps live until the next forward), restarting contexts past skipped rows first.
  void absorb_on_device(const Verified& verified, std::vector<Stream*>& streams, std::vector<TapRows>& rows);
  // Before a target forward (which overwrites the taps on the device): waits for device absorbs still in flight; a
  // drafter that fails there has lost its contexts' rows, so drafting stops for every stream (still exact).
  void settle_drafter();
  // A stream priced to zero for long enough stops tapping and drops its held taps (drafters that restart only).
  void update_dormancy(Stream& stream, int depth, bool probe);
  // Which picked streams' windows ask for taps: the active drafting ones and the one dormant stream due to probe.
  void choose_tapping(std::span<Stream* const> streams);
  // The dormant scout (several streams, whole contexts not bought) taps the round it probes.
  void tap_restarted_scout(std::span<Stream* const> streams, int round_streams);
  void fail_stream(Stream& stream, const Status& status);
  void release(Stream& stream);
  int draft_cap(const Stream& stream) const;
  // The first `rows` tap rows of window `window` of a forward (empty when the target returned no taps at all).
  std::span<const float> window_taps(const Verified& verified, size_t window, int rows) const;

  Target& target_;
  Drafter* drafter_;
  LanesOptions options_;
  Clock& clock_;
  int width_ = 1;
  int max_rows_ = 1;
  int most_drafts_ = 0;
  bool restarts_ = false;  // the drafter can restart a context past skipped rows: dormant streams cost nothing
  bool device_taps_ = false;  // the target leaves taps on its device and the drafter absorbs them there
  Pricing pricing_;

  StreamId next_id_ = 1;
  int64_t next_admission_ = 0;
  int64_t kv_pages_reserved_ = 0;  // KV pages admitted streams may still need (kv_budget())
  int64_t round_index_ = 0;
  std::deque<std::unique_ptr<Stream>> waiting_;
  std::map<StreamId, std::unique_ptr<Stream>> live_;
  std::vector<StreamEvent> events_;
  LanesStats stats_;
  RoundLedger ledger_;
  std::vector<Stream*> drafting_;  // draft()'s scratch: the streams handed to the depth decision, and their caps
  std::vector<int> caps_;
};

}  // namespace ls
