// A single sampled request's scan as the fused step's product alone then markov_pick_split (set_sampled_split,
// session 11) against the fused step it replaces: fresh random W1 / W2 / U / Hf / confidence head, one request at
// full depth under each filter mix, both scans from poisoned buffers; the records (tokens, chance bits, running
// product, flags) and the last slot's corrected logits must be the same bytes, with the finish kernel's spread
// combine staged or not. A planted U added twice must differ, and a staged combine without its last chunk.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/scan_pick.h"
#include "cuda_drafter_scan_fixture.h"
#include "cuda_test_util.h"

namespace ls::dspark::cuda {
namespace {

using ls::cuda::DeviceBuffer;
using ls::cuda::testing::download;
using ls::cuda::testing::poisoned;
using ls::cuda::testing::upload;

// What a scan leaves: the record and the last slot's corrected logits.
struct ScanResult {
  DeviceScanRecord record;
  std::vector<float> logits;
};

enum class Scan { FusedStep, ProductThenSplit, ProductPlanted };

// One request's scan at full depth by `scan`, every buffer it writes poisoned first.
ScanResult run_scan(const ScanFixture& f, const DeviceScanRequest& request, Scan scan) {
  const ScanShape& shape = f.shape;
  DeviceBuffer<DeviceScanRequest> requests = upload(std::vector<DeviceScanRequest>{request});
  DeviceScanRecord initial{};
  initial.previous = request.anchor;
  DeviceBuffer<DeviceScanRecord> records = upload(std::vector<DeviceScanRecord>{initial});
  DeviceBuffer<float> markov = poisoned<float>(static_cast<size_t>(shape.vocab));
  DeviceBuffer<bf16> embeddings = poisoned<bf16>(static_cast<size_t>(shape.rank));
  DeviceBuffer<ScanPartial> partials = poisoned<ScanPartial>(static_cast<size_t>(fused_scan_chunks(shape.vocab)));
  DeviceBuffer<unsigned int> tickets = upload(std::vector<unsigned int>{0u});
  ScanStepInputs in;
  in.requests = requests.data();
  in.records = records.data();
  in.count = 1;
  in.markov = markov.data();
  in.base_logits = f.base.data();
  in.final_hidden = reinterpret_cast<const bf16_t*>(f.final_hidden.data());
  in.embeddings = reinterpret_cast<const bf16_t*>(embeddings.data());
  in.confidence_weight = f.confidence_weight.data();
  in.confidence_bias = f.bias;
  in.confidence_temperatures = f.temperatures.data();
  in.w1 = reinterpret_cast<const bf16_t*>(f.w1.data());
  in.w2 = reinterpret_cast<const bf16_t*>(f.w2.data());
  in.partials = partials.data();
  in.tickets = tickets.data();
  for (int slot = 0; slot < shape.gamma; ++slot) {
    if (scan == Scan::FusedStep) {
      EXPECT_TRUE(markov_step_fused(in, shape, slot, nullptr).ok());
    } else {
      EXPECT_TRUE(markov_product_fused(in, shape, slot, scan == Scan::ProductPlanted, nullptr).ok());
      EXPECT_TRUE(markov_pick_split(in, shape, slot, nullptr).ok());
    }
  }
  return ScanResult{download(records, 1)[0], download(markov, static_cast<size_t>(shape.vocab))};
}

bool same_bytes(const ScanResult& a, const ScanResult& b) {
  return std::memcmp(&a.record, &b.record, sizeof(DeviceScanRecord)) == 0 && a.logits.size() == b.logits.size() &&
         std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0;
}

TEST(CudaDrafterScanSplit, TheFusedProductThenTheSplitPickGivesTheFusedStepsRecordAndLogitBits) {
  LS_SKIP_WITHOUT_DEVICE();
  const uint64_t seed = std::random_device{}();
  std::printf("scan split: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const DraftPickMode loaded_mode = draft_pick_mode();
  const bool loaded_spread = draft_pick_spread();
  const bool loaded_staged = draft_pick_staged();
  // T only, top-k (spread set and not), top-p, min-p, every filter, greedy.
  const struct {
    float temperature;
    int top_k;
    float top_p, min_p;
  } settings[] = {{0.8f, 0, 1.0f, 0.0f},  {1.0f, 20, 1.0f, 0.0f},  {0.7f, 200, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f},
                  {1.2f, 0, 1.0f, 0.05f}, {0.9f, 40, 0.8f, 0.05f}, {0.0f, 0, 1.0f, 0.0f}};
  int planted_equal = 0, planted_runs = 0;
  // 8195: a partial last chunk and odd rows (scalar loads); rank 64 and 256 (the fused scan's largest).
  for (const auto& [vocab, rank] : {std::pair<int64_t, int>{8195, 64}, std::pair<int64_t, int>{20000, 256}}) {
    const ScanFixture fixture(vocab, rank, 96, 9, rng);
    // Spread with the finish kernel's combine staged (session 11) or not, and not spread.
    for (const int variant : {0, 1, 2}) {
      const bool spread = variant < 2;
      set_draft_pick_spread(spread);
      set_draft_pick_staged(variant == 1);
      // The verified pick only: the radix variant sums its top-p masses in atomic order (scan_pick.h), so two
      // runs of it need not agree even on one path.
      for (const DraftPickMode mode : {DraftPickMode::Verified, DraftPickMode::VerifiedFallbackForced}) {
        set_draft_pick_mode(mode);
        for (const auto& s : settings) {
          DeviceScanRequest request;
          request.anchor = static_cast<int32_t>(rng() % vocab);
          request.depth = fixture.shape.gamma;
          request.anchor_position = 10 + rng() % 5000;
          request.temperature = s.temperature;
          request.top_k = s.top_k;
          request.top_p = s.top_p;
          request.min_p = s.min_p;
          request.seed = rng();
          SCOPED_TRACE("vocab " + std::to_string(vocab) + " rank " + std::to_string(rank) + ", " +
                       draft_pick_name(mode) + (spread ? " spread" : "") + (variant == 1 ? " staged" : "") + ", T " + std::to_string(s.temperature) +
                       " top_k " + std::to_string(s.top_k) + " top_p " + std::to_string(s.top_p) + " min_p " +
                       std::to_string(s.min_p));
          const ScanResult fused = run_scan(fixture, request, Scan::FusedStep);
          const ScanResult split = run_scan(fixture, request, Scan::ProductThenSplit);
          ASSERT_EQ(fused.record.status, kScanOk);
          EXPECT_TRUE(same_bytes(fused, split));
          for (int slot = 0; slot < request.depth; ++slot) {
            EXPECT_EQ(split.record.tokens[slot], fused.record.tokens[slot]) << "slot " << slot;
          }
          const ScanResult planted = run_scan(fixture, request, Scan::ProductPlanted);
          planted_equal += same_bytes(fused, planted);
          ++planted_runs;
        }
      }
    }
  }
  // U added twice moves every logit: no run may keep the fused step's bytes.
  EXPECT_EQ(planted_equal, 0) << "of " << planted_runs << ": the planted U gave the fused step's record";
  // The staged combine leaving its last chunk out (a fifth of the row's mass at vocab 20000) moves top-p decisions:
  // some top-p request over fresh rows must draft other tokens than the fused step.
  set_draft_pick_mode(DraftPickMode::Verified);
  set_draft_pick_spread(true);
  int staged_differs = 0;
  const ScanFixture fixture(20000, 64, 96, 9, rng);
  for (int run = 0; run < 12; ++run) {
    DeviceScanRequest request;
    request.anchor = static_cast<int32_t>(rng() % 20000);
    request.depth = fixture.shape.gamma;
    request.anchor_position = 10 + rng() % 5000;
    request.temperature = 1.0f;
    request.top_p = 0.5f;
    request.seed = rng();
    set_draft_pick_staged(false);
    const ScanResult fused = run_scan(fixture, request, Scan::FusedStep);
    set_draft_pick_staged(true, /*planted_skip_last=*/true);
    staged_differs += !same_bytes(fused, run_scan(fixture, request, Scan::ProductThenSplit));
  }
  EXPECT_GT(staged_differs, 0) << "the staged combine without its last chunk gave the fused step's records";
  set_draft_pick_mode(loaded_mode);
  set_draft_pick_spread(loaded_spread);
  set_draft_pick_staged(loaded_staged);
}

}  // namespace
}  // namespace ls::dspark::cuda
#endif  // LS_HAVE_CUDA
