// The device keyed sampler on flat rows (every logit within 1e-3, vocab 65536: the top-p walk's worst case) against
// the CPU sampler, under each kernel variant (cuda::SamplerKernel), plus rows whose draw flips if the top-p / top-k
// cut moves by one candidate, near-tie rows whose cut only one-by-one sums decide (cuda_sampler_near_ties.h), the
// planted faults they catch, and an opt-in timing (LS_SAMPLER_TIMING=1) of the variants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "base/hash.h"
#include "compute/sampling.h"
#include "cuda_sampler_near_ties.h"

#ifdef LS_HAVE_CUDA
#include "compute/cuda/kernels.h"
#include "cuda_sampler_pin.h"
#include "cuda_test_util.h"
#endif

namespace ls {
namespace {

constexpr int kVocab = 65536;

// A flat row: 0.01 + up to 1e-3 (float steps there are ~1e-9, so ties are rare).
std::vector<float> flat_row(uint64_t seed) {
  std::vector<float> row(kVocab);
  for (int i = 0; i < kVocab; ++i)
    row[i] = 0.01f + static_cast<float>(uniform_open01(splitmix64(seed * 0x9e3779b97f4a7c15ull + i)) * 1e-3);
  return row;
}

struct FlatCase {
  Sampling sampling;
  int64_t position = 0;
};

// The settings under test: top_p 0.9 / 0.99 with and without top-k and min-p, temperature 0.6 and 1.1.
std::vector<FlatCase> flat_cases() {
  std::vector<FlatCase> cases;
  int n = 0;
  for (const float top_p : {0.9f, 0.99f, 1.0f})
    for (const int top_k : {0, 5000, 40000})
      for (const float min_p : {0.0f, 0.05f}) {
        if (top_p == 1.0f && top_k == 0 && min_p == 0.0f) continue;
        FlatCase c;
        c.sampling = Sampling{n % 2 == 0 ? 0.6f : 1.1f, top_k, top_p, min_p, splitmix64(1000 + n)};
        c.position = 17 + 31 * n;
        cases.push_back(c);
        ++n;
      }
  return cases;
}

// Whether top-k or top-p cuts a flat row (min-p alone keeps every id of it).
bool has_cut(const FlatCase& c) { return c.sampling.top_p < 1.0f || c.sampling.top_k > 0; }

int32_t cpu_draw(const std::vector<float>& row, const FlatCase& c) {
  return draw_token(std::span<const float>(row.data(), row.size()), c.sampling, c.position);
}

// A pair of rows for `c` whose draw sits on the cut: the key's favourite id (largest Gumbel noise) moved to the last
// surviving rank (`inside`, drawn) and to the first cut rank (`outside`, not drawn), found by bisection on its rank.
struct Borderline {
  std::vector<float> inside, outside;
  int32_t favourite = -1;
  int rank = -1;
};

Borderline borderline_rows(const FlatCase& c, uint64_t seed) {
  const std::vector<float> base = flat_row(seed);
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return base[a] != base[b] ? base[a] > base[b] : a < b; });
  Borderline out;
  double best = -1e300;
  for (int32_t id = 0; id < kVocab; ++id) {
    const double g = sampling_gumbel(c.sampling.seed, c.position, id);
    if (g > best) best = g, out.favourite = id;
  }
  auto placed = [&](int rank) {  // the favourite swaps logits with the id at `rank`
    std::vector<float> row = base;
    std::swap(row[out.favourite], row[order[rank]]);
    return row;
  };
  int lo = 0, hi = kVocab - 1;  // drawn at lo; find the largest such rank
  if (cpu_draw(placed(lo), c) != out.favourite || cpu_draw(placed(hi), c) == out.favourite) return out;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (cpu_draw(placed(mid), c) == out.favourite ? lo : hi) = mid;
  }
  out.rank = lo;
  out.inside = placed(lo);
  out.outside = placed(lo + 1);
  return out;
}

// borderline_rows of every flat case with a cut (rank -1 for the others), found once per binary.
const std::vector<Borderline>& borderlines() {
  static const std::vector<Borderline> all = [] {
    const std::vector<FlatCase> cases = flat_cases();
    std::vector<Borderline> out(cases.size());
    for (size_t i = 0; i < cases.size(); ++i)
      if (has_cut(cases[i])) out[i] = borderline_rows(cases[i], 500 + i);
    return out;
  }();
  return all;
}

