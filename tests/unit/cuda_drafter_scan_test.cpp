// The drafter's Markov scans and picks on the CUDA device: the fused step, the persistent scan and the split pick
// against the paths they replace (tokens and chance bits), and the device keyed draw against draw_token bit for bit.
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <optional>
#include <random>

#include "cuda_drafter_test_util.h"
#include "draft/dspark/cuda/scan_phases.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;
using cuda::PersistentHandoff;

// The fused scan step against the gather + cuBLAS GEMM + pick path on the same block pass: only the W2 dot's fp32
// order differs, so the chains agree (up to a near-tie flip, after which the chain may differ) and, where they
// agree, the chance bits are equal (the confidence reads the same e = W1[previous] either way).
TEST(CudaDrafter, TheFusedScanDraftsTheTokensAndChanceBitsOfTheGemmScan) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load(cuda_options(12)));
  auto& [target, gpu, c, width] = nano;
  gpu->set_graphs(false);
  // 11 requests: two request groups of the fused kernel (8 + 3), mixed depths, greedy and sampled.
  std::vector<DraftRequest> requests;
  std::mt19937 rng(8);
  for (int i = 0; i < 11; ++i) {
    const int length = 5 + 23 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 300 + i)).ok());
    requests.push_back(request_at(i, length, static_cast<int32_t>(rng() % c.vocab_size), 1 + i % c.block_size));
    if (i % 3 == 1) requests.back().sampling = Sampling{0.9f, 0, 1.0f, 0.0f, static_cast<uint64_t>(50 + i)};
    if (i % 3 == 2) requests.back().sampling = Sampling{1.1f, 20, 0.9f, 0.02f, static_cast<uint64_t>(70 + i)};
  }
  gpu->set_fused_scan(false);
  ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
  const std::vector<Draft> reference = gpu->draft(requests);
  gpu->set_fused_scan(true);
  ASSERT_TRUE(gpu->fused_scan(11));
  ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
  const std::vector<Draft> fused = gpu->draft(requests);
  int equal = 0, total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(reference[i].status.ok()) << reference[i].status.to_string();
    ASSERT_TRUE(fused[i].status.ok()) << fused[i].status.to_string();
    ASSERT_EQ(fused[i].tokens.size(), static_cast<size_t>(requests[i].depth));
    for (int slot = 0; slot < requests[i].depth; ++slot, ++total) {
      if (fused[i].tokens[slot] != reference[i].tokens[slot]) break;
      ++equal;
      EXPECT_EQ(std::bit_cast<uint32_t>(fused[i].chances[slot]), std::bit_cast<uint32_t>(reference[i].chances[slot]))
          << "slot " << slot;
    }
  }
  // A single request takes the one-request kernel (grid of chunks, one group): each of three alone at full depth,
  // against the GEMM scan, with the W2 cache hint and the overlapping launches on and off (the same bits).
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("single request " + std::to_string(i));
    DraftRequest single = requests[i];
    single.depth = c.block_size;
    gpu->set_fused_scan(false);
    ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
    const std::vector<Draft> alone = gpu->draft(std::span<const DraftRequest>(&single, 1));
    ASSERT_TRUE(alone[0].status.ok()) << alone[0].status.to_string();
    gpu->set_fused_scan(true);
    std::vector<Draft> tuned;
    for (const bool on : {true, false}) {
      gpu->set_launch_tuning(on, on);
      ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
      tuned.push_back(gpu->draft(std::span<const DraftRequest>(&single, 1))[0]);
      ASSERT_TRUE(tuned.back().status.ok()) << tuned.back().status.to_string();
    }
    EXPECT_EQ(tuned[0].tokens, tuned[1].tokens);
    for (int slot = 0; slot < c.block_size; ++slot) {
      EXPECT_EQ(std::bit_cast<uint32_t>(tuned[0].chances[slot]), std::bit_cast<uint32_t>(tuned[1].chances[slot]));
    }
    for (int slot = 0; slot < c.block_size; ++slot, ++total) {
      if (tuned[0].tokens[slot] != alone[0].tokens[slot]) break;
      ++equal;
      EXPECT_EQ(std::bit_cast<uint32_t>(tuned[0].chances[slot]), std::bit_cast<uint32_t>(alone[0].chances[slot]))
          << "slot " << slot;
    }
  }
  std::printf("[ fused scan ] %d of %d slots equal to the GEMM scan before any flip\n", equal, total);
  EXPECT_GE(equal * 20, total * 19) << equal << " of " << total;
}

