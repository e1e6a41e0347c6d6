// The Markov scan's keyed pick (scan_pick.cuh) against draw_token bit for bit: fresh random rows (continuous, tied,
// flat 65536-token rows) under every filter mix, in the fused step's 256-thread CTA and the pick kernels' 1024, with
// the verified variant, its one-by-one fallback forced, and the radix variant; near-tie rows (the CPU's top-p cut
// within a hair of its target, the Gumbel favourite on the boundary: cuda_sampler_near_ties.h) that only the
// one-by-one sums decide, which a planted zero bound band gets wrong; the same rows through the scan's own pick
// launches (markov_pick, markov_pick_split with the first round spread over vocab chunks or not). Opt-in timing
// (LS_DRAFT_PICK_TIMING=1).
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/hash.h"
#include "compute/sampling.h"
#include "draft/dspark/cuda/scan_pick.h"
#include "cuda_sampler_near_ties.h"
#include "cuda_test_util.h"

namespace ls::dspark::cuda {
namespace {

using ls::cuda::DeviceBuffer;
using ls::cuda::testing::upload;

// Rows to draw, flattened [rows, vocab], with each row's sampling, position and the CPU's token.
struct Rows {
  int64_t vocab = 0;
  std::vector<float> logits;
  std::vector<DeviceScanRequest> samplings;
  std::vector<int64_t> positions;
  std::vector<int32_t> cpu;
  void add(const std::vector<float>& row, const Sampling& s, int64_t position) {
    logits.insert(logits.end(), row.begin(), row.end());
    DeviceScanRequest d;
    d.temperature = s.temperature;
    d.top_k = s.top_k;
    d.top_p = s.top_p;
    d.min_p = s.min_p;
    d.seed = s.seed;
    samplings.push_back(d);
    positions.push_back(position);
    cpu.push_back(draw_token(std::span<const float>(row.data(), row.size()), s, position));
  }
  int count() const { return static_cast<int>(cpu.size()); }
};

// The device's picks of `rows` under `mode` in CTAs of `threads` (the picks poisoned to -1 first).
std::vector<int32_t> device_picks(const Rows& rows, DraftPickMode mode, int threads, float* ms = nullptr,
                                  int repeats = 1) {
  DeviceBuffer<float> logits = upload(rows.logits);
  DeviceBuffer<DeviceScanRequest> samplings = upload(rows.samplings);
  DeviceBuffer<int64_t> positions = upload(rows.positions);
  DeviceBuffer<int32_t> picks = ls::cuda::testing::poisoned<int32_t>(rows.count());
  const float per_call = ls::cuda::testing::device_ms_per_call(repeats, [&] {
    EXPECT_TRUE(draw_rows_with(logits.data(), rows.count(), rows.vocab, samplings.data(), positions.data(),
                               picks.data(), mode, threads, nullptr)
                    .ok());
  });
  if (ms) *ms = per_call;
  return ls::cuda::testing::download(picks, rows.count());
}

// The seed of this run's fresh rows (printed, so a failure can be replayed with LS_DRAFT_PICK_SEED).
uint64_t fresh_seed() {
  static const uint64_t seed = [] {
    const char* pinned = std::getenv("LS_DRAFT_PICK_SEED");
    const uint64_t value = pinned ? std::strtoull(pinned, nullptr, 10) : std::random_device{}();
    std::printf("draft pick rows: seed %llu\n", static_cast<unsigned long long>(value));
    return value;
  }();
  return seed;
}

// A flat row: base + up to 1e-3 (the synth models' rows; top-p 0.9 keeps ~59000 of 65536 ids).
std::vector<float> flat_row(int64_t vocab, uint64_t seed, float base = 0.01f) {
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    row[i] = base + static_cast<float>(uniform_open01(splitmix64(seed * 0x9e3779b97f4a7c15ull + i)) * 1e-3);
  return row;
}

// Fresh rows for every filter mix: continuous normal(0, 3) rows (an odd vocab: the scalar loads), heavily tied rows
// (no top-p: exact ties put a top-p cut on a rounding boundary), and flat 65536-token rows.
Rows fresh_rows(bool wide_vocab_flat) {
  Rows rows;
  rows.vocab = wide_vocab_flat ? 65536 : 8195;  // 8195: three split chunks, the last a partial one
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const Sampling settings[] = {{0.8f, 0, 0.9f, 0.0f, 0},   {1.0f, 0, 0.99f, 0.0f, 0}, {0.6f, 50, 0.9f, 0.0f, 0},
                               {1.1f, 0, 0.5f, 0.05f, 0},  {1.0f, 0, 1.0f, 0.1f, 0},  {1.3f, 5, 1.0f, 0.0f, 0},
                               {0.9f, 40, 0.8f, 0.05f, 0}, {2.0f, 0, 0.97f, 0.02f, 0}, {1.0f, 0, 1.0f, 0.0f, 0},
                               {0.7f, 3000, 0.95f, 0.0f, 0}};
  for (int repeat = 0; repeat < (wide_vocab_flat ? 1 : 4); ++repeat) {
    for (Sampling s : settings) {
      s.seed = rng();
      const int64_t position = 3 + static_cast<int64_t>(rng() % 100000);
      if (wide_vocab_flat) {
        rows.add(flat_row(rows.vocab, rng()), s, position);
        continue;
      }
      std::vector<float> row(static_cast<size_t>(rows.vocab));
      for (float& value : row) value = normal(rng);
      rows.add(row, s, position);
      if (s.top_p >= 1.0f) {
        for (float& value : row) value = std::round(normal(rng) / 2);
        rows.add(row, s, position + 1);
      }
    }
  }
  return rows;
}

// Pins the scan launches' pick variant and spread for a scope (the process's own back after).
class ScopedPick {
 public:
  ScopedPick(DraftPickMode mode, bool spread) : mode_(draft_pick_mode()), spread_(draft_pick_spread()) {
    set_draft_pick_mode(mode);
    set_draft_pick_spread(spread);
  }
  ~ScopedPick() {
    set_draft_pick_mode(mode_);
    set_draft_pick_spread(spread_);
  }

