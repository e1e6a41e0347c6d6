// Measured costs the pricing rests on: verify forward ms by total rows, drafter pass ms by (streams, depth).
// Both tables are monotone (more rows, streams or depth never cost less), timed at load and corrected online.
#pragma once

#include <span>
#include <vector>

namespace ls {

struct TimedPoint {
  int rows = 0;      // verify: total rows; draft: streams
  int depth = 0;     // draft only
  double ms = 0;
};

class VerifyCosts {
 public:
  // Fills rows 1 .. max_rows from timed points by linear interpolation (and extrapolation past the ends).
  void init(int max_rows, std::span<const TimedPoint> timed);
  double ms(int rows) const;
  // Moves the entry for `rows` toward a measured time; a faster one lowers the entries below it too. The table
  // read is the running maximum, so a slow measurement makes wider rows dear only until its own row is measured
  // fast again (it does not stick to rows that, looking dear, would never be bought to be re-measured).
  void observe(int rows, double measured_ms, double rate);
  int max_rows() const { return static_cast<int>(ms_.size()) - 1; }
  bool empty() const { return ms_.empty(); }

 private:
  void refresh();
  std::vector<double> measured_;  // [max_rows + 1] each entry's own estimate
  std::vector<double> ms_;        // [max_rows + 1] running maximum of measured_, ms_[0] = 0
};

class DraftCosts {
 public:
  // Fills (streams 1 .. max_streams) x (depth 1 .. max_depth) from a timed grid (every stream count timed at
  // every depth) by bilinear interpolation, clamped to at least the nearest timed value.
  void init(int max_streams, int max_depth, std::span<const TimedPoint> timed);
  double ms(int streams, int depth) const;  // 0 when streams or depth is 0
  void observe(int streams, int depth, double measured_ms, double rate);
  int max_streams() const { return max_streams_; }
  bool empty() const { return ms_.empty(); }
  int max_depth() const { return max_depth_; }

 private:
  size_t index(int streams, int depth) const { return static_cast<size_t>(streams - 1) * max_depth_ + (depth - 1); }
  double& at(int streams, int depth) { return measured_[index(streams, depth)]; }
  double at(int streams, int depth) const { return ms_[index(streams, depth)]; }
  // ms_ = the running maximum of measured_ over fewer-or-equal streams and depths (as VerifyCosts).
  void refresh();
  int max_streams_ = 0;
  int max_depth_ = 0;
  std::vector<double> measured_;  // [max_streams, max_depth] each entry's own estimate
  std::vector<double> ms_;        // [max_streams, max_depth] monotone view
};

// The drafter taking kept rows' taps costs a fixed part per call (one per drafting stream per round) plus a part
// per row; a catch-up of a long backlog (a whole prompt) is mostly the per-row part.
struct CostTables {
  VerifyCosts verify;
  DraftCosts draft;               // empty without a drafter; the pass alone, absorbs not included
  DraftCosts sampled_draft;       // the same with sampled requests (empty unless timed: sampled_passes)
  VerifyCosts sampled_verify;     // verify with sampled windows (empty unless timed: sampled_passes)
  double absorb_call_ms = 0;      // one absorb call
  double absorb_ms_per_row = 0;   // each row of an absorb on top of the call
  double absorb_ms(int rows) const { return rows > 0 ? absorb_call_ms + absorb_ms_per_row * rows : 0.0; }
};

// Linear interpolation through sorted (x, y) knots, extrapolating with the end slopes, never below zero.
double interpolate(std::span<const double> xs, std::span<const double> ys, double x);

}  // namespace ls
