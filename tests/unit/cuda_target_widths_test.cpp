// The CUDA target's bitwise batch invariance: every window width up to 16 and forwards of many streams (up to 256
// rows) give the one-row bits, on small dense and MoE targets and the nano target, with step10's launch switches too.
// Shared setup: cuda_target_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_target_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2 {
namespace {

using namespace cuda_test;

TEST(CudaTarget, EveryWindowWidthUpTo16GivesTheOneRowBitsOnDenseAndMoe) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    const std::vector<int32_t> tokens = testing::random_tokens(40, 3);
    const std::vector<RowBits> oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    EXPECT_EQ(width_mismatches(*target, tokens, oracle), 0) << (moe ? "moe" : "dense");
  }
}

TEST(CudaTarget, ForwardsOfManyStreamsUpTo256RowsGiveTheOneRowBitsOnDenseAndMoe) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    EXPECT_EQ(check_many_streams(*target, 16, 40, 16), 256) << (moe ? "moe" : "dense");
  }
}

TEST(CudaTarget, NanoTargetIsBatchInvariantAcrossWidthsAndStreams) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_cuda_target();
  if (!target) GTEST_SKIP() << "no nano target";
  EXPECT_EQ(target->facts().exact_width, 16) << "the load-time probe must find every width up to 16 exact";
  EXPECT_EQ(check_many_streams(*target, 16, 24, 16), 256);
}

// step10's launch switches, all on (the ShortConv's and the attention tiles' early loads; the last residual add in
// the draw's final norm): the default launches' one-row bits, then every row of 16 streams in
// windows up to 16 rows (256-row forwards) equal to the one-row run, on the small dense and MoE targets (head_dim 16:
// the KV write's two-launch fallback), the nano target (head_dim 64: the one launch) and a small dense target
// without taps (the final norm fused: taps of the last layer keep the add's launch). Graphs dropped at each
// switch (a captured graph keeps the launches it was captured with).
TEST(CudaTarget, TheStep10LaunchSwitchesGiveTheDefaultOneRowBitsAtEveryWidthAndStream) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Switches {
    Switches(CudaTarget& target, bool on)
        : target(target), conv_before(gpu::short_conv_early()), attention_before(gpu::attention_tiles_early()),
          final_before(CudaTarget::final_norm_fused()) {
      set(on, on, on);
    }
    ~Switches() { set(conv_before, attention_before, final_before); }
    void set(bool conv, bool attention, bool final_norm) {
      gpu::set_short_conv_early(conv);
      gpu::set_attention_tiles_early(attention);
      CudaTarget::set_final_norm_fused(final_norm);
      target.set_graphs(false);
      target.set_graphs(true);
    }
    CudaTarget& target;
    bool conv_before, attention_before, final_before;
  };
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(small_cuda_target(false));
  targets.push_back(small_cuda_target(true));
  targets.push_back(nano_cuda_target());
  {  // no taps: the last residual add goes into the draw's final norm
    const io::ModelConfig config = testing::small_config(false);
    auto made = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 9), cuda_options());
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    targets.push_back(std::move(made).value());
  }
  int checked = 0;
  for (const std::unique_ptr<Target>& target : targets) {
    auto* cuda_target = dynamic_cast<CudaTarget*>(target.get());
    if (cuda_target == nullptr) continue;  // no nano target in this checkout
    const std::vector<int32_t> tokens = testing::random_tokens(24, 5, target->facts().vocab_size);
    std::vector<RowBits> oracle;
    {
      const Switches off(*cuda_target, false);
      oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    }
    const Switches on(*cuda_target, true);
    EXPECT_TRUE(one_row_oracle(*target, 1, tokens, stream_sampling(1)) == oracle) << "target " << checked;
    EXPECT_EQ(check_many_streams(*target, 16, 24, 16), 256) << "target " << checked;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

}  // namespace
}  // namespace ls::lfm2
#endif  // LS_HAVE_CUDA
