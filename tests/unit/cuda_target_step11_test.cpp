// step11's switches on whole targets past the first 128-key attention chunk (where decode rows and windows split): the
// ticket fold (set_attention_ticket), two-chunk windows walked by one CTA (set_attention_split_from 3), the norms fused
// into the decode GEMMs on the held schedule (set_decode_norm_fusion + set_decode_norm_held): the default launches'
// one-row bits on the small dense and MoE targets and the nano target (a stream of 160 tokens), and every row of 4
// streams in windows up to 16 rows equal to the one-row run. Graphs dropped at each switch (a captured graph keeps
// the launches it was captured with). Shared setup: cuda_target_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "compute/cuda/decode_norm_schedule.h"
#include "cuda_target_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2 {
namespace {

using namespace cuda_test;

// The switches of one arm for the scope; the ones before it after.
struct Step11Switches {
  Step11Switches(CudaTarget& target, bool ticket, int split_from, bool held_fused)
      : target(target), ticket_before(gpu::attention_ticket_fold()), split_before(gpu::attention_split_from()),
        held_before(cuda::decode_norm_held()), fused_before(target.decode_norm_fusion()) {
    set(ticket, split_from, held_fused, held_fused);
  }
  ~Step11Switches() { set(ticket_before, split_before, held_before, fused_before); }
  void set(bool ticket, int split_from, bool held, bool fused) {
    gpu::set_attention_ticket(ticket);
    gpu::set_attention_split_from(split_from);
    cuda::set_decode_norm_held(held);
    target.set_decode_norm_fusion(fused);
    target.set_graphs(false);
    target.set_graphs(true);
  }
  CudaTarget& target;
  bool ticket_before;
  int split_before;
  bool held_before, fused_before;
};

TEST(CudaTargetStep11, TheTicketFoldSplitFromAndHeldFusedNormsGiveTheDefaultOneRowBitsPastTheFirstChunk) {
  LS_SKIP_WITHOUT_DEVICE();
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(small_cuda_target(false));
  targets.push_back(small_cuda_target(true));
  targets.push_back(nano_cuda_target());
  struct Arm {
    bool ticket;
    int split_from;
    bool held_fused;
  };
  int checked = 0;
  for (const std::unique_ptr<Target>& target : targets) {
    auto* cuda_target = dynamic_cast<CudaTarget*>(target.get());
    if (cuda_target == nullptr) continue;  // no nano target in this checkout
    const std::vector<int32_t> tokens = testing::random_tokens(160, 8, target->facts().vocab_size);
    const std::vector<RowBits> oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    for (const Arm& arm : {Arm{true, 2, false}, Arm{false, 3, false}, Arm{false, 2, true}, Arm{true, 2, true}}) {
      const Step11Switches on(*cuda_target, arm.ticket, arm.split_from, arm.held_fused);
      const std::string name = "target " + std::to_string(checked) + ", ticket " + std::to_string(arm.ticket) +
                               ", split from " + std::to_string(arm.split_from) + ", held fused " +
                               std::to_string(arm.held_fused);
      EXPECT_TRUE(one_row_oracle(*target, 1, tokens, stream_sampling(1)) == oracle) << name;
      EXPECT_EQ(check_many_streams(*target, 4, 160, 16), 64) << name;
    }
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace ls::lfm2

#endif  // LS_HAVE_CUDA
