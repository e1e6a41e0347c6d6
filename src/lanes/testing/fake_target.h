// A host-only fake target for lane tests: the next token depends on the whole history (a rolling hash), so any
// rollback or position mistake changes the output. It checks positions, poisons dropped rows and counts releases.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "base/clock.h"
#include "model/target.h"

namespace ls {

inline constexpr uint64_t kPoisonedRow = 0xdead;

struct FakeModelShape {
  int vocab_size = 64;
  int hidden_size = 4;   // taps carry [token, position, history hash low 24 bits, layer] in the first four
  int num_layers = 4;
  uint64_t salt = 0x5eed;
  float peak = 5.0f;     // logit bonus of the history's favourite token: sampling is meaningful but not uniform
};

// The rolling hash of a history after one more token; the empty history hashes to the shape's salt.
uint64_t fake_history_hash(const FakeModelShape& shape, uint64_t previous, int32_t token);
// Logits [vocab] after a history whose hash is `history_hash`.
void fake_logits(const FakeModelShape& shape, uint64_t history_hash, std::span<float> out);

struct FakeTargetOptions {
  FakeModelShape shape;
  int max_rows = 64;
  int exact_width = 16;
  int eos_token_id = -1;
  FixedClock* clock = nullptr;  // when set, each forward advances it by verify_fixed_ms + verify_row_ms * rows
  double verify_fixed_ms = 10.0;
  double verify_row_ms = 0.5;
  int fail_forward_at = -1;     // planted fault: the n-th forward (0-based) fails with Internal
};

class FakeTarget final : public Target {
 public:
  explicit FakeTarget(FakeTargetOptions options);

  const TargetFacts& facts() const override { return facts_; }
  Status set_taps(std::span<const int> layers) override;
  Result<Verified> forward(std::span<const Window> windows) override;
  Status commit(StreamId stream, int kept) override;
  int64_t committed_length(StreamId stream) const override;
  void release(StreamId stream) override;
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override;
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override;

  int64_t forwards() const { return forwards_; }
  int64_t rows() const { return rows_; }
  // Times release() was called for a stream that ever ran a forward (0 = never).
  int releases(StreamId stream) const;
  // Streams holding state now.
  size_t open_streams() const { return streams_.size(); }
  // Windows seen, by drawn rows (a verify window of k drafts draws k + 1 rows; a prompt window draws 1).
  const std::map<int, int64_t>& windows_by_drawn_rows() const { return windows_by_drawn_rows_; }
  // Every stream that ever held state, with its release count.
  const std::map<StreamId, int>& release_counts() const { return release_counts_; }

 private:
  struct StreamState {
    std::vector<int32_t> tokens;   // [positions] committed then tentative
    std::vector<uint64_t> hashes;  // [positions] history hash after each position; kPoisonedRow once dropped
    int64_t committed = 0;
    int tentative_rows = -1;       // rows of the last window until it is committed; -1 = none
  };

  FakeTargetOptions options_;
  TargetFacts facts_;
  std::vector<int> tap_layers_;
  std::map<StreamId, StreamState> streams_;
  std::map<StreamId, int> release_counts_;
  std::map<int, int64_t> windows_by_drawn_rows_;
  int64_t forwards_ = 0;
  int64_t rows_ = 0;
};

}  // namespace ls
