// Synthetic acceptance (benchmarks only): a Drafter decorator that runs a real drafter (so its cost stays real) but
// replaces each proposal with a plain run's recorded reply, right per position with a profile's conditional
// probability and deterministically wrong otherwise. Random-weight checkpoints draft nothing useful; this gives
// them a realistic acceptance while verification stays real, so the tokens stay exact.
//
// For a request with anchor position p, draft k (k = 1..depth, position p + k) is the recorded token at p + k when
// u(seed, stream, p, k) < q_k, else another token (keyed by the same counter). Draws are independent per position,
// so P(drafts 1..k all right) = prod_{j<=k} q_j; the chances reported are exactly those products.
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

  // The whole sequence (prompt, then the plain reply) stream `stream` is expected to produce.
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
  std::map<StreamId, std::vector<int32_t>> sequences_;
  int64_t record_mismatches_ = 0;
  int64_t unrecorded_positions_ = 0;
};

}  // namespace ls