TEST(FlatSamplerRows, BorderlineRowsDrawTheFavouriteOnlyInsideTheCpuCut) {
  const std::vector<FlatCase> cases = flat_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!has_cut(cases[i])) continue;
    const Borderline& b = borderlines()[i];
    ASSERT_GE(b.rank, 0) << "case " << i;
    EXPECT_EQ(cpu_draw(b.inside, cases[i]), b.favourite) << "case " << i;
    EXPECT_NE(cpu_draw(b.outside, cases[i]), b.favourite) << "case " << i;
    if (cases[i].sampling.top_p < 1.0f && cases[i].sampling.top_k == 0) {
      EXPECT_GT(b.rank, 40000) << "case " << i << ": a flat row's top-p cut keeps most of the vocab";
    }
  }
}

// The id with the largest Gumbel noise for (seed, position): drawn whenever it survives a flat row's cut.
int32_t favourite_id(const Sampling& sampling, int64_t position) {
  int32_t favourite = 0;
  double best = -1e300;
  for (int32_t id = 0; id < kVocab; ++id) {
    const double g = sampling_gumbel(sampling.seed, position, id);
    if (g > best) best = g, favourite = id;
  }
  return favourite;
}

struct NearTieCase {
  Sampling sampling;
  int64_t position = 0;
  near_ties::NearTie tie;
};

// Near ties for top-p 0.9 / 0.99 at temperatures 0.6-1.1, at least 8 of them and 4 with a split row, found once.
const std::vector<NearTieCase>& near_tie_cases() {
  static const std::vector<NearTieCase> all = [] {
    std::vector<NearTieCase> out;
    const float temperatures[] = {0.6f, 1.1f, 0.8f, 1.1f};
    const float top_ps[] = {0.9f, 0.9f, 0.99f, 0.99f};
    int splits = 0;
    for (uint64_t seed = 0; seed < 48 && (out.size() < 8 || splits < 4); ++seed) {
      NearTieCase c;
      c.sampling = Sampling{temperatures[seed % 4], 0, top_ps[seed % 4], 0.0f, splitmix64(7700 + seed)};
      c.position = 5 + static_cast<int64_t>(seed);
      if (!near_ties::build_near_tie(flat_row(3000 + seed), c.sampling, favourite_id(c.sampling, c.position), c.tie))
        continue;
      splits += c.tie.split_ok;
      out.push_back(std::move(c));
    }
    return out;
  }();
  return all;
}

int32_t cpu_draw(const std::vector<float>& row, const NearTieCase& c) {
  return draw_token(std::span<const float>(row.data(), row.size()), c.sampling, c.position);
}

TEST(FlatSamplerRows, NearTieRowsPutTheCpuTopPCutWithinAHairOfItsTargetWithTheFavouriteOnTheBoundary) {
  const std::vector<NearTieCase>& cases = near_tie_cases();
  ASSERT_GE(cases.size(), 8u);
  int splits = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const near_ties::NearTie& t = cases[i].tie;
    // The device's bound band is (8 n + 64) 2^-53 total (~6e-11 total); its tree sums and target sit within
    // ~3e-11 total of the one-by-one ones, so gaps under 1e-11 total cannot be decided by them.
    EXPECT_LE(t.seq_gap_cut, 1e-11 * t.total) << "case " << i;
    EXPECT_LE(t.seq_gap_kept, 1e-11 * t.total) << "case " << i;
    EXPECT_NE(cpu_draw(t.just_cut, cases[i]), t.favourite) << "case " << i;
    EXPECT_EQ(cpu_draw(t.just_kept, cases[i]), t.favourite) << "case " << i;
    if (std::getenv("LS_NEAR_TIE_DUMP"))
      std::printf("case %zu: boundary %d gaps %.3g %.3g total %.6f split %d margin %.3g kept %d exact %d\n", i,
                  t.boundary, t.seq_gap_cut, t.seq_gap_kept, t.total, t.split_ok, t.split_margin, t.split_seq_kept,
                  t.split_exact_kept);
    if (!t.split_ok) continue;
    ++splits;
    EXPECT_EQ(cpu_draw(t.split, cases[i]) == t.favourite, t.split_seq_kept == t.boundary + 1) << "case " << i;
    EXPECT_NE(t.split_seq_kept, t.split_exact_kept) << "case " << i;
  }
  std::printf("near ties: %zu cases, %d with a split row\n", cases.size(), splits);
  EXPECT_GE(splits, 4) << "rows where one-by-one and exact sums cut differently";
}