TEST(CudaDrafter, TheDeviceKeyedDrawEqualsDrawTokenBitForBit) {
  LS_SKIP_WITHOUT_DEVICE();
  const int64_t vocab = 3000;
  std::vector<Sampling> samplings;
  auto add = [&](float temperature, int top_k, float top_p, float min_p) {
    Sampling s;
    s.temperature = temperature;
    s.top_k = top_k;
    s.top_p = top_p;
    s.min_p = min_p;
    s.seed = 1000 + samplings.size();
    samplings.push_back(s);
  };
  add(0, 0, 1, 0);
  add(0.7f, 0, 1, 0);
  add(1.3f, 5, 1, 0);
  add(1.0f, 50, 0.9f, 0);
  add(0.8f, 0, 0.5f, 0);
  add(1.0f, 0, 1, 0.1f);
  add(0.9f, 40, 0.8f, 0.05f);
  add(1.0f, 1, 1, 0);
  add(2.0f, 0, 0.97f, 0.02f);
  const int repeats = 12;  // each sampling on continuous logits, then (no top-p) on heavily tied logits
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits;
  std::vector<cuda::DeviceScanRequest> device_samplings;
  std::vector<int64_t> positions;
  std::vector<int32_t> expected;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    for (const Sampling& s : samplings) {
      const bool tied = repeat % 2 == 1;
      if (tied && s.top_p < 1.0f) continue;  // exact ties put the top-p cut on a rounding boundary
      std::vector<float> row(static_cast<size_t>(vocab));
      for (float& value : row) value = tied ? std::round(normal(rng) / 2) : normal(rng);
      const int64_t position = 5 + repeat * 31;
      cuda::DeviceScanRequest d;
      d.temperature = s.temperature;
      d.top_k = s.top_k;
      d.top_p = s.top_p;
      d.min_p = s.min_p;
      d.seed = s.seed;
      device_samplings.push_back(d);
      positions.push_back(position);
      expected.push_back(draw_token(row, s, position));
      logits.insert(logits.end(), row.begin(), row.end());
    }
  }
  const int rows = static_cast<int>(expected.size());
  ls::cuda::DeviceBuffer<float> device_logits;
  ls::cuda::DeviceBuffer<cuda::DeviceScanRequest> device_requests;
  ls::cuda::DeviceBuffer<int64_t> device_positions;
  ls::cuda::DeviceBuffer<int32_t> device_picks;
  ASSERT_TRUE(device_logits.allocate(logits.size()).ok());
  ASSERT_TRUE(device_requests.allocate(rows).ok());
  ASSERT_TRUE(device_positions.allocate(rows).ok());
  ASSERT_TRUE(device_picks.allocate(rows).ok());
  cudaMemcpy(device_logits.data(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(device_requests.data(), device_samplings.data(), rows * sizeof(cuda::DeviceScanRequest),
             cudaMemcpyHostToDevice);
  cudaMemcpy(device_positions.data(), positions.data(), rows * 8, cudaMemcpyHostToDevice);
  cudaMemset(device_picks.data(), 0xff, rows * 4);  // -1: an unwritten pick cannot pass
  ASSERT_TRUE(cuda::draw_rows_on_device(device_logits.data(), rows, vocab, device_requests.data(),
                                        device_positions.data(), device_picks.data(), nullptr)
                  .ok());
  std::vector<int32_t> picks(static_cast<size_t>(rows));
  ASSERT_EQ(cudaMemcpy(picks.data(), device_picks.data(), rows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int row = 0; row < rows; ++row) EXPECT_EQ(picks[row], expected[row]) << "row " << row;
  EXPECT_GT(rows, 60);
}

// The persistent scan (one cooperative launch for every slot, W2 held on chip) computes each logit with the fused
// step's dot order, so greedy requests draft the same tokens and chance bits: alone (the one-request kernel) and in
// groups of up to 8 with mixed depths (the group kernel; more requests: a launch per 8), scratch poisoned before
// every pass; its graph (one per request count, any depth) replays the eager bits at depths changing from call to
// call; sampled requests keep the other scans; a planted fault fails only its request, by name and slot. All of it
// with both handoffs of a slot's CTA picks (counter barrier, flagged words), each with the 8-lane dot and the
// broadcast dot (session 14; one request: a group takes the 8-lane dot); the phase clocks change no draft.
TEST(CudaDrafter, ThePersistentScanDraftsTheTokensAndChanceBitsOfTheFusedStep) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load(cuda_options(12)));
  auto& [target, gpu, c, width] = nano;
  gpu->set_one_graph(false);  // the replays counted below are the two graphs' (the one graph: overlap test)
  gpu->set_graphs(false);
  std::vector<DraftRequest> requests;
  std::mt19937 rng(21);
  for (int i = 0; i < 10; ++i) {
    const int length = 3 + 29 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 500 + i)).ok());
    requests.push_back(request_at(i, length, static_cast<int32_t>(rng() % c.vocab_size), 1 + (i * 5) % c.block_size));
  }
  auto draft_with = [&](bool persistent, std::span<const DraftRequest> batch) {
    gpu->set_fused_scan(persistent ? std::nullopt : std::optional<bool>(true));
    gpu->set_persistent_scan(persistent);
    EXPECT_EQ(gpu->persistent_scan(static_cast<int>(batch.size()), true), persistent);
    EXPECT_TRUE(gpu->poison_scratch_for_test().ok());
    return gpu->draft(batch);
  };
  // Both handoffs of a slot's CTA picks (the counter barrier, session 5; the flagged words, session 8), each with
  // the 8-lane dot and the broadcast dot (session 14).
  for (const ScanArm& arm : scan_arms()) {
    SCOPED_TRACE(arm.name());
    set_scan_arm(*gpu, arm);
    gpu->set_graphs(false);
    // Alone, at full depth and at its own depth.
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE("single request " + std::to_string(i));
      for (const int depth : {c.block_size, requests[i].depth}) {
        DraftRequest single = requests[i];
        single.depth = depth;
        const std::span<const DraftRequest> one(&single, 1);
        expect_same_drafts(draft_with(true, one), draft_with(false, one));
      }
    }
    // Groups of 2, 5 and 8 requests (the group kernel), mixed depths, and 10 (two launches: 8 + 2).
    for (const size_t size : {2, 5, 8, 10}) {
      SCOPED_TRACE("group of " + std::to_string(size));
      const std::span<const DraftRequest> group(requests.data(), size);
      expect_same_drafts(draft_with(true, group), draft_with(false, group));
    }
    // Sampled requests keep the other scans.
    gpu->set_persistent_scan(true);
    EXPECT_FALSE(gpu->persistent_scan(1, false));
    EXPECT_FALSE(gpu->persistent_scan(10, false));
    // Graphs: one captured shape serves depths changing from call to call, with the eager bits.
    gpu->set_persistent_scan(true);
    gpu->set_fused_scan(std::nullopt);
    const int64_t replays_before = gpu->graph_replays();
    for (const int depth : {c.block_size, 2, c.block_size, 4, 1, c.block_size}) {
      SCOPED_TRACE("graphed depth " + std::to_string(depth));
      DraftRequest single = requests[1];
      single.depth = depth;
      const std::span<const DraftRequest> one(&single, 1);
      gpu->set_graphs(false);
      ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
      const std::vector<Draft> eager = gpu->draft(one);
      gpu->set_graphs(true);
      ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
      expect_same_drafts(gpu->draft(one), eager);
    }
    EXPECT_EQ(gpu->graph_failures(), 0);
    // 6 graphed passes: the block pass and the scan each captured at the second and replayed from then on.
    EXPECT_EQ(gpu->graph_replays() - replays_before, 2 * 5);
  }
  // Planted: the flagged combine leaving out the odd-numbered CTAs' words (half the vocabulary) drafts other tokens
  // (the comparison sees a combine that misses picks), with either dot.
  for (const bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "broadcast dot" : "8-lane dot");
    set_scan_arm(*gpu, ScanArm{PersistentHandoff::Flags, broadcast});
    gpu->set_graphs(false);
    gpu->set_scan_planted_drop(true);
    int differing = 0;
    for (int i = 0; i < 4; ++i) {
      DraftRequest single = requests[i];
      single.depth = c.block_size;
      const std::span<const DraftRequest> one(&single, 1);
      const std::vector<Draft> planted = draft_with(true, one), fused = draft_with(false, one);
      differing += planted[0].tokens != fused[0].tokens;
    }
    gpu->set_scan_planted_drop(false);
    EXPECT_GT(differing, 0) << "the flagged combine without half its words drafted the fused step's tokens";
  }
  // The phase clocks (drafter_bench ":ph", session 13) only measure: the same drafts, every phase counted.
  {
    set_scan_arm(*gpu, ScanArm{PersistentHandoff::Flags, false});
    gpu->set_graphs(false);
    DraftRequest single = requests[0];
    single.depth = c.block_size;
    const std::span<const DraftRequest> one(&single, 1);
    const std::vector<Draft> plain = draft_with(true, one);
    cuda::set_scan_phase_clocks(true);
    const std::vector<Draft> clocked = draft_with(true, one);
    const cuda::ScanPhaseClocks clocks = cuda::take_scan_phase_clocks();
    cuda::set_scan_phase_clocks(false);
    expect_same_drafts(clocked, plain);
    EXPECT_EQ(clocks.launches, 1u);
    EXPECT_EQ(clocks.slots, static_cast<uint64_t>(c.block_size));
    EXPECT_GT(clocks.ctas, 1u);
    for (int p = 0; p < cuda::kScanPhases; ++p) {
      // (the confidence and its barrier are phases only with a confidence head; else the records' phase holds them)
      const bool confident_phase = p == cuda::kFirstTailPhase || p == cuda::kFirstTailPhase + 1;
      if (!confident_phase || c.has_confidence) {
        EXPECT_GT(clocks.sums[p], 0u) << cuda::kScanPhaseNames[p];
      }
    }
    draft_with(true, one);
    EXPECT_EQ(cuda::take_scan_phase_clocks().launches, 0u) << "clocks off: nothing counted";
  }
  // Planted faults: the planted stream fails by name at its slot, the other drafts its unplanted tokens.
  gpu->set_graphs(false);
  gpu->set_persistent_handoff(PersistentHandoff::Counter);
  const std::vector<Draft> clean = draft_with(true, std::span<const DraftRequest>(requests.data(), 2));
  const std::pair<const char*, int PlantedFaults::*> kinds[] = {
      {"non-finite draft logit", &PlantedFaults::nan_logit_slot},
      {"non-finite draft confidence", &PlantedFaults::inf_confidence_slot},
      {"outside vocabulary", &PlantedFaults::out_of_range_pick_slot}};
  for (const auto& [message, field] : kinds)
  for (const ScanArm& arm : scan_arms()) {
    for (const int slot : {0, requests[1].depth - 1}) {
      SCOPED_TRACE(std::string(message) + " at slot " + std::to_string(slot) + ", " + arm.name());
      DrafterOptions planted = cuda_options(12);
      planted.faults.enabled = true;
      planted.faults.stream = 1;
      planted.faults.*field = slot;
      std::unique_ptr<CudaDsparkDrafter> faulty = nano.another(planted);
      ASSERT_TRUE(faulty);
      faulty->set_persistent_scan(true);
      set_scan_arm(*faulty, arm);
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(faulty->absorb(i, 0, requests[i].anchor_position,
                                   testing::random_taps(requests[i].anchor_position, width, 500 + i))
                        .ok());
      }
      ASSERT_TRUE(faulty->persistent_scan(2, true));
      const std::vector<Draft> drafts = faulty->draft(std::span<const DraftRequest>(requests.data(), 2));
      EXPECT_EQ(drafts[1].status.code(), ErrorCode::DraftNonfinite);
      EXPECT_NE(drafts[1].status.message().find(message), std::string::npos) << drafts[1].status.message();
      EXPECT_NE(drafts[1].status.message().find("slot " + std::to_string(slot)), std::string::npos);
      ASSERT_TRUE(drafts[0].status.ok()) << drafts[0].status.to_string();
      EXPECT_EQ(drafts[0].tokens, clean[0].tokens);
      // Alone (the one-request kernel).
      const std::vector<Draft> alone = faulty->draft(std::span<const DraftRequest>(&requests[1], 1));
      EXPECT_EQ(alone[0].status.code(), ErrorCode::DraftNonfinite);
      EXPECT_NE(alone[0].status.message().find("slot " + std::to_string(slot)), std::string::npos);
    }
  }
}

