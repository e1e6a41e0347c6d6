// Session 16's launch switches of the CUDA drafter against its default path, bit for bit: the block pass's
// programmatic steps (residual norms, SwiGLU, q/k heads), the block pass and scan as one graph, and absorb_device()
// on a side stream beside the pass (set_absorb_overlap), whose wait a planted fault leaves out.
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

// 1 request (rows <= 16: the skinny o / down GEMMs before the norms) and 5 (cuBLAS), one request sampled: Hf, U,
// tokens and chance bits of each arm equal the default pass's, eagerly, captured and replayed (scratch poisoned
// before every pass).
TEST(CudaDrafterLaunches, TheProgrammaticStepsAndOneGraphGiveTheDefaultPassBits) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, gpu, c, width] = nano;
  std::vector<DraftRequest> requests;
  for (int i = 0; i < 5; ++i) {
    const int length = 11 + 37 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 1600 + i)).ok());
    requests.push_back(request_at(i, length, 90 + 23 * i, i == 3 ? 4 : c.block_size,
                                  i == 1 ? Sampling{0.8f, 0, 1.0f, 0.0f, 11} : Sampling{}));
  }
  ASSERT_TRUE(gpu->persistent_scan(1, true));  // one greedy request: the one-graph pass's scan
  ASSERT_EQ(gpu->programmatic_steps(), 0);
  ASSERT_FALSE(gpu->one_graph());
  for (const size_t count : {size_t{1}, size_t{5}}) {
    const std::span<const DraftRequest> some(requests.data(), count);
    gpu->set_programmatic_steps(0);
    gpu->set_one_graph(false);
    const PassBits reference = poisoned_pass(*gpu, some);
    struct Arm {
      const char* name;
      int steps;
      bool one_graph;
    };
    for (const Arm& arm : {Arm{"programmatic norms", CudaDsparkDrafter::kProgrammaticNorms, false},
                           Arm{"programmatic SwiGLU", CudaDsparkDrafter::kProgrammaticSwiglu, false},
                           Arm{"programmatic heads", CudaDsparkDrafter::kProgrammaticHeads, false},
                           Arm{"every step programmatic", 7, false}, Arm{"one graph", 0, true},
                           Arm{"one graph, every step programmatic", 7, true}}) {
      SCOPED_TRACE(std::string(arm.name) + ", " + std::to_string(count) + " requests");
      gpu->set_programmatic_steps(arm.steps);
      gpu->set_one_graph(arm.one_graph);
      const int64_t failures = gpu->graph_failures(), replays = gpu->graph_replays();
      for (int sighting = 0; sighting < 3; ++sighting) {  // eager, captured, replayed
        SCOPED_TRACE("sighting " + std::to_string(sighting));
        expect_same_pass_bits(poisoned_pass(*gpu, some), reference);
      }
      EXPECT_EQ(gpu->graph_failures(), failures);
      // Captured at the second sighting, replayed at the second and third: one graph a pass where the scan is the
      // persistent one (one request, greedy), else two.
      EXPECT_EQ(gpu->graph_replays() - replays, arm.one_graph && count == 1 ? 2 : 4);
    }
  }
  gpu->set_programmatic_steps(0);
  gpu->set_one_graph(false);
}

// Rounds as the lanes run them (absorb_device() of a few rows per stream, then draft() with no settle between): the
// side-stream absorb leaves every round's drafts and U bits of the drafter-stream absorb, at 1 and 3 streams, with
// and without the one graph; with the side stream held 20 ms before its graph (the pass surely reaches its wait
// first) still; with the wait left out (planted) the pass drafts from stale context rows and some round differs.
TEST(CudaDrafterLaunches, AnAbsorbBesideTheBlockPassLeavesTheDraftsOfTheDrafterStreamAbsorb) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, reference, c, width] = nano;
  constexpr int kTapRows = 64;
  const UploadedTaps uploaded = upload_taps(kTapRows, width, 4242, reference->facts().tap_device);
  struct Arm {
    const char* name;
    bool one_graph;
    int delay_ms;
    bool planted;
  };
  for (const int streams : {1, 3}) {
    for (const Arm& arm : {Arm{"side absorb", false, 0, false}, Arm{"side absorb, one graph", true, 0, false},
                           Arm{"side absorb held 20 ms", false, 20, false},
                           Arm{"side absorb held 20 ms, no wait (planted)", false, 20, true}}) {
      SCOPED_TRACE(std::string(arm.name) + ", " + std::to_string(streams) + " streams");
      std::unique_ptr<CudaDsparkDrafter> expected_drafter = nano.another();
      std::unique_ptr<CudaDsparkDrafter> overlapped = nano.another();
      ASSERT_TRUE(expected_drafter && overlapped);
      overlapped->set_absorb_overlap(true, arm.delay_ms, arm.planted);
      overlapped->set_one_graph(arm.one_graph);
      overlapped->capture_bucket_graphs();  // the pins dropped the graphs: again, as at load
      ASSERT_FALSE(expected_drafter->absorb_overlap());
      // Every stream starts with 20 rows, then absorbs 1..7 rows a round (rows taken from the uploaded taps).
      std::vector<int64_t> lengths(streams, 0);
      int rounds_differing = 0;
      const int64_t side_before = overlapped->side_absorbs();
      constexpr int kRounds = 6;
      for (int round = -1; round < kRounds; ++round) {
        std::vector<TapRows> rows;
        for (int s = 0; s < streams; ++s) {
          const int count = round < 0 ? 20 : 1 + (3 * round + 2 * s) % 7;
          rows.push_back({static_cast<StreamId>(s), lengths[s], (5 * round + 9 * s + 25) % (kTapRows - 20), count});
          lengths[s] += count;
        }
        std::vector<DraftRequest> requests;
        for (int s = 0; s < streams; ++s) {
          requests.push_back(request_at(s, lengths[s], 300 + 13 * round + s, c.block_size));
        }
        PassBits bits[2];
        for (int which = 0; which < 2; ++which) {
          CudaDsparkDrafter& drafter = which == 0 ? *expected_drafter : *overlapped;
          ASSERT_TRUE(drafter.poison_scratch_for_test().ok());
          ASSERT_TRUE(drafter.absorb_device(rows, uploaded.taps).ok());
          bits[which].drafts = drafter.draft(requests);  // no settle: the pass follows the absorb, as in the lanes
          bits[which].hidden = drafter.last_final_hidden().value();
          bits[which].logits = drafter.last_base_logits().value();
          ASSERT_TRUE(drafter.settle().ok());
        }
        if (round < 0) continue;  // the first absorb (20 rows a stream) and pass
        SCOPED_TRACE("round " + std::to_string(round));
        if (arm.planted) {
          const bool same = std::memcmp(bits[0].logits.data(), bits[1].logits.data(),
                                        bits[0].logits.size() * sizeof(float)) == 0;
          rounds_differing += same ? 0 : 1;
        } else {
          expect_same_pass_bits(bits[1], bits[0]);
        }
      }
      // Every absorb of the overlapped drafter took the side stream (one chunk, its bucket's graph captured).
      EXPECT_EQ(overlapped->side_absorbs() - side_before, kRounds + 1);
      EXPECT_EQ(overlapped->graph_failures(), 0);
      if (arm.planted) {
        EXPECT_GT(rounds_differing, 0) << "a pass that did not wait for the side absorb drafted what the waiting "
                                          "pass drafts: the bit test cannot see a missing wait";
      }
    }
  }
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
