// Synthetic acceptance (benchmarks only): a Drafter decorator that runs a real drafter (so its cost stays real) but
// replaces each proposal with a plain run's recorded reply, right per position with a profile's conditional
// probability and deterministically wrong otherwise. Random-weight checkpoints draft nothing useful; this gives
// them a realistic acceptance while verification stays real, so the tokens stay exact.
//
// Each window (a stream's n-th distinct anchor; a repeated anchor is the same window) takes ONE uniform from the
// stream's golden-ratio sequence frac(u_0(seed, stream) + i * 0.618...), window n taking index i = n with each block of
// 8 windows in a keyed random order, and draft k (position p + k) is the recorded token iff u < chain_k =
// prod_{j<=k} q_j, else another token keyed by (seed, stream, p, k). So P(drafts 1..k all right) = chain_k and
// P(k right | k-1 right) = q_k, as with independent draws, but the realized accepted lengths follow the profile with
// low variance: over N windows their mean is off by O(log N / N), not O(1 / sqrt N) (300 full-depth windows at mean
// 5.02: within 1.2 %, where independent draws miss by 2 % half the time), and neighbouring windows are nearly
// uncorrelated (lag-1 -0.11; the golden order alone -0.47).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "draft/drafter.h"
#include "draft/synthetic/acceptance_profile.h"

namespace ls {

struct SyntheticAcceptanceOptions {
  AcceptanceProfile profile;  // depths past profile.depth() use its last q
  uint64_t seed = 0;          // keys the right/wrong draws and the wrong tokens
  int vocab_size = 0;         // wrong tokens are other ids in [0, vocab_size)
};

class SyntheticAcceptanceDrafter final : public Drafter {
 public:
  // `inner` is borrowed and must outlive this decorator; the decorator reports confidences (the profile's chances).
  SyntheticAcceptanceDrafter(Drafter& inner, SyntheticAcceptanceOptions options);

  // The whole sequence (prompt, then the plain reply) stream `stream` is expected to produce; its windows count
  // from 0 again.
  void expect(StreamId stream, std::vector<int32_t> sequence);

  const DraftFacts& facts() const override { return facts_; }
  Status absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) override;
  // One inner pass for all requests; then each answered request's tokens and chances are replaced.
  std::vector<Draft> draft(std::span<const DraftRequest> requests) override;
  void release(StreamId stream) override;
  Status restart(StreamId stream, int64_t position) override;
  Status absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) override;
  Status settle() override { return inner_.settle(); }

  // Requests whose anchor token differed from the record (the record is not this run's: nothing was replaced).
  int64_t record_mismatches() const { return record_mismatches_; }
  // Draft positions past the end of the record (the inner drafter's token was kept).
  int64_t unrecorded_positions() const { return unrecorded_positions_; }

 private:
  Drafter& inner_;
  SyntheticAcceptanceOptions options_;
  DraftFacts facts_;
  // A stream's window counter: the index of its current window and that window's anchor position.
  struct WindowCursor {
    int64_t window = -1;
    int64_t anchor_position = -1;
  };
  // u_n of the window `request` opens or repeats (advances the stream's cursor on a new anchor).
  double window_uniform(const DraftRequest& request);

  std::map<StreamId, std::vector<int32_t>> sequences_;
  std::map<StreamId, WindowCursor> cursors_;
  int64_t record_mismatches_ = 0;
  int64_t unrecorded_positions_ = 0;
};

}  // namespace ls
