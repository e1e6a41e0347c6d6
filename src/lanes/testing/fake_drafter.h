// A host-only fake drafter: rebuilds each stream's history from the fake target's taps (which carry token ids) and
// proposes the target's true continuation, wrong at a controllable rate, with optional confidences, planted
// faults and counters.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "draft/drafter.h"
#include "lanes/testing/fake_target.h"

namespace ls {

enum class FakeDraftFault {
  None,
  NonfiniteChance,  // a NaN chance (needs confidences)
  InfiniteChance,   // an Inf chance (needs confidences)
  OutOfRangePick,   // a token id past the vocabulary
  DraftError,       // the request answers DraftNonfinite
  AbsorbError,      // absorb() fails
};

struct FakeDrafterOptions {
  FakeModelShape shape;               // must match the target's
  std::vector<int> tap_layers = {1, 3};
  int max_depth = 8;
  double wrong_rate = 0.2;            // chance a draft is wrong, keyed by history and depth (0 = always right)
  int hopeless_from = -1;             // depth index from which every draft is wrong (and, with confidences, says so)
  bool confidences = false;           // report chances (else they are NaN)
  double reported_wrong_rate = -1;    // >= 0: the chances report this rate, not wrong_rate (an underconfident head)
  FixedClock* clock = nullptr;        // when set, each pass advances it by fixed + per_row * streams * deepest
  double draft_fixed_ms = 2.0;
  double draft_row_ms = 0.2;
  int short_block_depth = 0;          // > 0: passes of at most this depth cost half the fixed part (a short block)
  double sampled_pass_factor = 1.0;   // a pass with any sampled request costs this many times as much
  double absorb_call_ms = 0.0;        // with a clock, each absorb advances it by call + row * rows
  double absorb_row_ms = 0.0;
  bool restarts = true;               // restart() allowed (facts().restarts); needs shape.hidden_size >= 6
  double restarted_wrong_rate = -1;   // >= 0: a stream's drafts after a restart are wrong at this rate (a context
                                      // without the rows it skipped drafts worse; confidences still say wrong_rate)
  int lucky_restarted_passes = 0;     // every draft of the first n passes over a restarted context is right (a
                                      // lucky probe there, whatever the rates)
  std::vector<StreamId> right_streams{};  // these streams' drafts are always right, whatever their context (a drafter
                                      // that pays for one stream of a group and not the others)
  bool device_taps = false;           // absorb_device() reads a fake target's kept taps (kFakeTapDevice)
  bool absorb_in_flight = false;      // absorb_device() reads them only at settle() or the next draft(), as the CUDA
                                      // drafter's GPU work runs after it returns
  FakeDraftFault fault = FakeDraftFault::None;
  int fault_every = 0;                // the fault hits every n-th draft request (or absorb call); 0 = never
};

class FakeDrafter final : public Drafter {
 public:
  explicit FakeDrafter(FakeDrafterOptions options);

  const DraftFacts& facts() const override { return facts_; }
  Status absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) override;
  std::vector<Draft> draft(std::span<const DraftRequest> requests) override;
  void release(StreamId stream) override;
  // Skips to `position`: the first row absorbed there restores the history hash from its taps; a draft anchored
  // right after a skip (no row absorbed since) knows no history and proposes blind, wrong tokens.
  Status restart(StreamId stream, int64_t position) override;
  // One call for every stream's rows (each as absorb() would take them); clocked as one call.
  Status absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) override;
  // Reads the taps of the absorb_device() calls still in flight (absorb_in_flight).
  Status settle() override;

  int64_t absorbs() const { return absorbs_; }
  int64_t settles() const { return settles_; }
  int64_t absorbed_rows() const { return absorbed_rows_; }
  int64_t device_absorbs() const { return device_absorbs_; }
  int64_t restarts() const { return restarts_; }
  // Every draft of the next `passes` passes is wrong (an unlucky first probe, whatever the wrong rate).
  void force_wrong_passes(int passes) { forced_wrong_passes_ = passes; }
  int64_t passes() const { return passes_; }
  int64_t requests() const { return requests_; }
  int64_t widest_pass() const { return widest_pass_; }
  int64_t faults_planted() const { return faults_planted_; }
  int64_t drafts_proposed() const { return drafts_proposed_; }
  // Release calls per stream that was ever absorbed (a second release counts as 2).
  const std::map<StreamId, int>& release_counts() const { return release_counts_; }
  size_t open_streams() const { return histories_.size(); }
  // Passes whose deepest request was `depth`.
  const std::map<int, int64_t>& passes_by_depth() const { return passes_by_depth_; }

 private:
  struct History {
    std::vector<int32_t> tokens;   // [positions]
    std::vector<uint64_t> hashes;  // [positions] history hash after each position
  };
  Draft draft_one(const DraftRequest& request, bool faulty);
  // The rows of one absorb: checked against the history they extend, appended.
  Status absorb_rows(StreamId stream, int64_t start, int rows, std::span<const float> taps);

  // The rows of one absorb_device() call, read from the target's kept taps.
  Status read_device_rows(std::span<const TapRows> rows, const DeviceTaps& taps);

  FakeDrafterOptions options_;
  DraftFacts facts_;
  std::vector<std::pair<std::vector<TapRows>, DeviceTaps>> in_flight_;  // absorb_device() calls not yet read
  int64_t settles_ = 0;
  std::map<StreamId, History> histories_;
  std::map<StreamId, int64_t> restarted_;  // streams whose context restarted, and where (restarted_wrong_rate)
  std::map<StreamId, int> release_counts_;
  std::map<int, int64_t> passes_by_depth_;
  int64_t absorbs_ = 0;
  int64_t absorbed_rows_ = 0;
  int64_t device_absorbs_ = 0;
  int64_t restarts_ = 0;
  int64_t passes_ = 0;
  int forced_wrong_passes_ = 0;  // passes still to come whose drafts are all wrong
  bool pass_wrong_ = false;      // the pass being answered is one of them
  int64_t restarted_passes_ = 0;  // passes with a request over a restarted context (lucky_restarted_passes)
  bool pass_right_ = false;       // the pass being answered is a lucky one
  int64_t requests_ = 0;
  int64_t widest_pass_ = 0;
  int64_t faults_planted_ = 0;
  int64_t drafts_proposed_ = 0;
};

}  // namespace ls