 private:
  DraftPickMode mode_;
  bool spread_;
};

// The rows' picks through a scan step's own launches: each row a request at depth 1 whose Markov row holds it and
// whose U row is zero (the step adds them), no confidence head; `split` markov_pick_split, else markov_pick.
std::vector<int32_t> scan_step_picks(const Rows& rows, bool split, float* ms = nullptr, int repeats = 1) {
  const int count = rows.count();
  ScanShape shape;
  shape.vocab = rows.vocab;
  shape.rank = 8;
  shape.hidden = 8;
  shape.gamma = 1;
  shape.has_confidence = false;
  std::vector<DeviceScanRequest> requests = rows.samplings;
  for (int r = 0; r < count; ++r) {
    requests[r].depth = 1;
    requests[r].anchor_position = rows.positions[r] - 1;  // slot 0 draws at anchor_position + 1
  }
  DeviceBuffer<DeviceScanRequest> device_requests = upload(requests);
  DeviceBuffer<DeviceScanRecord> records = upload(std::vector<DeviceScanRecord>(count));
  DeviceBuffer<float> markov = upload(rows.logits);
  DeviceBuffer<float> base = upload(std::vector<float>(rows.logits.size(), 0.0f));
  DeviceBuffer<ScanPartial> partials =
      ls::cuda::testing::poisoned<ScanPartial>(static_cast<size_t>(count) * fused_scan_chunks(rows.vocab));
  ScanStepInputs in;
  in.requests = device_requests.data();
  in.records = records.data();
  in.count = count;
  in.markov = markov.data();
  in.base_logits = base.data();
  in.partials = partials.data();
  // a repeat redraws the same rows (U is zero, the depth stays 1)
  const float per_call = ls::cuda::testing::device_ms_per_call(repeats, [&] {
    EXPECT_TRUE((split ? markov_pick_split(in, shape, 0, nullptr) : markov_pick(in, shape, 0, nullptr)).ok());
  });
  if (ms) *ms = per_call;
  const std::vector<DeviceScanRecord> out = ls::cuda::testing::download(records, count);
  std::vector<int32_t> picks(count);
  for (int r = 0; r < count; ++r) {
    EXPECT_EQ(out[r].status, kScanOk) << "row " << r;
    picks[r] = out[r].status == kScanOk ? out[r].tokens[0] : -1;
  }
  return picks;
}

// Every scan launch that picks (one CTA a row; split with and without the spread first round) under `mode`.
void expect_scan_steps_draw_cpu_tokens(const Rows& rows, DraftPickMode mode) {
  for (const int variant : {0, 1, 2}) {
    ScopedPick pick(mode, variant == 2);
    SCOPED_TRACE(std::string(draft_pick_name(mode)) + (variant == 0 ? ", markov_pick" : ", markov_pick_split") +
                 (variant == 2 ? " spread" : "") + ", vocab " + std::to_string(rows.vocab));
    const std::vector<int32_t> picks = scan_step_picks(rows, variant != 0);
    for (int r = 0; r < rows.count(); ++r) EXPECT_EQ(picks[r], rows.cpu[r]) << "row " << r;
  }
}

void expect_cpu_tokens(const Rows& rows, DraftPickMode mode, int threads) {
  SCOPED_TRACE(std::string(draft_pick_name(mode)) + ", " + std::to_string(threads) + " threads, vocab " +
               std::to_string(rows.vocab));
  const std::vector<int32_t> picks = device_picks(rows, mode, threads);
  for (int r = 0; r < rows.count(); ++r) {
    EXPECT_EQ(picks[r], rows.cpu[r]) << "row " << r << " T " << rows.samplings[r].temperature << " top_k "
                                     << rows.samplings[r].top_k << " top_p " << rows.samplings[r].top_p << " min_p "
                                     << rows.samplings[r].min_p;
  }
}

TEST(CudaDrafterPick, FreshRandomRowsDrawTheCpuTokenInBothCtaSizesWithTheVerifiedPickAndItsForcedFallback) {
  LS_SKIP_WITHOUT_DEVICE();
  const Rows rows = fresh_rows(false);
  EXPECT_GT(rows.count(), 50);
  for (const int threads : {256, 1024}) {
    expect_cpu_tokens(rows, DraftPickMode::Verified, threads);
    expect_cpu_tokens(rows, DraftPickMode::VerifiedFallbackForced, threads);
  }
  expect_scan_steps_draw_cpu_tokens(rows, DraftPickMode::Verified);
  expect_scan_steps_draw_cpu_tokens(rows, DraftPickMode::VerifiedFallbackForced);
}

TEST(CudaDrafterPick, FreshFlatRowsOfTheFullVocabDrawTheCpuTokenWithEveryVariant) {
  LS_SKIP_WITHOUT_DEVICE();
  const Rows rows = fresh_rows(true);
  for (const int threads : {256, 1024}) {
    expect_cpu_tokens(rows, DraftPickMode::Verified, threads);
    expect_cpu_tokens(rows, DraftPickMode::Radix, threads);
  }
  expect_scan_steps_draw_cpu_tokens(rows, DraftPickMode::Verified);
  // The forced fallback adds up to ~59000 weights one by one per row: a few rows, the larger CTA only.
  Rows few;
  few.vocab = rows.vocab;
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> row(rows.logits.begin() + r * rows.vocab, rows.logits.begin() + (r + 1) * rows.vocab);
    const DeviceScanRequest& d = rows.samplings[r];
    few.add(row, Sampling{d.temperature, d.top_k, d.top_p, d.min_p, d.seed}, rows.positions[r]);
  }
  expect_cpu_tokens(few, DraftPickMode::VerifiedFallbackForced, 1024);
}

// The id with the largest Gumbel noise for (seed, position): on a flat row the Gumbel max, so the verified pick's
// first winner.
int32_t favourite_id(const Sampling& sampling, int64_t position, int64_t vocab) {
  int32_t favourite = 0;
  double best = -1e300;
  for (int32_t id = 0; id < vocab; ++id) {
    const double g = sampling_gumbel(sampling.seed, position, id);
    if (g > best) best = g, favourite = id;
  }
  return favourite;
}

// Near-tie rows (just cut, just kept, and split where found) for top-p 0.9 / 0.99 at temperatures 0.6-1.1.
const Rows& near_tie_rows() {
  static const Rows rows = [] {
    Rows out;
    out.vocab = 65536;
    const float temperatures[] = {0.6f, 1.1f, 0.8f, 1.0f};
    const float top_ps[] = {0.9f, 0.9f, 0.99f, 0.99f};
    int built = 0;
    for (uint64_t seed = 0; seed < 40 && built < 6; ++seed) {
      const Sampling s{temperatures[seed % 4], 0, top_ps[seed % 4], 0.0f, splitmix64(9100 + seed)};
      const int64_t position = 11 + static_cast<int64_t>(seed);
      near_ties::NearTie tie;
      if (!near_ties::build_near_tie(flat_row(out.vocab, 4000 + seed), s, favourite_id(s, position, out.vocab), tie))
        continue;
      out.add(tie.just_cut, s, position);
      out.add(tie.just_kept, s, position);
      if (tie.split_ok) out.add(tie.split, s, position);
      ++built;
    }
    return out;
  }();
  return rows;
}

TEST(CudaDrafterPick, NearTieRowsDrawTheCpuTokenByFallingBackToOneByOneSums) {
  LS_SKIP_WITHOUT_DEVICE();
  const Rows& rows = near_tie_rows();
  ASSERT_GE(rows.count(), 8) << "near-tie rows built";
  // Each just-cut / just-kept pair differs by one float step of one logit and the CPU draws differently on them.
  int differing = 0;
  for (int r = 0; r + 1 < rows.count(); ++r) differing += rows.cpu[r] != rows.cpu[r + 1];
  EXPECT_GT(differing, 0);
  expect_cpu_tokens(rows, DraftPickMode::Verified, 1024);
  expect_cpu_tokens(rows, DraftPickMode::Verified, 256);
  expect_scan_steps_draw_cpu_tokens(rows, DraftPickMode::Verified);
}

TEST(CudaDrafterPick, APlantedZeroBoundBandIsCaughtByTheNearTieRows) {
  LS_SKIP_WITHOUT_DEVICE();
  const Rows& rows = near_tie_rows();
  ASSERT_GE(rows.count(), 8);
  const std::vector<int32_t> picks = device_picks(rows, DraftPickMode::VerifiedBandPlantedZero, 1024);
  int wrong = 0;
  for (int r = 0; r < rows.count(); ++r) wrong += picks[r] != rows.cpu[r];
  std::printf("zero band: %d of %d near-tie rows drawn off the CPU token\n", wrong, rows.count());
  EXPECT_GT(wrong, 0) << "the tree sums alone cannot decide a near tie: the planted fault must show";
  // The same fault in the spread first round of the split pick.
  ScopedPick pick(DraftPickMode::VerifiedBandPlantedZero, true);
  const std::vector<int32_t> split = scan_step_picks(rows, true);
  int split_wrong = 0;
  for (int r = 0; r < rows.count(); ++r) split_wrong += split[r] != rows.cpu[r];
  EXPECT_GT(split_wrong, 0);
}

// The planted faults are for tests only: LS_DRAFT_PICK names only the real variants.
TEST(CudaDrafterPick, TheEnvironmentNamesOnlyTheRealPickVariants) {
  EXPECT_EQ(draft_pick_mode_named("radix"), DraftPickMode::Radix);
  EXPECT_EQ(draft_pick_mode_named("verified"), DraftPickMode::Verified);
  const DraftPickMode fallback = draft_pick_mode_named(nullptr);
  EXPECT_EQ(fallback, DraftPickMode::Verified);
  EXPECT_EQ(draft_pick_mode_named(draft_pick_name(DraftPickMode::VerifiedBandPlantedZero)), fallback);
  EXPECT_EQ(draft_pick_mode_named(draft_pick_name(DraftPickMode::VerifiedFallbackForced)), fallback);
  EXPECT_EQ(draft_pick_mode_named("bogus"), fallback);
}

TEST(CudaDrafterPick, AnUnsupportedCtaSizeIsRefusedByName) {
  LS_SKIP_WITHOUT_DEVICE();
  const Status status = draw_rows_with(nullptr, 1, 16, nullptr, nullptr, nullptr, DraftPickMode::Verified, 512,
                                       nullptr);
  EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(status.to_string().find("512"), std::string::npos) << status.to_string();
}

// Opt-in timing: flat and wide (uniform 0..12) 65536-token rows at 1 and 16 rows, greedy and the lanes bench's
// sampled mix (T only, top-k 8, top-p 0.9, min-p 0.05), per variant and CTA size (the fused step's 256, the pick
// kernels' 1024) and through the split pick's launches; a scan pass of depth 9 takes 9 of these.
TEST(CudaDrafterPick, TimesTheSampledPickPerVariantWhenAsked) {
  LS_SKIP_WITHOUT_DEVICE();
  if (std::getenv("LS_DRAFT_PICK_TIMING") == nullptr) GTEST_SKIP() << "set LS_DRAFT_PICK_TIMING=1";
  for (const bool flat : {true, false}) {
    for (const int count : {1, 16}) {
      struct Setting {
        const char* name;
        Sampling sampling;
      };
      const Setting settings[] = {{"greedy", Sampling{0.0f, 0, 1.0f, 0.0f, 0}},
                                  {"top-p 0.9 T 0.8", Sampling{0.8f, 0, 0.9f, 0.0f, 0}},
                                  {"top-k 8 T 0.8", Sampling{0.8f, 8, 1.0f, 0.0f, 0}},
                                  {"T 0.6", Sampling{0.6f, 0, 1.0f, 0.0f, 0}},
                                  {"min-p 0.05 T 1", Sampling{1.0f, 0, 1.0f, 0.05f, 0}}};
      for (const Setting& setting : settings) {
        Rows rows;
        rows.vocab = 65536;
        for (int r = 0; r < count; ++r) {
          std::vector<float> row = flat_row(rows.vocab, 500 + r);
          if (!flat) {
            for (int64_t i = 0; i < rows.vocab; ++i)
              row[i] = static_cast<float>(uniform_open01(splitmix64(r * 131071ull + i)) * 12.0);
          }
          Sampling sampling = setting.sampling;
          sampling.seed = splitmix64(77 + r);
          rows.add(row, sampling, 40 + r);
        }
        for (const int threads : {256, 1024}) {
          std::vector<std::vector<int32_t>> picks;
          std::string line;
          for (const DraftPickMode mode : {DraftPickMode::Radix, DraftPickMode::Verified}) {
            float ms = 0;
            device_picks(rows, mode, threads, &ms, 3);  // warm
            picks.push_back(device_picks(rows, mode, threads, &ms, 20));
            line += std::string(" ") + draft_pick_name(mode) + " " + std::to_string(ms);
          }
          std::printf("draft_pick_timing %s rows %d %s threads %d ms:%s\n", flat ? "flat" : "wide", count,
                      setting.name, threads, line.c_str());
          EXPECT_EQ(picks[0], rows.cpu);
          EXPECT_EQ(picks[1], rows.cpu);
        }
        // The scan's split pick launches (chunk partials, [spread first round], a CTA per request), per step.
        std::string line;
        for (const int variant : {0, 1, 2}) {
          ScopedPick pick(variant == 0 ? DraftPickMode::Radix : DraftPickMode::Verified, variant == 2);
          float ms = 0;
          scan_step_picks(rows, true, &ms, 3);
          EXPECT_EQ(scan_step_picks(rows, true, &ms, 20), rows.cpu);
          line += std::string(variant == 0 ? " radix " : variant == 1 ? " verified " : " verified+spread ") +
                  std::to_string(ms);
        }
        std::printf("draft_pick_timing %s rows %d %s markov_pick_split step ms:%s\n", flat ? "flat" : "wide", count,
                    setting.name, line.c_str());
      }
    }
  }
}

}  // namespace
}  // namespace ls::dspark::cuda

#endif  // LS_HAVE_CUDA
