// Synthetic acceptance profiles: the mean accepted length of a profile and the constant-q profile of a given mean.
#include "draft/synthetic/acceptance_profile.h"

#include <cmath>
#include <string>

namespace ls {

double AcceptanceProfile::mean_accepted_length() const {
  double mean = 1.0;
  double chain = 1.0;
  for (double q : conditional) {
    chain *= q;
    mean += chain;
  }
  return mean;
}

std::vector<float> AcceptanceProfile::chances() const {
  std::vector<float> chances;
  double chain = 1.0;
  for (double q : conditional) {
    chain *= q;
    chances.push_back(static_cast<float>(chain));
  }
  return chances;
}

Result<AcceptanceProfile> profile_for_mean(double mean, int depth) {
  if (depth < 1)
    return Status(ErrorCode::InvalidArgument, "an acceptance profile needs depth >= 1, got " + std::to_string(depth));
  if (!std::isfinite(mean) || mean < 1.0 || mean > depth + 1.0) {
    return Status(ErrorCode::InvalidArgument, "mean accepted length " + std::to_string(mean) + " is outside [1, " +
                                                  std::to_string(depth + 1) + "] for " + std::to_string(depth) +
                                                  " drafts (the bonus token counts)");
  }
  // The mean grows monotonically with q: bisect q in [0, 1] to double precision.
  AcceptanceProfile profile;
  double low = 0.0, high = 1.0;
  for (int step = 0; step < 200; ++step) {
    const double q = 0.5 * (low + high);
    profile.conditional.assign(depth, q);
    (profile.mean_accepted_length() < mean ? low : high) = q;
  }
  profile.conditional.assign(depth, 0.5 * (low + high));
  return profile;
}

}  // namespace ls
