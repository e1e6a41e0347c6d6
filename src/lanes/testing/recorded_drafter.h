// A drafter for any target that proposes from recorded replies (a plain run's tokens), right at a controllable
// rate: it exercises the lanes against a real model before a trained drafter exists.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "base/clock.h"
#include "draft/drafter.h"

namespace ls {

struct RecordedDrafterOptions {
  std::vector<int> tap_layers = {1};
  int max_depth = 6;
  int vocab_size = 0;          // wrong drafts are (truth + 1) mod vocab_size
  double wrong_rate = 0.2;     // keyed by (stream, position)
  int hidden_size = 0;         // absorb() checks taps hold rows * tap_layers * hidden_size floats when > 0
};

class RecordedDrafter final : public Drafter {
 public:
  explicit RecordedDrafter(RecordedDrafterOptions options);

  // The whole sequence (prompt then reply) stream `stream` will produce.
  void expect(StreamId stream, std::vector<int32_t> sequence);

  const DraftFacts& facts() const override { return facts_; }
  Status absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) override;
  std::vector<Draft> draft(std::span<const DraftRequest> requests) override;
  void release(StreamId stream) override;
  // Its proposals come from the record, not the context: skipping positions costs it nothing.
  Status restart(StreamId stream, int64_t position) override;

  int64_t passes() const { return passes_; }
  int64_t absorbs() const { return absorbs_; }
  const std::map<StreamId, int>& release_counts() const { return release_counts_; }

 private:
  RecordedDrafterOptions options_;
  DraftFacts facts_;
  std::map<StreamId, std::vector<int32_t>> sequences_;
  std::map<StreamId, int64_t> held_rows_;  // context rows absorbed per stream
  std::map<StreamId, int> release_counts_;
  int64_t passes_ = 0;
  int64_t absorbs_ = 0;
};

}  // namespace ls
