// The verify-forward switches on whole targets: the pipeline GEMMs spread over fewer CTAs above one row
// (set_decode_pipe_spread) and taking 17..32-row windows (set_decode_pipe_rows32), the taps written by the norm launch
// after a tapped layer (CudaTarget::set_taps_in_norm), all session 13's: every row of windows of 1..16 rows and of forwards of 2 and 16 streams (up to 32 and 256 rows)
// keeps the one-row bits of the old picks, taps included, on the small dense / MoE targets (hidden 64: the norm's
// two-launch fallback carries the tap) and the nano target (the one-launch norm); a planted fault (the norm writing
// the next tap slot) turns the taps red on both paths.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_target_test_util.h"

namespace ls::lfm2 {
namespace {

using namespace cuda_test;

// The switches set for one scope (graphs dropped at each change), then put back as they were.
struct Arm {
  int spread = 1;
  bool taps_in_norm = false, rows32 = false;
};
struct Switches {
  Switches(CudaTarget& target, const Arm& arm)
      : target(target),
        before{cuda::decode_pipe_spread(), CudaTarget::taps_in_norm(), cuda::decode_pipe_rows32()} {
    set(arm);
  }
  ~Switches() {
    CudaTarget::set_taps_in_norm_fault_for_test(false);
    set(before);
  }
  void set(const Arm& arm) {
    cuda::set_decode_pipe_spread(arm.spread);
    cuda::set_decode_pipe_rows32(arm.rows32);
    CudaTarget::set_taps_in_norm(arm.taps_in_norm);
    target.set_graphs(false);
    target.set_graphs(true);
  }
  CudaTarget& target;
  Arm before;
};

// Each target under test with its one-row oracle under the old picks (no spread, taps by copy nodes, no rows32).
template <typename Check>
int for_each_target(int token_count, uint64_t seed, const Check& check) {
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(small_cuda_target(false));
  targets.push_back(small_cuda_target(true));
  if (auto nano = nano_cuda_target()) targets.push_back(std::move(nano));
  int checked = 0;
  for (const std::unique_ptr<Target>& target : targets) {
    auto* cuda_target = dynamic_cast<CudaTarget*>(target.get());
    EXPECT_NE(cuda_target, nullptr);
    if (cuda_target == nullptr) continue;
    const std::vector<int32_t> tokens = testing::random_tokens(token_count, seed, target->facts().vocab_size);
    std::vector<RowBits> oracle;
    {
      const Switches old_picks(*cuda_target, Arm{});
      oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    }
    check(*cuda_target, tokens, oracle, checked);
    ++checked;
  }
  return checked;
}

TEST(CudaTarget, TheVerifyForwardSwitchesGiveTheDefaultOneRowBitsAtEveryWidthAndStream) {
  LS_SKIP_WITHOUT_DEVICE();
  const Arm arms[] = {{2, false, false}, {4, false, false}, {1, true, false}, {1, false, true}, {2, true, true}};
  const int checked = for_each_target(40, 7, [&](CudaTarget& target, const std::vector<int32_t>& tokens,
                                                  const std::vector<RowBits>& oracle, int index) {
    for (const Arm& arm : arms) {
      const Switches on(target, arm);
      EXPECT_EQ(width_mismatches(target, tokens, oracle), 0)
          << "target " << index << ", spread " << arm.spread << (arm.taps_in_norm ? ", taps in the norm" : "")
          << (arm.rows32 ? ", rows32" : "");
    }
    for (const Arm& arm : {Arm{2, true, false}, Arm{2, true, true}}) {
      const Switches on(target, arm);
      EXPECT_EQ(check_many_streams(target, 16, 24, 16), 256) << "target " << index << ", rows32 " << arm.rows32;
      EXPECT_EQ(check_many_streams(target, 2, 40, 16), 32) << "target " << index << ", rows32 " << arm.rows32;
    }
  });
  EXPECT_GE(checked, 2);
}

TEST(CudaTarget, APlantedTapSlotFaultUnderTapsInTheNormTurnsTheTapsRed) {
  LS_SKIP_WITHOUT_DEVICE();
  const int checked = for_each_target(24, 9, [](CudaTarget& target, const std::vector<int32_t>& tokens,
                                                const std::vector<RowBits>& oracle, int index) {
    const Switches on(target, Arm{1, true, false});
    CudaTarget::set_taps_in_norm_fault_for_test(true);
    target.set_graphs(false);
    target.set_graphs(true);
    EXPECT_GT(width_mismatches(target, tokens, oracle, true), 16 * 24 / 2)
        << "target " << index << ": the tap written to the next slot went unseen";
  });
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace ls::lfm2
#endif  // LS_HAVE_CUDA
