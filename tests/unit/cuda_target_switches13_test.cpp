// Session 13's switches on whole targets: the pipeline GEMMs spread over fewer CTAs above one row
// (set_decode_pipe_spread) and taking 17..32-row windows (set_decode_pipe_rows32), the taps written by the norm launch
// after a tapped layer (CudaTarget::set_taps_in_norm) and 33..64-row forwards as two launches (set_decode_pipe_rows64): every row of windows of 1..16 rows and of
// forwards of 2, 4 and 16 streams (up to 32, 64 and 256 rows) keeps the one-row bits of the old picks, taps included,
// on the small dense / MoE targets (hidden 64: the norm's two-launch fallback carries the tap) and the nano target (the
// one-launch norm); a planted fault (the norm writing the next tap slot) turns the taps red on both paths.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_target_test_util.h"

namespace ls::lfm2 {
namespace {

using namespace cuda_test;

// The three switches set for one scope (graphs dropped at each change), then put back as they were.
struct Switches13 {
  Switches13(CudaTarget& target, int spread, bool taps_in_norm, bool rows32 = false)
      : target(target), spread_before(cuda::decode_pipe_spread()), taps_before(CudaTarget::taps_in_norm()),
        rows32_before(cuda::decode_pipe_rows32()) {
    set(spread, taps_in_norm, rows32);
  }
  ~Switches13() {
    CudaTarget::set_taps_in_norm_fault_for_test(false);
    set(spread_before, taps_before, rows32_before);
  }
  void set(int spread, bool taps_in_norm, bool rows32) {
    cuda::set_decode_pipe_spread(spread);
    cuda::set_decode_pipe_rows32(rows32);
    CudaTarget::set_taps_in_norm(taps_in_norm);
    target.set_graphs(false);
    target.set_graphs(true);
  }
  CudaTarget& target;
  int spread_before;
  bool taps_before, rows32_before;
};

// Rows of one stream's windows (every width 1..16 in turn over `tokens`) whose bits differ from the oracle's;
// `taps_only`: count the rows whose taps differ.
int width_mismatches(Target& target, const std::vector<int32_t>& tokens, const std::vector<RowBits>& oracle,
                     bool taps_only = false) {
  const int64_t V = target.facts().vocab_size;
  int mismatches = 0;
  for (int width = 1; width <= 16; ++width) {
    target.release(2);
    for (size_t begin = 0; begin < tokens.size(); begin += width) {
      const size_t rows = std::min<size_t>(width, tokens.size() - begin);
      Window window;
      window.stream = 2;
      window.tokens = std::span<const int32_t>(tokens.data() + begin, rows);
      window.want_logits = true;
      window.sampling = stream_sampling(1);
      Result<Verified> v = target.forward(std::span<const Window>(&window, 1));
      EXPECT_TRUE(v.ok()) << v.status().to_string();
      if (!v.ok()) return -1;
      const int64_t tap_width = static_cast<int64_t>(v->taps.size() / rows);
      for (size_t r = 0; r < rows; ++r) {
        const RowBits got = row_bits(*v, static_cast<int64_t>(r), V, tap_width);
        mismatches += taps_only ? got.taps != oracle[begin + r].taps : !(got == oracle[begin + r]);
      }
      EXPECT_TRUE(target.commit(2, static_cast<int>(rows)).ok());
    }
  }
  target.release(2);
  return mismatches;
}

std::vector<std::unique_ptr<Target>> targets_under_test() {
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(small_cuda_target(false));
  targets.push_back(small_cuda_target(true));
  if (auto nano = nano_cuda_target()) targets.push_back(std::move(nano));
  return targets;
}

TEST(CudaTarget, TheSession13SwitchesGiveTheDefaultOneRowBitsAtEveryWidthAndStream) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Arm {
    int spread;
    bool taps_in_norm, rows32;
  };
  const Arm arms[] = {{2, false, false}, {4, false, false}, {1, true, false}, {1, false, true}, {2, true, true}};
  int checked = 0;
  for (const std::unique_ptr<Target>& target : targets_under_test()) {
    auto* cuda_target = dynamic_cast<CudaTarget*>(target.get());
    ASSERT_NE(cuda_target, nullptr);
    const std::vector<int32_t> tokens = testing::random_tokens(40, 7, target->facts().vocab_size);
    std::vector<RowBits> oracle;
    {
      const Switches13 defaults(*cuda_target, 1, false);
      oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    }
    for (const Arm& arm : arms) {
      const Switches13 on(*cuda_target, arm.spread, arm.taps_in_norm, arm.rows32);
      EXPECT_EQ(width_mismatches(*target, tokens, oracle), 0)
          << "target " << checked << ", spread " << arm.spread << (arm.taps_in_norm ? ", taps in the norm" : "")
          << (arm.rows32 ? ", rows32" : "");
    }
    for (const bool rows32 : {false, true}) {
      const Switches13 all(*cuda_target, 2, true, rows32);
      EXPECT_EQ(check_many_streams(*target, 16, 24, 16), 256) << "target " << checked << (rows32 ? ", rows32" : "");
      EXPECT_EQ(check_many_streams(*target, 2, 40, 16), 32) << "target " << checked << (rows32 ? ", rows32" : "");
    }
    {  // 33..64-row forwards as two pipeline launches
      const Switches13 all(*cuda_target, 2, true, true);
      const bool rows64 = cuda::decode_pipe_rows64();
      cuda::set_decode_pipe_rows64(true);
      cuda_target->set_graphs(false);
      cuda_target->set_graphs(true);
      EXPECT_EQ(check_many_streams(*target, 4, 40, 16), 64) << "target " << checked << ", rows64";
      cuda::set_decode_pipe_rows64(rows64);
    }
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

TEST(CudaTarget, APlantedTapSlotFaultUnderTapsInTheNormTurnsTheTapsRed) {
  LS_SKIP_WITHOUT_DEVICE();
  int checked = 0;
  for (const std::unique_ptr<Target>& target : targets_under_test()) {
    auto* cuda_target = dynamic_cast<CudaTarget*>(target.get());
    ASSERT_NE(cuda_target, nullptr);
    const std::vector<int32_t> tokens = testing::random_tokens(24, 9, target->facts().vocab_size);
    std::vector<RowBits> oracle;
    {
      const Switches13 defaults(*cuda_target, 1, false);
      oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    }
    const Switches13 on(*cuda_target, 1, true);
    CudaTarget::set_taps_in_norm_fault_for_test(true);
    cuda_target->set_graphs(false);
    cuda_target->set_graphs(true);
    EXPECT_GT(width_mismatches(*target, tokens, oracle, true), 16 * 24 / 2)
        << "target " << checked << ": the tap written to the next slot went unseen";
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace ls::lfm2
#endif  // LS_HAVE_CUDA
