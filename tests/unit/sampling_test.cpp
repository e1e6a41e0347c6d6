// Tests for the keyed sampler: greedy ties, keyed Gumbel draws matching softmax, top-k / top-p / min-p exclusions, and
// the pruned full-vocabulary draw equal to the brute-force Gumbel argmax on every kind of logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "base/hash.h"
#include "compute/sampling.h"

namespace ls {
namespace {

Sampling sampled(float temperature, uint64_t seed) {
  Sampling sampling;
  sampling.temperature = temperature;
  sampling.seed = seed;
  return sampling;
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probabilities, int draws) {
  double statistic = 0;
  for (size_t id = 0; id < counts.size(); ++id) {
    const double expected = probabilities[id] * draws;
    if (expected == 0) {
      EXPECT_EQ(counts[id], 0) << "token " << id << " has probability 0";
      continue;
    }
    statistic += (counts[id] - expected) * (counts[id] - expected) / expected;
  }
  return statistic;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probabilities(logits.size());
  double total = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    probabilities[id] = std::exp((logits[id] - max_logit) / temperature);
    total += probabilities[id];
  }
  for (double& probability : probabilities) probability /= total;
  return probabilities;
}

TEST(KeyedSampler, GreedyPicksTheLargestLogitWithTiesToTheLowerId) {
  std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(draw_token(logits, Sampling{}, 0), 1);
  logits = {std::numeric_limits<float>::quiet_NaN(), -1.0f, 5.0f, 5.0f};
  EXPECT_EQ(draw_token(logits, Sampling{}, 9), 2);
  logits = {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(draw_token(logits, Sampling{}, 0), 0);
}

TEST(KeyedSampler, TheKeyIsTheDocumentedSplitmixChain) {
  // Value computed independently in Python: sm(sm(sm(42) ^ 7) ^ 5).
  EXPECT_EQ(sampling_key(42, 7, 5), 9697030405692106891ull);
  EXPECT_EQ(sampling_gumbel(42, 7, 5), -std::log(-std::log(uniform_open01(9697030405692106891ull))));
}

TEST(KeyedSampler, SeedFromPromptIsSha256OfTheCommaJoinedIds) {
  // Values computed independently in Python (hashlib).
  std::vector<int32_t> prompt = {1, 2, 3};
  EXPECT_EQ(seed_from_prompt(prompt), 2959428052538452618ull);
  EXPECT_EQ(seed_from_prompt({}), 1449310910991872227ull);
}

TEST(KeyedSampler, SameInputsGiveTheSameDraw) {
  std::vector<float> logits(100);
  for (size_t id = 0; id < logits.size(); ++id) logits[id] = std::sin(static_cast<float>(id)) * 3.0f;
  for (int64_t position = 0; position < 200; ++position) {
    Sampling sampling = sampled(0.9f, 1234);
    EXPECT_EQ(draw_token(logits, sampling, position), draw_token(logits, sampling, position));
  }
}

TEST(KeyedSampler, ChangingThePositionOrTheSeedChangesTheDraws) {
  std::vector<float> logits(16, 0.0f);  // uniform: the draw is decided by the key alone
  std::set<int32_t> across_positions;
  int differ_by_seed = 0;
  for (int64_t position = 0; position < 64; ++position) {
    across_positions.insert(draw_token(logits, sampled(1.0f, 7), position));
    if (draw_token(logits, sampled(1.0f, 7), position) != draw_token(logits, sampled(1.0f, 8), position)) {
      ++differ_by_seed;
    }
  }
  EXPECT_GE(across_positions.size(), 8u);
  EXPECT_GE(differ_by_seed, 40);  // 15/16 of pairs differ in expectation
}

TEST(KeyedSampler, DrawsOverManySeedsFollowSoftmaxAtTheTemperature) {
  const std::vector<float> logits = {0.5f, 1.5f, -0.3f, 2.0f, 1.0f, 0.0f};
  for (float temperature : {0.7f, 1.0f, 1.6f}) {
    const int draws = 20000;
    std::vector<int> counts(logits.size(), 0);
    for (int seed = 0; seed < draws; ++seed) ++counts[draw_token(logits, sampled(temperature, seed), 31)];
    // 5 degrees of freedom: P(chi2 > 25) ~ 1.4e-4; the seeds are fixed, so the test is deterministic.
    EXPECT_LT(chi_square(counts, softmax(logits, temperature), draws), 25.0) << "temperature " << temperature;
  }
}

TEST(KeyedSampler, TopKDrawsFollowTheRenormalizedSoftmaxOfTheKLargest) {
  const std::vector<float> logits = {0.5f, 1.5f, -0.3f, 2.0f, 1.0f, 1.5f};
  Sampling sampling = sampled(1.0f, 0);
  sampling.top_k = 3;  // ids 3, 1, 5 (1 and 5 tie at 1.5: both are inside the top 3)
  const int draws = 20000;
  std::vector<int> counts(logits.size(), 0);
  for (int seed = 0; seed < draws; ++seed) {
    sampling.seed = seed;
    ++counts[draw_token(logits, sampling, 3)];
  }
  std::vector<float> kept = {-1e30f, 1.5f, -1e30f, 2.0f, -1e30f, 1.5f};
  EXPECT_LT(chi_square(counts, softmax(kept, 1.0), draws), 25.0);
}

TEST(KeyedSampler, TopKBreaksLogitTiesTowardTheLowerId) {
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  Sampling sampling = sampled(1.0f, 0);
  sampling.top_k = 2;  // of the three tied at 2.0, ids 1 and 2 survive
  for (int seed = 0; seed < 2000; ++seed) {
    sampling.seed = seed;
    int32_t token = draw_token(logits, sampling, 0);
    EXPECT_TRUE(token == 1 || token == 2) << "seed " << seed << " drew " << token;
  }
}

TEST(KeyedSampler, TopKNeverPicksATokenOutsideTheKLargest) {
  std::vector<float> logits(50);
  for (size_t id = 0; id < logits.size(); ++id) logits[id] = static_cast<float>((id * 37) % 11);  // many ties
  Sampling sampling = sampled(2.0f, 0);
  sampling.top_k = 7;
  std::vector<int32_t> order(logits.size());
  for (size_t id = 0; id < order.size(); ++id) order[id] = static_cast<int32_t>(id);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::set<int32_t> allowed(order.begin(), order.begin() + 7);
  std::set<int32_t> seen;
  for (int seed = 0; seed < 3000; ++seed) {
    sampling.seed = seed;
    int32_t token = draw_token(logits, sampling, seed % 17);
    EXPECT_TRUE(allowed.count(token)) << "token " << token;
    seen.insert(token);
  }
  EXPECT_EQ(seen, allowed);
}

TEST(KeyedSampler, TopPKeepsTheSmallestPrefixReachingTheMass) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  for (auto [top_p, expected] : std::vector<std::pair<float, std::set<int32_t>>>{
           {0.45f, {0}}, {0.79f, {0, 1}}, {0.9f, {0, 1, 2}}, {0.99f, {0, 1, 2, 3}}}) {
    Sampling sampling = sampled(1.0f, 0);
    sampling.top_p = top_p;
    std::set<int32_t> seen;
    for (int seed = 0; seed < 4000; ++seed) {
      sampling.seed = seed;
      seen.insert(draw_token(logits, sampling, 5));
    }
    EXPECT_EQ(seen, expected) << "top_p " << top_p;
  }
}

TEST(KeyedSampler, MinPDropsTokensBelowTheFractionOfTheMostLikely) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  Sampling sampling = sampled(1.0f, 0);
  sampling.min_p = 0.2f;  // 0.15 / 0.5 = 0.3 stays, 0.05 / 0.5 = 0.1 goes
  std::set<int32_t> seen;
  for (int seed = 0; seed < 4000; ++seed) {
    sampling.seed = seed;
    seen.insert(draw_token(logits, sampling, 2));
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(KeyedSampler, PrunedFullVocabularyDrawEqualsTheBruteForceGumbelArgmax) {
  std::vector<float> logits(4096);
  for (int trial = 0; trial < 40; ++trial) {
    for (size_t id = 0; id < logits.size(); ++id) {
      logits[id] = static_cast<float>(uniform_open01(splitmix64(trial * 100000 + id)) * 30.0 - 10.0);
    }
    for (float temperature : {0.3f, 1.0f, 3.0f}) {
      Sampling sampling = sampled(temperature, trial);
      int32_t expected = 0;
      double best = -std::numeric_limits<double>::infinity();
      for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
        double score = static_cast<double>(logits[id]) / temperature + sampling_gumbel(trial, 77, id);
        if (score > best) {
          best = score;
          expected = id;
        }
      }
      EXPECT_EQ(draw_token(logits, sampling, 77), expected) << "trial " << trial << " T " << temperature;
    }
  }
}

// Logits of one kind: flat (a weak drafter), peaked, wide, with NaN and infinities, or with ties at the top.
std::vector<float> logits_of(int kind, int vocab, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, kind == 0 ? 0.3f : kind == 2 ? 8.0f : 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& value : logits) value = normal(rng);
  if (kind == 1) logits[rng() % vocab] += 12.0f;
  if (kind == 3) {
    logits[rng() % vocab] = std::numeric_limits<float>::quiet_NaN();
    logits[rng() % vocab] = -std::numeric_limits<float>::infinity();
  }
  if (kind == 4) {
    const int top = static_cast<int>(rng() % vocab);
    logits[top] = logits[(top + 7) % vocab] = 9.0f;
  }
  if (kind == 5) logits[rng() % vocab] = std::numeric_limits<float>::infinity();
  return logits;
}

