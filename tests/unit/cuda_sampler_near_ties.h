// Near-tie rows for the sampler tests: flat 65536-token rows tuned so that the CPU's top-p cut (one-by-one sums)
// sits within a hair of its target, with the key's favourite id on the boundary rank. The GPU's tree sums cannot
// decide such cuts inside their error bound, so its bounded path must fall back to the one-by-one sums.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "compute/sampling.h"

namespace ls::near_ties {

// A float's position in the ordering of floats (for bisecting over adjacent floats).
inline uint32_t float_rank(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline float rank_float(uint32_t r) { return std::bit_cast<float>((r & 0x80000000u) ? (r & 0x7fffffffu) : ~r); }

// A row without NaN or top-k whose top-p cut is re-evaluated cheaply while two "tuner" ids below the cut change
// logit: the CPU's sums one by one (surviving_candidates' bits) and the same decision in exact arithmetic.
class TunedRow {
 public:
  TunedRow(std::vector<float> row, const Sampling& sampling, std::vector<int32_t> tuners)
      : row_(std::move(row)), sampling_(sampling), tuners_(std::move(tuners)) {
    max_logit_ = *std::max_element(row_.begin(), row_.end());
    weights_.resize(row_.size());
    for (size_t id = 0; id < row_.size(); ++id) weights_[id] = weight(row_[id]);
    order_.resize(row_.size());
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(),
              [&](int32_t a, int32_t b) { return row_[a] != row_[b] ? row_[a] > row_[b] : a < b; });
    std::erase_if(order_, [&](int32_t id) { return std::find(tuners_.begin(), tuners_.end(), id) != tuners_.end(); });
  }
  // Sets a tuner's logit (it must stay below every other logit, so the prefix order is unchanged).
  void set(int32_t id, float logit) {
    row_[id] = logit;
    weights_[id] = weight(logit);
  }
  // Swaps two non-tuner ids' logits (the order keeps its values; the ids trade places).
  void swap_ids(int32_t a, int32_t b) {
    std::swap(row_[a], row_[b]);
    std::swap(weights_[a], weights_[b]);
    for (int32_t& id : order_) id = id == a ? b : (id == b ? a : id);
  }
  // The CPU's kept count: normaliser in id order, running mass best-first, first mass >= top_p * normaliser.
  int kept() const {
    double total = 0;
    for (double w : weights_) total += w;
    const double target = static_cast<double>(sampling_.top_p) * total;
    double mass = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
      mass += weights_[order_[i]];
      if (mass >= target) return static_cast<int>(i + 1);
    }
    return -1;  // past the tuners: not a row these tests build
  }
  // The same decision with exact sums (Neumaier in long double) and the exact margin |prefix - target| at it.
  int exact_kept(double* margin = nullptr) const {
    const long double total = exact_sum(weights_);
    const long double target = static_cast<long double>(sampling_.top_p) * total;
    long double mass = 0, carry = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
      add(mass, carry, weights_[order_[i]]);
      if (mass + carry >= target) {
        const long double before = (mass + carry) - weights_[order_[i]];
        if (margin) *margin = static_cast<double>(std::min(mass + carry - target, target - before));
        return static_cast<int>(i + 1);
      }
    }
    return -1;
  }
  // How close the CPU's decision is: min(mass at the cut - target, target - mass before it), one-by-one sums.
  double seq_margin() const {
    double total = 0;
    for (double w : weights_) total += w;
    const double target = static_cast<double>(sampling_.top_p) * total;
    double mass = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
      const double before = mass;
      mass += weights_[order_[i]];
      if (mass >= target) return std::min(mass - target, target - before);
    }
    return -1;
  }
  double total() const { return exact_sum(weights_); }
  int32_t at_rank(int rank) const { return order_[rank]; }
  const std::vector<float>& row() const { return row_; }
  float max_logit() const { return max_logit_; }

 private:
  double weight(float logit) const {
    return std::exp((static_cast<double>(logit) - max_logit_) / static_cast<double>(sampling_.temperature));
  }
  static void add(long double& sum, long double& carry, long double x) {
    const long double t = sum + x;
    carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
  }
  static long double exact_sum(const std::vector<double>& values) {
    long double sum = 0, carry = 0;
    for (double v : values) add(sum, carry, v);
    return sum + carry;
  }
  std::vector<float> row_;
  Sampling sampling_;
  std::vector<int32_t> tuners_;
  float max_logit_ = 0;
  std::vector<double> weights_;
  std::vector<int32_t> order_;
};