// The GEMM scan's pick in two launches (vocab chunks over many CTAs, then a CTA per request) drafts the tokens and
// chance bits of the one-CTA pick: 1, 5 and 11 requests (buckets 1, 6, 12), greedy and sampled, depths 1..block,
// through graphs, scratch poisoned before every pass; a planted NaN logit (id V/2: the second chunk) fails only its
// stream, by name and slot.
TEST(CudaDrafter, TheSplitPickDraftsTheTokensAndChanceBitsOfTheOneBlockPick) {
  LS_SKIP_WITHOUT_DEVICE();
  DrafterOptions options = cuda_options(12);
  options.faults.enabled = true;
  options.faults.stream = 3;
  options.faults.nan_logit_slot = 1;
  NanoDrafter nano;
  ASSERT_TRUE(nano.load(options));
  auto& [target, gpu, c, width] = nano;
  gpu->set_fused_scan(false);  // the GEMM scan for every count (no persistent or fused step)
  ASSERT_GE(cuda::split_pick_chunks(c.vocab_size), 2) << "the test needs more than one chunk";
  std::vector<DraftRequest> requests;
  const Sampling samplings[] = {Sampling{}, Sampling{0.9f, 0, 0.9f, 0.0f, 3}, Sampling{1.3f, 20, 1.0f, 0.02f, 8}};
  for (int i = 0; i < 11; ++i) {
    const int length = 5 + 23 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 800 + i)).ok());
    requests.push_back(request_at(i, length, 200 + 13 * i, 1 + i % c.block_size, samplings[i % 3]));
  }
  auto draft_with = [&](bool split, std::span<const DraftRequest> some) {
    gpu->set_split_pick(split);
    gpu->capture_bucket_graphs();
    EXPECT_TRUE(gpu->poison_scratch_for_test().ok());
    return gpu->draft(some);
  };
  for (const size_t count : {size_t{1}, size_t{5}, size_t{11}}) {
    SCOPED_TRACE(std::to_string(count) + " requests");
    const std::span<const DraftRequest> some(requests.data(), count);
    const std::vector<Draft> one = draft_with(false, some);
    const int64_t replays = gpu->graph_replays();
    const std::vector<Draft> split = draft_with(true, some);
    EXPECT_EQ(gpu->graph_replays() - replays, 2) << "block pass and scan replayed from the load-time capture";
    for (size_t i = 0; i < count; ++i) {
      if (requests[i].stream == 3) {
        EXPECT_EQ(split[i].status.code(), ErrorCode::DraftNonfinite);
        EXPECT_NE(split[i].status.message().find("non-finite draft logit at draft slot 1 of stream 3"),
                  std::string::npos)
            << split[i].status.message();
        EXPECT_EQ(one[i].status.message(), split[i].status.message());
        continue;
      }
      ASSERT_TRUE(one[i].status.ok()) << one[i].status.to_string();
      ASSERT_TRUE(split[i].status.ok()) << split[i].status.to_string();
      EXPECT_EQ(split[i].tokens, one[i].tokens) << "request " << i;
      ASSERT_EQ(split[i].chances.size(), one[i].chances.size());
      for (size_t k = 0; k < split[i].chances.size(); ++k) {
        EXPECT_EQ(std::bit_cast<uint32_t>(split[i].chances[k]), std::bit_cast<uint32_t>(one[i].chances[k]))
            << "request " << i << " slot " << k;
      }
    }
  }
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
