// Tests for the Markov scan's greedy pick: the AVX-512 and scalar paths against a plain first-maximum loop.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "base/hash.h"
#include "compute/cpu/cpu_features.h"
#include "draft/dspark/markov_scan.h"

namespace ls::dspark {
namespace {

// The reference: the first finite value strictly above every earlier finite one; 0 when none is finite.
int32_t reference_pick(const std::vector<float>& values, bool& all_finite) {
  int32_t best = 0;
  bool found = false;
  all_finite = true;
  for (size_t id = 0; id < values.size(); ++id) {
    if (!std::isfinite(values[id])) {
      all_finite = false;
      continue;
    }
    if (!found || values[id] > values[best]) {
      best = static_cast<int32_t>(id);
      found = true;
    }
  }
  return best;
}

std::vector<float> random_logits(size_t count, uint64_t seed) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<float>(uniform_open01(splitmix64(seed * 1000003 + i)) * 20.0 - 10.0);
  return values;
}

TEST(DsparkScanPick, TheGreedyPickIsTheFirstLargestFiniteValueOnEveryPathWithNanInfTiesAndSignedZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> cases;
  for (size_t count : {size_t{1}, size_t{5}, size_t{16}, size_t{17}, size_t{8192}, size_t{8193}})
    cases.push_back(random_logits(count, 100 + count));
  std::vector<float> ties = random_logits(8192, 7);
  ties[4000] = ties[9] = ties[6001] = 50.0f;  // the lowest id of a tie wins, across lanes and chunks
  cases.push_back(ties);
  std::vector<float> same_lane = random_logits(100, 8);
  same_lane[70] = same_lane[38] = same_lane[54] = 60.0f;  // ids 38, 54, 70: lane 6 in three chunks
  cases.push_back(same_lane);
  std::vector<float> poisoned = random_logits(8192, 9);
  poisoned[3] = nan;
  poisoned[100] = inf;  // +inf never wins
  poisoned[200] = -inf;
  poisoned[8191] = nan;
  cases.push_back(poisoned);
  cases.push_back(std::vector<float>(33, nan));                               // nothing finite: 0
  cases.push_back({nan, -inf, inf, -1e30f, nan});                             // one finite value
  cases.push_back({-0.0f, -1.0f, 0.0f, -0.0f, -2.0f, 0.0f, -3.0f, -0.0f});  // the first zero wins
  std::vector<float> zeros(40, -5.0f);
  zeros[21] = 0.0f;
  zeros[5] = -0.0f;
  cases.push_back(zeros);
  for (bool scalar : {false, true}) {
    std::optional<compute::CpuFeaturesOverride> forced;
    if (scalar) forced.emplace(compute::CpuFeatures{compute::cpu_features().avx2_fma, false, false});
    for (size_t index = 0; index < cases.size(); ++index) {
      bool expected_finite = false, got_finite = !expected_finite;
      const int32_t expected = reference_pick(cases[index], expected_finite);
      got_finite = !expected_finite;  // poisoned: the call must set it
      EXPECT_EQ(first_finite_argmax(cases[index], got_finite), expected) << "case " << index << (scalar ? " scalar" : "");
      EXPECT_EQ(got_finite, expected_finite) << "case " << index << (scalar ? " scalar" : "");
    }
  }
}

}  // namespace
}  // namespace ls::dspark
