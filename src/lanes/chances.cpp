// Acceptance-by-depth moving averages and confidence calibration.
#include "lanes/chances.h"

#include <algorithm>

namespace ls {

std::vector<double> default_depth_prior() {
  return {0.85, 0.75, 0.70, 0.65, 0.60, 0.55, 0.50, 0.50, 0.50, 0.50, 0.50, 0.50, 0.50, 0.50, 0.50, 0.50};
}

void AcceptanceByDepth::reset(std::span<const double> prior) {
  conditional_.assign(prior.begin(), prior.end());
  observations_.assign(prior.size(), 0);
}

void AcceptanceByDepth::observe(int proposed, int accepted, double rate) {
  const int depths = std::min<int>(proposed, static_cast<int>(conditional_.size()));
  for (int depth_index = 0; depth_index < depths; ++depth_index) {
    if (accepted < depth_index) break;  // draft depth_index + 1 was never reached
    const double landed = accepted > depth_index ? 1.0 : 0.0;
    ++observations_[depth_index];
    conditional_[depth_index] += rate * (landed - conditional_[depth_index]);
  }
}

int AcceptanceByDepth::explored_depth() const {
  int depth = 0;
  while (depth < static_cast<int>(observations_.size()) && observations_[depth] > 0) ++depth;
  return depth;
}

int AcceptanceByDepth::observations(int depth_index) const {
  if (depth_index < 0 || depth_index >= static_cast<int>(observations_.size())) return 0;
  return observations_[depth_index];
}

void AcceptanceByDepth::seed_unobserved(std::span<const double> conditionals) {
  const size_t depths = std::min(conditionals.size(), conditional_.size());
  for (size_t index = 0; index < depths; ++index) {
    if (observations_[index] == 0) conditional_[index] = std::clamp(conditionals[index], 0.0, 1.0);
  }
}

double AcceptanceByDepth::conditional(int depth_index) const {
  if (conditional_.empty()) return 0.0;
  return conditional_[std::min<size_t>(depth_index, conditional_.size() - 1)];
}

std::vector<float> AcceptanceByDepth::chain(int depth) const {
  std::vector<float> chances(std::max(depth, 0));
  double product = 1.0;
  for (int depth_index = 0; depth_index < depth; ++depth_index) {
    product *= conditional(depth_index);
    chances[depth_index] = static_cast<float>(product);
  }
  return chances;
}

std::vector<double> conditional_from_chain(std::span<const float> chances) {
  std::vector<double> conditional(chances.size());
  double previous = 1.0;
  for (size_t index = 0; index < chances.size(); ++index) {
    const double chance = std::clamp(static_cast<double>(chances[index]), 0.0, 1.0);
    conditional[index] = previous > 0 ? std::min(1.0, chance / previous) : 0.0;
    previous = chance;
  }
  return conditional;
}

ConfidenceCalibration::ConfidenceCalibration(int max_depth)
    : predicted_(std::max(max_depth, 1), 0.5), observed_(std::max(max_depth, 1), 0.5), outcomes_(std::max(max_depth, 1), 0) {}

double ConfidenceCalibration::scale(int depth_index) const {
  int bin = std::min<int>(std::max(depth_index, 0), static_cast<int>(predicted_.size()) - 1);
  while (bin > 0 && outcomes_[bin] == 0) --bin;
  if (outcomes_[bin] == 0) return 1.0;
  return std::clamp(observed_[bin] / std::max(predicted_[bin], 1e-6), 0.1, 10.0);
}

void PooledConfidence::observe(std::span<const float> raw_chances, double rate) {
  const std::vector<double> conditional = conditional_from_chain(raw_chances);
  for (size_t index = 0; index < conditional.size(); ++index) {
    if (index >= conditional_.size()) {
      conditional_.push_back(conditional[index]);  // the first draft this deep starts the average
    } else {
      conditional_[index] += rate * (conditional[index] - conditional_[index]);
    }
  }
}

std::vector<double> PooledConfidence::calibrated(const ConfidenceCalibration& calibration) const {
  std::vector<double> result(conditional_.size());
  for (size_t index = 0; index < result.size(); ++index) {
    result[index] = std::min(1.0, conditional_[index] * calibration.scale(static_cast<int>(index)));
  }
  return result;
}

std::vector<float> ConfidenceCalibration::calibrate(std::span<const float> raw_chances) const {
  std::vector<double> conditional = conditional_from_chain(raw_chances);
  std::vector<float> calibrated(raw_chances.size());
  double product = 1.0;
  for (size_t index = 0; index < conditional.size(); ++index) {
    const size_t bin = std::min(index, predicted_.size() - 1);
    const double scale = std::clamp(observed_[bin] / std::max(predicted_[bin], 1e-6), 0.1, 10.0);
    product *= std::min(1.0, conditional[index] * scale);
    calibrated[index] = static_cast<float>(product);
  }
  return calibrated;
}

void ConfidenceCalibration::observe(std::span<const float> raw_chances, int accepted, double rate) {
  std::vector<double> conditional = conditional_from_chain(raw_chances);
  for (size_t index = 0; index < conditional.size(); ++index) {
    if (accepted < static_cast<int>(index)) break;
    const size_t bin = std::min(index, predicted_.size() - 1);
    const double step = mean_start_ ? std::max(rate, 1.0 / (outcomes_[bin] + 2)) : rate;
    predicted_[bin] += step * (conditional[index] - predicted_[bin]);
    observed_[bin] += step * ((accepted > static_cast<int>(index) ? 1.0 : 0.0) - observed_[bin]);
    ++outcomes_[bin];
  }
}

}  // namespace ls