// The last float in [lo, hi] (ascending) where `pred` is false, given pred(lo) false and pred(hi) true.
template <typename Pred>
float last_false(float lo, float hi, const Pred& pred) {
  uint32_t a = float_rank(lo), b = float_rank(hi);
  while (b - a > 1) {
    const uint32_t mid = a + (b - a) / 2;
    (pred(rank_float(mid)) ? b : a) = mid;
  }
  return rank_float(a);
}

// One near-tie setting: the rows and what the CPU (and exact arithmetic) make of them.
struct NearTie {
  std::vector<float> just_cut;   // one-by-one sums cut the favourite by a hair (kept K)
  std::vector<float> just_kept;  // one float step of the fine tuner later: kept K + 1, the favourite drawn
  std::vector<float> split;      // one-by-one and exact sums disagree here, by a margin a tree sum resolves
  bool split_ok = false;         // a split row was found (exact and one-by-one switch points far enough apart)
  int32_t favourite = -1;
  int boundary = -1;             // 0-based rank of the favourite (K)
  double seq_gap_cut = 0, seq_gap_kept = 0, split_margin = 0, total = 0;
  int split_seq_kept = 0, split_exact_kept = 0;
};

// Builds a near tie from `base` (flat, no NaN) for `sampling` (top-p only) and the key's `favourite` id; false when
// this row does not lend itself (the caller tries the next seed).
inline bool build_near_tie(const std::vector<float>& base, const Sampling& sampling, int32_t favourite, NearTie& out) {
  TunedRow probe(base, sampling, {});
  const int k0 = probe.kept();
  if (k0 < 0 || k0 + 20 >= static_cast<int>(base.size())) return false;
  const int32_t coarse = probe.at_rank(k0 + 5), fine = probe.at_rank(k0 + 10);
  if (favourite == coarse || favourite == fine) return false;
  TunedRow row(base, sampling, {coarse, fine});
  const float t = sampling.temperature, top = row.max_logit();
  const float far = top - 40.0f * t, fine_mid = top - 13.8f * t;
  row.set(fine, fine_mid);
  // Coarse: the coarse tuner's logit where the cut first reaches K + 1.
  const int low_kept = (row.set(coarse, far), row.kept());
  const int high_kept = (row.set(coarse, base[coarse]), row.kept());
  if (low_kept < 0 || high_kept != low_kept + 1) return false;
  const float coarse_at = last_false(far, base[coarse], [&](float x) { return (row.set(coarse, x), row.kept()) > low_kept; });
  row.set(coarse, std::nextafter(coarse_at, 1e30f));
  const int k = low_kept;
  if (row.kept() != k + 1) return false;
  const int32_t boundary_id = row.at_rank(k);
  if (favourite != boundary_id) row.swap_ids(favourite, boundary_id);
  // Fine: the fine tuner's logit where the one-by-one cut first reaches K + 1, and where the exact one does.
  if ((row.set(fine, far), row.kept()) != k || (row.set(fine, fine_mid), row.kept()) != k + 1) return false;
  const float seq_at = last_false(far, fine_mid, [&](float x) { return (row.set(fine, x), row.kept()) > k; });
  row.set(fine, seq_at);
  out.just_cut = row.row();
  out.seq_gap_cut = row.seq_margin();
  row.set(fine, std::nextafter(seq_at, 1e30f));
  out.just_kept = row.row();
  out.seq_gap_kept = row.seq_margin();
  out.total = row.total();
  out.favourite = favourite;
  out.boundary = k;
  if ((row.set(fine, far), row.exact_kept()) == k && (row.set(fine, fine_mid), row.exact_kept()) == k + 1) {
    const float exact_at = last_false(far, fine_mid, [&](float x) { return (row.set(fine, x), row.exact_kept()) > k; });
    const uint32_t a = float_rank(seq_at), b = float_rank(exact_at);
    const float mid = rank_float(a / 2 + b / 2 + (a & b & 1));
    row.set(fine, mid);
    out.split = row.row();
    out.split_seq_kept = row.kept();
    out.split_exact_kept = row.exact_kept(&out.split_margin);
    out.split_ok = out.split_seq_kept != out.split_exact_kept && out.split_margin > 1e-10;
  }
  return true;
}

}  // namespace ls::near_ties
