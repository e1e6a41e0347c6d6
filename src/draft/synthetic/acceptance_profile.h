// Synthetic acceptance profiles (benchmarks only): per-depth conditional acceptance q_1..q_B and its mean length.
//
// Glossary. q_k = P(draft k is right | drafts 1..k-1 were right). A window that carries all B drafts commits
// 1 + (number of leading right drafts) tokens: the kept drafts plus the bonus (the target's draw at the first
// mismatch, or after the last draft). The profile's mean accepted length counts that bonus, as LiquidAI's
// published acceptance lengths do (e.g. 5.02 "of 10" for LFM2.5-1.2B with 9 drafts):
//   mean = 1 + sum_{k=1..B} prod_{j<=k} q_j.
#pragma once

#include <vector>

#include "base/status.h"

namespace ls {

struct AcceptanceProfile {
  std::vector<double> conditional;  // [depth] q_k in [0, 1]

  int depth() const { return static_cast<int>(conditional.size()); }
  // Expected committed tokens of a window that verifies all `depth()` drafts, bonus included.
  double mean_accepted_length() const;
  // The chances a drafter reports: chance[k] = prod_{j<=k} q_j, [depth] non-increasing.
  std::vector<float> chances() const;
};

// The profile of `depth` drafts with the same q at every depth whose mean accepted length (bonus included) is
// `mean`; InvalidArgument when depth < 1 or mean is outside [1, depth + 1].
Result<AcceptanceProfile> profile_for_mean(double mean, int depth);

}  // namespace ls
