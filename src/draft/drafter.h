// The drafter seen from the lanes: absorb the target's tapped rows, then propose blocks of tokens with chances.
//
// Glossary. The anchor is a stream's pending token: produced by the target, not yet run through it, at position
// p. The drafter's context is the taps of positions 0 .. p-1, fed through absorb(). A draft of depth k proposes
// the tokens at positions p+1 .. p+k, each with a chance (estimated probability that it and all before it are
// accepted).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "compute/sampling.h"
#include "model/target.h"

namespace ls {

struct DraftFacts {
  int max_depth = 0;                 // most drafts per stream per pass (DSpark: block_size)
  std::vector<int> tap_layers;       // target layers whose outputs absorb() expects, in order
  int64_t stream_bytes_per_position = 0;  // drafter memory per context position
  bool has_confidence = false;       // chances come from a confidence head (else they are NaN)
  bool restarts = false;             // restart() lets a stream's context skip positions
  int tap_device = -1;               // >= 0: absorb_device() reads taps a target left on this CUDA device
};

// Rows [first_row, first_row + rows) of a DeviceTaps are one stream's taps of positions start .. start + rows - 1.
struct TapRows {
  StreamId stream = 0;
  int64_t start = 0;
  int64_t first_row = 0;
  int rows = 0;
};

struct DraftRequest {
  StreamId stream = 0;
  int32_t anchor_token = 0;
  int64_t anchor_position = 0;  // p; the context must hold exactly positions 0 .. p-1
  int depth = 0;                // 1 .. max_depth
  Sampling sampling;            // sampled requests get keyed picks
};

// Per request: `depth` tokens and chances, or an error (DraftNonfinite: the stream decodes plainly this round).
struct Draft {
  Status status;
  std::vector<int32_t> tokens;  // [depth]
  std::vector<float> chances;   // [depth] cumulative acceptance estimates, non-increasing
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  virtual const DraftFacts& facts() const = 0;
  // Takes the taps of positions start .. start + rows - 1 (`taps` [rows, tap_layers, hidden] fp32).
  // Rows at or past `start` replace what the stream held there, so a rollback reaches the drafter.
  virtual Status absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) = 0;
  // One pass for every request; result i answers request i.
  virtual std::vector<Draft> draft(std::span<const DraftRequest> requests) = 0;
  virtual void release(StreamId stream) = 0;
  // Continues the stream's context at `position` (at or past the positions it holds) without the positions in
  // between: the next absorb starts there, and drafts attend over the rows held, fewer than the positions before
  // the anchor. That costs acceptance, never tokens. Opens the stream if unknown. Drafters whose
  // facts().restarts is false refuse it (InvalidArgument); the lanes then hand over every kept row instead.
  // absorb() for many streams at once, straight from taps on the device (facts().tap_device), no host copy; the
  // same rules per stream. Drafters without tap_device refuse it (InvalidArgument).
  virtual Status absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) {
    (void)rows;
    (void)taps;
    return Status(ErrorCode::InvalidArgument, "this drafter cannot read taps on a device");
  }
  virtual Status restart(StreamId stream, int64_t position) {
    (void)stream;
    (void)position;
    return Status(ErrorCode::InvalidArgument, "this drafter cannot restart a stream's context at a later position");
  }
  // absorb_device() may return while its reads of the target's device taps are still in flight (the CUDA drafter
  // does not wait for its GPU work: the next pass on its stream queues behind it); settle() waits for them. The
  // lanes call it before every target forward (which overwrites those taps); draft() settles too. Default: nothing
  // is ever in flight.
  virtual Status settle() { return ok_status(); }
};

}  // namespace ls