#ifdef LS_HAVE_CUDA

using cuda::DrawScratch;
using cuda::RowDraw;
using cuda::SamplerKernel;
using cuda::testing::download;
using cuda::testing::median_draw_ms;
using cuda::testing::poisoned;
using cuda::testing::ScopedSamplerKernel;
using cuda::testing::upload;

const char* kernel_name(SamplerKernel kernel) {
  switch (kernel) {
    case SamplerKernel::Legacy: return "legacy";
    case SamplerKernel::Bounded: return "bounded";
    case SamplerKernel::Split: return "split";
    case SamplerKernel::BoundedBandPlantedZero: return "bounded-band-planted-zero";
    case SamplerKernel::BoundedCutPlantedLate: return "bounded-cut-planted-late";
    case SamplerKernel::SplitBandPlantedZero: return "split-band-planted-zero";
  }
  return "?";
}

constexpr SamplerKernel kKernels[] = {SamplerKernel::Legacy, SamplerKernel::Bounded, SamplerKernel::Split};

// The device's draws of `rows` (flattened [n, kVocab]) for `cases` under the kernel variant `mode`.
std::vector<int32_t> device_draws(const std::vector<float>& rows, const std::vector<FlatCase>& cases,
                                  SamplerKernel mode) {
  std::vector<RowDraw> draws;
  for (const FlatCase& c : cases)
    draws.push_back(RowDraw{c.sampling.temperature, c.sampling.top_k, c.sampling.top_p, c.sampling.min_p,
                            c.sampling.seed, c.position});
  const int64_t n = static_cast<int64_t>(cases.size());
  auto dev_rows = cuda::testing::upload(rows);
  auto dev_draws = upload(draws);
  auto out = poisoned<int32_t>(n);
  DrawScratch scratch;
  EXPECT_TRUE(scratch.reserve(n, kVocab).ok());
  ScopedSamplerKernel pin(mode);
  EXPECT_TRUE(cuda::draw_rows(dev_rows.data(), n, kVocab, dev_draws.data(), out.data(), scratch, nullptr).ok());
  return download(out, n);
}

// Flat rows, plain and borderline, for every case: the rows, their cases and the CPU's tokens.
struct FlatBatch {
  std::vector<float> rows;
  std::vector<FlatCase> cases;
  std::vector<int32_t> cpu;
  std::vector<bool> outside;  // the row is a borderline row with the favourite just past a top-p cut
};

const FlatBatch& flat_batch() {
  static const FlatBatch batch = [] {
    FlatBatch b;
    auto add = [&](const std::vector<float>& row, const FlatCase& c, bool outside) {
      b.rows.insert(b.rows.end(), row.begin(), row.end());
      b.cases.push_back(c);
      b.cpu.push_back(cpu_draw(row, c));
      b.outside.push_back(outside);
    };
    const std::vector<FlatCase> cases = flat_cases();
    for (size_t i = 0; i < cases.size(); ++i) {
      add(flat_row(900 + i), cases[i], false);
      const Borderline& border = borderlines()[i];
      if (border.rank < 0) continue;
      add(border.inside, cases[i], false);
      add(border.outside, cases[i], cases[i].sampling.top_p < 1.0f);
    }
    return b;
  }();
  return batch;
}

TEST(CudaSampler, FlatRowsDrawTheCpuTokenWithEitherKernelVariant) {
  LS_SKIP_WITHOUT_DEVICE();
  const FlatBatch& b = flat_batch();
  ASSERT_GE(b.cases.size(), 40u);
  for (const SamplerKernel mode : kKernels) {
    const std::vector<int32_t> gpu = device_draws(b.rows, b.cases, mode);
    for (size_t r = 0; r < b.cases.size(); ++r) {
      const Sampling& s = b.cases[r].sampling;
      EXPECT_EQ(gpu[r], b.cpu[r]) << kernel_name(mode) << " row " << r << " T " << s.temperature << " top_k " << s.top_k
                                  << " top_p " << s.top_p << " min_p " << s.min_p;
    }
  }
}

