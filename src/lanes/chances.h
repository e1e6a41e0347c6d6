// Chances that drafts land: per-stream acceptance by depth, calibrated drafter confidences, and probe backoff.
//
// Glossary. A chain chance is cumulative: chance[j] = P(drafts 1 .. j+1 all land). A conditional acceptance
// p[j] = P(draft j+1 lands | drafts 1 .. j landed), so chance[j] = p[0] * ... * p[j].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ls {

// The default acceptance prior by depth until a stream has measured its own (TensorFold's).
std::vector<double> default_depth_prior();

// One stream's measured conditional acceptance by depth, moved by an exponential moving average.
class AcceptanceByDepth {
 public:
  void reset(std::span<const double> prior);
  // A round offered `proposed` drafts and `accepted` of them landed (a prefix).
  void observe(int proposed, int accepted, double rate);
  // Leading depths with at least one observation: drafting deeper than this (+ a step) is exploration.
  int explored_depth() const;
  // Chain chances of the first `depth` drafts: [depth] non-increasing.
  std::vector<float> chain(int depth) const;
  double conditional(int depth_index) const;
  std::span<const double> conditionals() const { return conditional_; }
  // Outcomes seen at a depth (0 past the table).
  int observations(int depth_index) const;
  // Depths never observed take `conditionals` [depths] instead of what they held (the prior): a drafter's calibrated
  // confidences are a better start there than a fixed prior (Pricing::unexplored_conditionals).
  void seed_unobserved(std::span<const double> conditionals);

 private:
  std::vector<double> conditional_;  // [depths] p[j]
  std::vector<int> observations_;    // [depths] outcomes seen at each depth
};

// Maps a drafter's raw per-position confidences to calibrated chain chances, learned over all streams.
class ConfidenceCalibration {
 public:
  explicit ConfidenceCalibration(int max_depth = 16);
  // Raw chain chances [k] -> calibrated chain chances [k] (products of calibrated conditional confidences).
  std::vector<float> calibrate(std::span<const float> raw_chances) const;
  // A round verified drafts whose raw chain chances were `raw_chances` [proposed]; `accepted` landed.
  void observe(std::span<const float> raw_chances, int accepted, double rate);
  // observed / predicted at a depth, clamped to [0.1, 10]; a depth never verified takes the deepest verified one's
  // (1 before any).
  double scale(int depth_index) const;
  // cpu20 (A/B, off): a depth's first outcomes move the estimate as a running mean that counts the start (0.5 / 0.5)
  // as one outcome (rate 1/(n+2) until it falls to `rate`), not at `rate` from the first.
  void set_mean_start(bool on) { mean_start_ = on; }

 private:
  bool mean_start_ = false;
  std::vector<double> predicted_;  // [depths] moving average of the raw conditional confidence
  std::vector<double> observed_;   // [depths] moving average of the outcome (1 landed, 0 not)
  std::vector<int> outcomes_;      // [depths] outcomes seen
};

// The drafter's raw conditional confidences by depth, a moving average over every draft it made (trimmed ones too):
// what it believes about depths no verify has reached yet.
class PooledConfidence {
 public:
  void observe(std::span<const float> raw_chances, double rate);
  // [depths] calibrated conditionals (raw average x the calibration's scale); empty before any draft.
  std::vector<double> calibrated(const ConfidenceCalibration& calibration) const;

 private:
  std::vector<double> conditional_;  // [depths] moving average of the raw conditional confidence
};

// Raw chain chances -> conditional confidences: c[0] = chance[0], c[j] = chance[j] / chance[j-1] (0 after a 0).
std::vector<double> conditional_from_chain(std::span<const float> chances);

// When a stream priced to zero drafts probes again: after `wait` zero rounds, doubling up to a cap.
struct ProbeBackoff {
  int zero_rounds = 0;     // consecutive draft decisions that gave this stream no drafts
  int wait = 0;            // zero rounds before the next probe (0 = not started: the first wait applies)
  int drafted_rounds = 0;  // decisions that gave it drafts, for the periodic deeper probe
  bool scouted = false;    // its first zero decision while nothing was known about the drafter probed at once
};

}  // namespace ls