// Every non-NaN id scored in id order, ties to the lower id; 0 when all are NaN (draw_token's greedy fallback).
int32_t brute_force_draw(const std::vector<float>& logits, const Sampling& sampling, int64_t position) {
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (std::isnan(logits[id])) continue;
    const double score = static_cast<double>(logits[id]) / sampling.temperature +
                         sampling_gumbel(sampling.seed, position, id);
    if (best < 0 || score > best_score) {
      best = id;
      best_score = score;
    }
  }
  return best < 0 ? 0 : best;
}

// draw_token's candidates found the plain way (one full sort): the top k by logit (ties to the lower id), then the
// shortest prefix in that order whose weights reach top_p of the total (summed in id order), then weights >= min_p.
std::vector<int32_t> sorted_candidates(const std::vector<float>& logits, const Sampling& sampling) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id)
    if (!std::isnan(logits[id])) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  if (sampling.top_k > 0 && static_cast<int>(ids.size()) > sampling.top_k) ids.resize(sampling.top_k);
  if (ids.empty()) return ids;
  const double max_logit = logits[ids[0]];
  auto weight = [&](int32_t id) { return std::exp((logits[id] - max_logit) / sampling.temperature); };
  if (sampling.top_p < 1.0f) {
    std::vector<int32_t> by_id = ids;
    std::sort(by_id.begin(), by_id.end());
    double total = 0, mass = 0;
    for (int32_t id : by_id) total += weight(id);
    size_t kept = ids.size();
    for (size_t index = 0; index < ids.size(); ++index) {
      mass += weight(ids[index]);
      if (mass >= sampling.top_p * total) {
        kept = index + 1;
        break;
      }
    }
    ids.resize(kept);
  }
  std::erase_if(ids, [&](int32_t id) { return sampling.min_p > 0.0f && weight(id) < sampling.min_p; });
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(KeyedSampler, PrunedFilteredDrawsEqualTheBruteForceDrawOverTheSortedCandidates) {
  std::mt19937 rng(99);
  int draws = 0;
  for (int vocab : {17, 500, 8192}) {
    for (int kind = 0; kind < 5; ++kind) {
      for (const Sampling& filter : {Sampling{0.8f, 5, 1.0f, 0.0f, 0}, Sampling{0.8f, 40, 1.0f, 0.0f, 0},
                                     Sampling{1.0f, 0, 0.9f, 0.0f, 0}, Sampling{0.6f, 0, 0.5f, 0.0f, 0},
                                     Sampling{1.3f, 0, 1.0f, 0.05f, 0}, Sampling{0.9f, 50, 0.95f, 0.02f, 0}}) {
        for (int repeat = 0; repeat < (vocab == 8192 ? 6 : 20); ++repeat) {
          const std::vector<float> logits = logits_of(kind, vocab, rng);
          Sampling sampling = filter;
          sampling.seed = 0xf11700ull + static_cast<uint64_t>(repeat);
          const int64_t position = 5 + repeat * 17;
          const std::vector<int32_t> candidates = sorted_candidates(logits, sampling);
          ASSERT_FALSE(candidates.empty());
          const std::vector<float> only = [&] {
            std::vector<float> kept(logits.size(), std::numeric_limits<float>::quiet_NaN());
            for (int32_t id : candidates) kept[id] = logits[id];
            return kept;
          }();
          ASSERT_EQ(draw_token(logits, sampling, position), brute_force_draw(only, sampling, position))
              << "vocab " << vocab << " kind " << kind << " top-k " << sampling.top_k << " top-p " << sampling.top_p
              << " min-p " << sampling.min_p << " repeat " << repeat;
          ++draws;
        }
      }
    }
  }
  EXPECT_GT(draws, 1000);
}

TEST(KeyedSampler, PrunedDrawsEqualTheBruteForceDrawOnFlatPeakedWideNanInfiniteAndTiedLogits) {
  std::mt19937 rng(1234);
  int draws = 0;
  for (int vocab : {1, 2, 17, 8192}) {
    for (int kind = 0; kind < 6; ++kind) {
      for (float temperature : {0.3f, 0.8f, 1.0f, 1.7f}) {
        for (int repeat = 0; repeat < (vocab == 8192 ? 12 : 40); ++repeat) {
          const std::vector<float> logits = logits_of(kind, vocab, rng);
          const Sampling sampling{temperature, 0, 1.0f, 0.0f, 0x5eed0000ull + static_cast<uint64_t>(repeat)};
          const int64_t position = 17 + repeat * 31;
          ASSERT_EQ(draw_token(logits, sampling, position), brute_force_draw(logits, sampling, position))
              << "vocab " << vocab << " kind " << kind << " T " << temperature << " repeat " << repeat;
          ++draws;
        }
      }
    }
  }
  EXPECT_GT(draws, 1000);
  const std::vector<float> nan(64, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(draw_token(nan, sampled(1.0f, 9), 3), 0);
}

}  // namespace
}  // namespace ls