TEST(CudaSampler, APlantedTopPCutOneCandidateLateIsCaughtByTheBorderlineRows) {
  LS_SKIP_WITHOUT_DEVICE();
  const FlatBatch& b = flat_batch();
  const std::vector<int32_t> gpu = device_draws(b.rows, b.cases, SamplerKernel::BoundedCutPlantedLate);
  int outside = 0, caught = 0;
  for (size_t r = 0; r < b.cases.size(); ++r)
    if (b.outside[r]) ++outside, caught += gpu[r] != b.cpu[r];
  ASSERT_GE(outside, 6);
  EXPECT_GE(caught, outside / 2) << "of " << outside << " rows with the favourite just past the top-p cut";
}

// The near-tie rows (just cut, just kept, split) of every case, flattened, with their cases and CPU tokens.
struct NearTieBatch {
  std::vector<float> rows;
  std::vector<FlatCase> cases;
  std::vector<int32_t> cpu;
  std::vector<bool> split;
};

const NearTieBatch& near_tie_batch() {
  static const NearTieBatch batch = [] {
    NearTieBatch b;
    for (const NearTieCase& c : near_tie_cases()) {
      auto add = [&](const std::vector<float>& row, bool split) {
        b.rows.insert(b.rows.end(), row.begin(), row.end());
        b.cases.push_back(FlatCase{c.sampling, c.position});
        b.cpu.push_back(cpu_draw(row, c));
        b.split.push_back(split);
      };
      add(c.tie.just_cut, false);
      add(c.tie.just_kept, false);
      if (c.tie.split_ok) add(c.tie.split, true);
    }
    return b;
  }();
  return batch;
}

TEST(CudaSampler, NearTieRowsDrawTheCpuTokenOnEveryPathByFallingBackToOneByOneSums) {
  LS_SKIP_WITHOUT_DEVICE();
  const NearTieBatch& b = near_tie_batch();
  ASSERT_GE(b.cases.size(), 16u);
  for (const SamplerKernel mode : kKernels) {
    const std::vector<int32_t> gpu = device_draws(b.rows, b.cases, mode);
    for (size_t r = 0; r < b.cases.size(); ++r)
      EXPECT_EQ(gpu[r], b.cpu[r]) << kernel_name(mode) << " near-tie row " << r << " T "
                                  << b.cases[r].sampling.temperature
                                  << " top_p " << b.cases[r].sampling.top_p;
  }
}

TEST(CudaSampler, APlantedZeroBoundBandIsCaughtByTheNearTieRows) {
  LS_SKIP_WITHOUT_DEVICE();
  const NearTieBatch& b = near_tie_batch();
  const std::vector<int32_t> gpu = device_draws(b.rows, b.cases, SamplerKernel::BoundedBandPlantedZero);
  int splits = 0, caught = 0, others_caught = 0;
  for (size_t r = 0; r < b.cases.size(); ++r) {
    if (b.split[r]) ++splits, caught += gpu[r] != b.cpu[r];
    else others_caught += gpu[r] != b.cpu[r];
  }
  std::printf("zero band: %d of %d split rows and %d of %zu just-cut / just-kept rows draw off the CPU\n", caught,
              splits, others_caught, b.cases.size() - splits);
  ASSERT_GE(splits, 4);
  EXPECT_GE(caught, splits / 2) << "of " << splits << " rows where exact sums cut off the one-by-one cut";
}

// The split draw decides top-p by float sums: with its band zero they decide the near ties alone, a hair off the
// CPU's one-by-one sums (~1e-7 of the total against cuts within 1.5e-11), so about half the rows draw off.
TEST(CudaSampler, ThePlantedZeroBandOfTheSplitDrawIsCaughtByTheNearTieRows) {
  LS_SKIP_WITHOUT_DEVICE();
  const NearTieBatch& b = near_tie_batch();
  const std::vector<int32_t> gpu = device_draws(b.rows, b.cases, SamplerKernel::SplitBandPlantedZero);
  int caught = 0;
  for (size_t r = 0; r < b.cases.size(); ++r) caught += gpu[r] != b.cpu[r];
  std::printf("split, zero band: %d of %zu near-tie rows draw off the CPU\n", caught, b.cases.size());
  EXPECT_GE(caught, static_cast<int>(b.cases.size()) / 4);
}

