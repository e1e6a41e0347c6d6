// The drafter's failures on the CUDA device: planted non-finite drafts fail only their request, a failure at every
// init step is named and frees every device byte, and refused options and targets are refused by name.
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

TEST(CudaDrafter, APlantedFaultFailsOnlyThePlantedRequestWithDraftNonfinite) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, clean, c, width] = nano;
  const std::vector<float> taps = testing::random_taps(20, width, 9);
  std::vector<DraftRequest> requests(3);
  for (int i = 0; i < 3; ++i) requests[i] = request_at(i, 20, 50 + i, c.block_size);
  requests[2].sampling = Sampling{0.9f, 0, 1.0f, 0.0f, 5};
  // Both scans: the GEMM scan (the automatic one for 3 requests) and the fused step pinned.
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused scan" : "GEMM scan");
    auto run = [&](CudaDsparkDrafter& drafter) {
      drafter.set_fused_scan(fused);
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(drafter.absorb(i, 0, 20, taps).ok());
      return drafter.draft(requests);
    };
    const std::vector<Draft> reference = run(*clean);
    for (const Draft& draft : reference) ASSERT_TRUE(draft.status.ok()) << draft.status.to_string();
    const std::pair<const char*, int PlantedFaults::*> kinds[] = {
        {"non-finite draft logit", &PlantedFaults::nan_logit_slot},
        {"non-finite draft confidence", &PlantedFaults::inf_confidence_slot},
        {"outside vocabulary", &PlantedFaults::out_of_range_pick_slot}};
    for (const auto& [message, field] : kinds) {
      for (int slot : {0, c.block_size - 1}) {
        SCOPED_TRACE(std::string(message) + " at slot " + std::to_string(slot));
        DrafterOptions options = cuda_options();
        options.faults.enabled = true;
        options.faults.stream = 1;
        options.faults.*field = slot;
        std::unique_ptr<CudaDsparkDrafter> drafter = nano.another(options);
        ASSERT_TRUE(drafter);
        const std::vector<Draft> drafts = run(*drafter);
        EXPECT_EQ(drafts[1].status.code(), ErrorCode::DraftNonfinite);
        EXPECT_NE(drafts[1].status.message().find(message), std::string::npos) << drafts[1].status.message();
        EXPECT_NE(drafts[1].status.message().find("slot " + std::to_string(slot)), std::string::npos);
        EXPECT_TRUE(drafts[1].tokens.empty());
        for (int i : {0, 2}) {
          ASSERT_TRUE(drafts[i].status.ok()) << drafts[i].status.to_string();
          EXPECT_EQ(drafts[i].tokens, reference[i].tokens);
        }
        EXPECT_EQ(drafter->nonfinite_drafts(), 1);
      }
    }
  }
}

TEST(CudaDrafter, AFailureAtEveryInitStepIsNamedAndGivesBackEveryDeviceByte) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  nano.load_target();
  DeviceEmbeddingTarget& target = *nano.target;
  const std::string dir = NanoDrafter::drafter_dir();
  // One full load first: the CUDA context, cuBLAS and the kernels' modules stay loaded after it.
  ASSERT_TRUE(nano.another());
  ASSERT_EQ(cuda::drafter_device_bytes(), 0);
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  int failures = 0;
  for (int step = 0; step < 400; ++step) {
    DrafterOptions options = cuda_options();
    options.fail_init_step = step;
    Result<std::unique_ptr<Drafter>> loaded = load_drafter(dir, target, options);
    if (loaded.ok()) break;
    ++failures;
    EXPECT_EQ(loaded.status().code(), ErrorCode::OutOfMemory) << loaded.status().to_string();
    EXPECT_NE(loaded.status().message().find("injected failure at drafter init step " + std::to_string(step)),
              std::string::npos)
        << loaded.status().message();
    EXPECT_EQ(cuda::drafter_device_bytes(), 0) << "after a failure at step " << step;
  }
  EXPECT_GT(failures, 40);  // host weights, device uploads, scratch and the warm-up are all steps
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_LE(static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after), int64_t{8} << 20)
      << "device memory lost over " << failures << " failed loads";
}

// Session 20: --drafter-bits 8 loads (int8 copies beside the bf16 weights); 4 is still refused by name.
TEST(CudaDrafter, RefusesIntFourAnFp32ModeAndACpuTargetByName) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  nano.load_target();
  DeviceEmbeddingTarget& target = *nano.target;
  const std::string dir = NanoDrafter::drafter_dir();
  DrafterOptions options = cuda_options();
  options.bits = 8;
  {
    Result<std::unique_ptr<Drafter>> int8 = load_drafter(dir, target, options);
    ASSERT_TRUE(int8.ok()) << int8.status().to_string();
    const auto& drafter = dynamic_cast<const cuda::CudaDsparkDrafter&>(**int8);
    EXPECT_GT(drafter.int8_weights().matrices(), 0u);
  }
  options.bits = 4;
  EXPECT_EQ(load_drafter(dir, target, options).status().code(), ErrorCode::UnsupportedDraftBits);
  options = cuda_options();
  options.mode = compute::NumericMode::Fp32;
  EXPECT_EQ(load_drafter(dir, target, options).status().code(), ErrorCode::InvalidArgument);
  Result<std::unique_ptr<Drafter>> on_cpu_target = load_drafter(dir, target.host(), cuda_options());
  ASSERT_FALSE(on_cpu_target.ok());
  EXPECT_EQ(on_cpu_target.status().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(on_cpu_target.status().message().find("device embedding"), std::string::npos);
  EXPECT_EQ(cuda::drafter_device_bytes(), 0);
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
