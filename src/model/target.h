// The target model seen from the lanes: windows of rows in, per-row draws / logits / taps out, commit to keep rows.
//
// Glossary. A stream is one request's sequence. Its committed length n is the number of positions the model
// holds state for (KV cache, conv state). A window is a stream's next rows: tokens at positions n, n+1, ...
// forward() runs every window in one pass and holds their state tentatively; commit(stream, kept) keeps the
// first `kept` rows (1 <= kept <= rows) and restores the state exactly to after the last kept row. Every
// window must be committed before that stream's next forward. A draw at row r (position n + r) is the target's
// keyed choice for the token at position n + r + 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "compute/sampling.h"

namespace ls {

class ThreadPool;

using StreamId = uint64_t;

struct Window {
  StreamId stream = 0;
  std::span<const int32_t> tokens;  // [rows] at positions committed_length(stream) + 0 .. rows-1
  Sampling sampling;                // how each drawn row draws
  int first_drawn_row = 0;          // rows before this one are not drawn (prompt rows); draws[r] = -1 there
  bool want_logits = false;         // copy the drawn rows' fp32 logits out
  int64_t start_position = -1;      // when >= 0, the caller's idea of row 0's position (a target may check it)
  bool want_taps = true;            // false: the caller needs no taps of these rows (a target may skip them)
};

// Taps a target left in its device memory (keep_taps_on_device): the last forward's rows [rows, row_values] bf16,
// indexed like Verified::row_begin. Valid until the next forward(); only a drafter on the same device reads them.
struct DeviceTaps {
  const void* data = nullptr;  // device pointer, bf16
  int device = -1;             // CUDA device ordinal
  int64_t rows = 0;
  int64_t row_values = 0;      // tap_layers * hidden
};

// What forward() returns; rows are concatenated in window order, window w owns rows [row_begin[w], row_begin[w+1]).
struct Verified {
  std::vector<int64_t> row_begin;  // [windows + 1]
  std::vector<int32_t> draws;      // [rows] token drawn after each row, -1 for undrawn rows
  std::vector<float> logits;       // [rows, vocab] fp32 when any window asked for them (other rows NaN)
  // [tap rows, tap_layers, hidden] fp32: output of each tap layer before the final norm. Window w's taps are rows
  // [tap_row_begin[w], tap_row_begin[w+1]) (its rows in order, or none); a target may tap windows that did not want
  // taps, never skip one that did. tap_row_begin empty: every row is tapped (tap rows = rows, as row_begin).
  std::vector<float> taps;
  std::vector<int64_t> tap_row_begin;  // [windows + 1] or empty
  DeviceTaps device_taps;              // set instead of `taps` while the target keeps taps on its device
};

struct TargetFacts {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int max_rows = 0;           // most rows one forward accepts (all windows together)
  int exact_width = 1;        // widest window whose rows equal one-row steps bit for bit (measured at load)
  int eos_token_id = -1;
  // A fixed KV pool (the CUDA target): kv_pages pages of kv_page_size positions, shared by every stream; a stream of
  // n positions holds ceil(n / kv_page_size) of them. 0: the cache grows as needed (the CPU target).
  int64_t kv_pages = 0;
  int kv_page_size = 0;
};

class Target {
 public:
  virtual ~Target() = default;

  virtual const TargetFacts& facts() const = 0;
  // Declares the layers whose outputs forward() returns as taps; called before the first forward.
  virtual Status set_taps(std::span<const int> layers) = 0;
  // Runs every window in one pass. A stream seen for the first time starts empty (committed length 0).
  virtual Result<Verified> forward(std::span<const Window> windows) = 0;
  // Keeps the first `kept` rows of the stream's last window.
  virtual Status commit(StreamId stream, int kept) = 0;
  virtual int64_t committed_length(StreamId stream) const = 0;
  // Frees everything the stream holds; releasing an unknown stream is a no-op.
  virtual void release(StreamId stream) = 0;
  // The tied embedding / head the drafter shares: rows of E [vocab, hidden] as fp32, and logits = h @ E^T.
  virtual Status embed(std::span<const int32_t> tokens, std::span<float> out) const = 0;       // out [n, hidden]
  virtual Status head(std::span<const float> hidden, int rows, std::span<float> out) const = 0;  // out [rows, vocab]
  // CUDA targets: the tied embedding [vocab, hidden] bf16 in device memory, so a drafter on the same device shares
  // it; null on the CPU.
  virtual const void* device_embedding() const { return nullptr; }
  // Asks the target to leave every row's taps on its device (Verified::device_taps, `taps` empty) instead of copying
  // them to the host; returns whether it will. Off again with false.
  virtual bool keep_taps_on_device(bool on) { return !on; }
  // CPU targets: the thread pool their forwards run on, which a CPU drafter of the same thread count shares (the
  // lanes never run a forward and a drafter call at once), so two idle pools do not spin against each other; null
  // elsewhere.
  virtual ThreadPool* cpu_pool() const { return nullptr; }
};

}  // namespace ls