// Opt-in timing, per kernel variant: one flat 65536-token row with top_p 0.9 (and 16 such rows, mixed with top-k
// and min-p); then 1 and 132 rows (one per SM) of flat and of wide (uniform 0..12) logits per filter setting.
TEST(CudaSampler, TimesTheFlatTopPRowPerVariantWhenAsked) {
  LS_SKIP_WITHOUT_DEVICE();
  if (std::getenv("LS_SAMPLER_TIMING") == nullptr) GTEST_SKIP() << "set LS_SAMPLER_TIMING=1";
  for (const int rows : {1, 16}) {
    std::vector<float> logits;
    std::vector<RowDraw> draws;
    for (int r = 0; r < rows; ++r) {
      const std::vector<float> row = flat_row(7000 + r);
      logits.insert(logits.end(), row.begin(), row.end());
      draws.push_back(RowDraw{0.6f + 0.03f * r, r % 3 == 1 ? 8 : 0, 0.9f, r % 5 == 3 ? 0.05f : 0.0f,
                              splitmix64(r), 100 + r});
    }
    auto dev_logits = upload(logits);
    std::vector<std::vector<int32_t>> tokens(3);
    for (int v = 0; v < 3; ++v) {
      const float ms = median_draw_ms(dev_logits, draws, kVocab, kKernels[v], tokens[v]);
      std::printf("sampler_timing rows %d top_p 0.9 flat vocab %d %s: median %.3f ms\n", rows, kVocab,
                  kernel_name(kKernels[v]), ms);
    }
    EXPECT_EQ(tokens[0], tokens[1]) << rows << " rows: the variants draw alike";
    EXPECT_EQ(tokens[0], tokens[2]) << rows << " rows: the variants draw alike";
  }
  struct Setting {
    const char* name;
    int top_k;
    float top_p, min_p;
  };
  const Setting settings[] = {{"no filter", 0, 1.0f, 0.0f}, {"top-k 50 + top-p 0.9", 50, 0.9f, 0.0f},
                              {"top-p 0.9", 0, 0.9f, 0.0f}, {"min-p 0.05", 0, 1.0f, 0.05f}};
  for (const bool flat : {true, false}) {
    for (const int rows : {1, 132}) {
      std::vector<float> logits;
      for (int r = 0; r < rows; ++r) {
        std::vector<float> row = flat_row(8000 + r);
        if (!flat)
          for (int i = 0; i < kVocab; ++i) row[i] = static_cast<float>(uniform_open01(splitmix64(r * 131071ull + i)) * 12.0);
        logits.insert(logits.end(), row.begin(), row.end());
      }
      auto dev_logits = upload(logits);
      for (const Setting& setting : settings) {
        std::vector<RowDraw> draws;
        for (int r = 0; r < rows; ++r)
          draws.push_back(RowDraw{0.8f, setting.top_k, setting.top_p, setting.min_p, splitmix64(50 + r), 7 + r});
        std::vector<std::vector<int32_t>> tokens(3);
        const float legacy = median_draw_ms(dev_logits, draws, kVocab, SamplerKernel::Legacy, tokens[0]);
        const float bounded = median_draw_ms(dev_logits, draws, kVocab, SamplerKernel::Bounded, tokens[1]);
        const float split = median_draw_ms(dev_logits, draws, kVocab, SamplerKernel::Split, tokens[2]);
        std::printf("sampler_timing %s rows %d %s: legacy %.3f ms bounded %.3f ms split %.3f ms\n",
                    flat ? "flat" : "wide", rows, setting.name, legacy, bounded, split);
        EXPECT_EQ(tokens[0], tokens[1]) << setting.name << ": the variants draw alike";
        EXPECT_EQ(tokens[0], tokens[2]) << setting.name << ": the variants draw alike";
      }
    }
  }
}

#endif  // LS_HAVE_CUDA

}  // namespace
}  // namespace ls
