// A host-only fake target for lane tests: the next token depends on the whole history (a rolling hash), so any
// rollback or position mistake changes the output. It checks positions, poisons dropped rows and counts releases.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "model/target.h"

namespace ls {

inline constexpr uint64_t kPoisonedRow = 0xdead;
// The "device" a fake target's kept taps live on (host fp32 memory standing in for a CUDA device's bf16).
inline constexpr int kFakeTapDevice = 1000;

struct FakeModelShape {
  int vocab_size = 64;
  int hidden_size = 6;   // taps carry [token, position, history hash low 24 bits, layer] in the first four and,
                         // from 6 on, the hash's bits 24-47 and 48-63 (a restarted fake drafter needs them)
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
  // With a clock: each row past the first `verify_wide_from` of a forward costs this much more (a GPU verify is
  // nearly flat up to a tile of rows, then steeper).
  int verify_wide_from = 0;
  double verify_wide_row_ms = 0.0;
  int fail_forward_at = -1;     // planted fault: the n-th forward (0-based) fails with Internal
  bool device_taps = false;     // keep_taps_on_device(true) is granted: taps stay in the target (kFakeTapDevice)
  // With a clock: the first two forwards of each total row count cost this much more (a CUDA target runs a new
  // shape eagerly, then captures its graph; later forwards of the shape replay it).
  double new_shape_ms = 0.0;
  bool shape_by_windows = false;  // a shape is (total rows, windows), as a CUDA target's graph key (else total rows)
  // ... and whether it taps (the CUDA target's key holds its tap count); a forward with a stream's first rows (a
  // prompt) is no shape at all: the CUDA target never captures one, so it costs the same every time (lanes20).
  bool shape_by_taps = false;
  // With a clock: each distinct token id of a forward costs this much more (an MoE target routes each token to its
  // own experts, so a window of distinct tokens reads more expert weights than one of repeated tokens).
  double distinct_token_ms = 0.0;
  double sampled_row_ms = 0.0;    // with a clock: each row of a sampled window costs this much more (its draw)
  bool cpu_pool = false;          // cpu_pool() is a one-thread pool: a target on the CPU (no graphs to capture)
  // A fixed KV pool as the CUDA target's (facts().kv_pages): a stream holds ceil(positions / kv_page_size) pages
  // from its forward until release; a forward that needs more pages than are free fails with OutOfMemory.
  int64_t kv_pages = 0;
  int kv_page_size = 16;
  // Called at the start of every forward (tests: an engine test holds the first round until every request is
  // submitted, so whether requests share a round does not depend on how the threads are scheduled).
  std::function<void()> before_forward{};
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
  bool keep_taps_on_device(bool on) override;
  ThreadPool* cpu_pool() const override { return pool_.get(); }

  // From now on the first two forwards of each total row count cost `ms` more (a count seen twice already does not).
  void set_new_shape_ms(double ms) { options_.new_shape_ms = ms; }
  // Distinct total row counts of the forwards so far.
  size_t shapes_seen() const { return shape_sightings_.size(); }
  int64_t forwards() const { return forwards_; }
  int64_t rows() const { return rows_; }
  // Rows whose taps were returned (windows with want_taps).
  int64_t tap_rows() const { return tap_rows_; }
  // Times release() was called for a stream that ever ran a forward (0 = never).
  int releases(StreamId stream) const;
  // Streams holding state now.
  size_t open_streams() const { return streams_.size(); }
  // FakeTargetOptions::before_forward, set before the forwards it should see (not while another thread forwards).
  void set_before_forward(std::function<void()> hook) { options_.before_forward = std::move(hook); }
  // From now on a fixed pool of `pages` (after Lanes::create: its load-time timing forwards need more room than a
  // small test pool has). Streams already open hold none of it. `advertised` false: facts() does not show it (a
  // control in which the lanes cannot budget for the pool).
  void limit_kv_pages(int64_t pages, int page_size, bool advertised = true);
  // KV pages held now, and the most ever held at once (a fixed pool only).
  int64_t pages_held() const { return pages_held_; }
  int64_t most_pages_held() const { return most_pages_held_; }
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
    int64_t pages = 0;             // KV pages held (a fixed pool only)
  };

  FakeTargetOptions options_;
  TargetFacts facts_;
  std::vector<int> tap_layers_;
  std::map<StreamId, StreamState> streams_;
  std::map<StreamId, int> release_counts_;
  std::map<int, int64_t> windows_by_drawn_rows_;
  bool keep_on_device_ = false;
  std::map<int64_t, int> shape_sightings_;  // keyed by total rows (times 4096 plus windows with shape_by_windows)  // forwards seen per total row count
  std::vector<float> device_taps_;  // [rows, taps, hidden] of the last forward while taps stay "on the device" 
  int64_t forwards_ = 0;
  int64_t rows_ = 0;
  int64_t pages_held_ = 0;
  int64_t most_pages_held_ = 0;
  int64_t tap_rows_ = 0;
  std::unique_ptr<ThreadPool> pool_;  // options.cpu_pool
};

}  // namespace ls
