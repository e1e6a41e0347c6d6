// The drafter's block pass on the CUDA device: the fused pass, the attention variants and batched loads, the
// short-context head choice and the L2 weight prefetch against the paths they replace (Hf, U, tokens, chance bits).
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <optional>
#include <tuple>

#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

// The fused block pass (stacked GEMMs, fused heads / residual-norm / SwiGLU launches) against the unfused sequence
// on the nano pair: Hf and U within the bf16 tolerance of the CPU parity tests (the stacked GEMMs may sum in
// another order, one bf16 ulp is 4e-3 and it compounds over the layers; a wrong fusion is off by ~1), and the
// drafts' tokens equal up to a near-tie flip. The same for the engine's GEMMs (up to 16 rows) against cuBLAS.
TEST(CudaDrafter, TheFusedBlockPassGivesTheUnfusedHiddenLogitsAndDrafts) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, gpu, c, width] = nano;
  gpu->set_graphs(false);
  std::vector<DraftRequest> requests;
  for (int i = 0; i < 5; ++i) {
    const int length = 4 + 45 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 500 + i)).ok());
    requests.push_back(request_at(i, length, 200 + 31 * i, c.block_size));
  }
  // The unfused pass with cuBLAS, then the fused pass with cuBLAS (5 requests: 35 rows) and, on the first two
  // requests (14 rows), with the engine's GEMMs against cuBLAS; then the cublasLt-tuned GEMMs against cuBLAS (5
  // requests, tuned on the first pass), and the tuned pass through a graph with the eager tuned bits (its reductions
  // are deterministic).
  struct Case {
    const char* name;
    size_t requests;
    bool engine;
    bool tuned;
  };
  for (const Case& which :
       {Case{"fused block", 5, false, false}, Case{"engine GEMMs", 2, true, false}, Case{"tuned GEMMs", 5, false, true}}) {
    SCOPED_TRACE(which.name);
    const std::span<const DraftRequest> some(requests.data(), which.requests);
    gpu->set_engine_gemms(false);
    gpu->set_tuned_gemms(false);
    gpu->set_fused_block(which.engine || which.tuned);
    ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
    const std::vector<Draft> reference = gpu->draft(some);
    const std::vector<float> reference_hidden = gpu->last_final_hidden().value();
    const std::vector<float> reference_logits = gpu->last_base_logits().value();
    gpu->set_engine_gemms(which.engine);
    gpu->set_tuned_gemms(which.tuned);
    gpu->set_fused_block(true);
    ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
    const std::vector<Draft> fused = gpu->draft(some);
    if (which.tuned) {
      EXPECT_GT(gpu->tuned_gemm_shapes(), 0u);
      gpu->set_graphs(true);
      gpu->draft(some);  // the second sighting captures
      ASSERT_TRUE(gpu->poison_scratch_for_test().ok());
      const std::vector<Draft> graphed = gpu->draft(some);
      gpu->set_graphs(false);
      EXPECT_EQ(gpu->graph_failures(), 0);
      ASSERT_NO_FATAL_FAILURE(expect_same_drafts(graphed, fused));
    }
    const std::vector<float> hidden = gpu->last_final_hidden().value();
    const std::vector<float> logits = gpu->last_base_logits().value();
    const double hidden_error = relative_error(hidden, reference_hidden);
    const double logit_error = relative_error(logits, reference_logits);
    int equal = 0, total = 0;
    for (size_t i = 0; i < some.size(); ++i) {
      ASSERT_TRUE(fused[i].status.ok()) << fused[i].status.to_string();
      ASSERT_TRUE(reference[i].status.ok()) << reference[i].status.to_string();
      for (int slot = 0; slot < some[i].depth; ++slot, ++total) {
        if (fused[i].tokens[slot] != reference[i].tokens[slot]) break;
        ++equal;
      }
    }
    std::printf("[ %s ] Hf rel. error %.3g, U rel. error %.3g, %d of %d draft slots equal before any flip\n",
                which.name, hidden_error, logit_error, equal, total);
    EXPECT_LE(hidden_error, kBf16Tolerance);
    EXPECT_LE(logit_error, kBf16Tolerance);
    EXPECT_GE(equal * 10, total * 9);
  }
  gpu->set_engine_gemms(false);
  gpu->set_tuned_gemms(false);
}

// The split attention in one cooperative launch (session 7), every load batched (session 8: attention, residual
// norms, q/k heads; with three launches, one launch and the automatic choice), the head attention (session 9, a
// CTA per request and query head; the automatic choice at 16 requests) and the row attention (session 12, pinned and
// by its switch up to 5 requests), eagerly and through graphs, give the three-launch pass's Hf, U, tokens and chance
// bits, for 1, 5 and 16 requests (scratch poisoned before every pass).
TEST(CudaDrafter, TheOneLaunchAttentionAndBatchedLoadsGiveTheThreeLaunchBits) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load(cuda_options(16)));
  auto& [target, gpu, c, width] = nano;
  const cuda::AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 0.0f};
  // One request's grid is resident at once (so the one-launch kernel runs); five requests' may not be on every
  // device (then the three launches run: the same bits either way).
  ASSERT_TRUE(cuda::block_attention_cooperative_supported(1, c.block_size, dims, 0));
  ASSERT_TRUE(cuda::block_attention_head_supported(c.block_size, dims));
  std::vector<DraftRequest> requests;
  for (int i = 0; i < 16; ++i) {  // 16 requests: the automatic attention is the head kernel there (session 9)
    const int length = 6 + 61 * (i % 5) + i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 700 + i)).ok());
    requests.push_back(request_at(i, length, 300 + 17 * i, i == 2 ? 3 : c.block_size,
                                  i == 3 ? Sampling{0.9f, 0, 0.95f, 0.0f, 5} : Sampling{}));
  }
  auto pass = [&](std::span<const DraftRequest> some) { return poisoned_pass(*gpu, some); };
  for (const size_t count : {size_t{1}, size_t{5}, size_t{16}}) {
    const std::span<const DraftRequest> some(requests.data(), count);
    gpu->set_attention_kernel(cuda::BlockAttentionKernel::Split);
    gpu->set_batched_loads(false);
    const PassBits reference = pass(some);
    using Kernel = cuda::BlockAttentionKernel;
    for (const auto& [name, kernel, batched] :
         {std::tuple{"one-launch attention", std::optional(Kernel::Cooperative), false},
          std::tuple{"automatic", std::optional<Kernel>(), false},
          std::tuple{"batched loads", std::optional(Kernel::Split), true},
          std::tuple{"one-launch, batched loads", std::optional(Kernel::Cooperative), true},
          std::tuple{"automatic, batched loads", std::optional<Kernel>(), true},
          std::tuple{"head attention", std::optional(Kernel::Head), true},
          std::tuple{"head attention, serial loads", std::optional(Kernel::Head), false},
          std::tuple{"head attention, 256-key stages", std::optional(Kernel::Head), true},
          std::tuple{"row attention", std::optional(Kernel::Row), true},
          std::tuple{"row attention switch", std::optional<Kernel>(), true}}) {
      SCOPED_TRACE(std::string(name) + ", " + std::to_string(count) + " requests");
      gpu->set_attention_kernel(kernel);
      gpu->set_batched_loads(batched);
      gpu->set_head_stage_keys(std::string(name).find("256") != std::string::npos ? 256 : 128);
      gpu->set_row_attention(std::string(name).starts_with("row attention switch") ? 5 : 0);  // session 12
      const int64_t failures = gpu->graph_failures();
      for (int sighting = 0; sighting < 3; ++sighting) {  // eager, captured, replayed
        SCOPED_TRACE("sighting " + std::to_string(sighting));
        expect_same_pass_bits(pass(some), reference);
      }
      EXPECT_EQ(gpu->graph_failures(), failures);
    }
  }
}

// The short-context attention choices give the split's bits on both sides of their key bounds, each side through its
// own captured graph: session 10's head kernel at two requests (short_context_keys) and session 12's row kernel at
// one (kRowKeysPerRequest, set_row_attention).
TEST(CudaDrafter, TheShortContextChoicesGiveTheSplitBitsOnBothSidesOfTheirKeyBounds) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const bool row : {false, true}) {
    SCOPED_TRACE(row ? "row attention at one request" : "head attention at two requests");
    NanoDrafter nano;
    ASSERT_TRUE(nano.load());
    auto& [target, gpu, c, width] = nano;
    gpu->set_one_graph(false);  // the replays counted below are the two graphs' (the one graph: overlap test)
    // The longest request (the last) starts 3 keys under the bound and crosses it below.
    const int count = row ? 1 : 2;
    const int64_t bound = row ? cuda::kRowKeysPerRequest : cuda::short_context_keys(2);
    std::vector<int> lengths = {40, static_cast<int>(bound) - c.block_size - 3};
    if (row) lengths.erase(lengths.begin());
    for (int i = 0; i < count; ++i) {
      ASSERT_TRUE(gpu->absorb(i, 0, lengths[i], testing::random_taps(lengths[i], width, 950 + i)).ok());
    }
    auto switch_on = [&](bool on) {
      if (row) gpu->set_row_attention(on ? 1 : 0);
      else gpu->set_short_context_head(on);
    };
    for (const int grown : {0, 6}) {  // keys bound - 3 (short: head / row), then bound + 3 (long: the split)
      SCOPED_TRACE("longest request holds " + std::to_string(lengths.back() + grown + c.block_size) + " keys, bound " +
                   std::to_string(bound));
      if (grown > 0) {
        ASSERT_TRUE(gpu->absorb(count - 1, lengths.back(), grown, testing::random_taps(grown, width, 990)).ok());
      }
      std::vector<DraftRequest> requests(count);
      for (int i = 0; i < count; ++i) requests[i] = request_at(i, gpu->context_length(i), 77 + 5 * i, c.block_size);
      requests[count - 1].sampling = Sampling{0.7f, 0, 1.0f, 0.0f, 9};
      switch_on(false);
      gpu->set_short_context_head(false);
      gpu->set_attention_kernel(cuda::BlockAttentionKernel::Split);
      const PassBits reference = poisoned_pass(*gpu, requests);
      gpu->set_attention_kernel(std::nullopt);
      gpu->set_short_context_head(true);
      switch_on(true);
      EXPECT_GT(gpu->capture_bucket_graphs(), 0);  // both key classes of every bucket, as at load
      const int64_t replays = gpu->graph_replays(), failures = gpu->graph_failures();
      for (int sighting = 0; sighting < 2; ++sighting) expect_same_pass_bits(poisoned_pass(*gpu, requests), reference);
      EXPECT_EQ(gpu->graph_replays(), replays + 4) << "block pass and scan graphs replayed twice each";
      EXPECT_EQ(gpu->graph_failures(), failures);
    }
  }
}

TEST(CudaDrafter, TheL2WeightPrefetchLeavesEveryPassBitAndAPlantedStoreTurnsItRed) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, gpu, c, width] = nano;
  std::vector<DraftRequest> requests;
  for (int i = 0; i < 5; ++i) {
    const int length = 9 + 57 * i;
    ASSERT_TRUE(gpu->absorb(i, 0, length, testing::random_taps(length, width, 900 + i)).ok());
    requests.push_back(request_at(i, length, 200 + 31 * i, i == 1 ? 4 : c.block_size,
                                  i == 2 ? Sampling{0.8f, 0, 0.9f, 0.0f, 3} : Sampling{}));
  }
  // The nano layer's o_proj is ~0.5 MiB: 1 MiB prefetches it and shares of gate_up; 256 MiB every row of all three.
  for (const size_t count : {size_t{1}, size_t{5}}) {
    const std::span<const DraftRequest> some(requests.data(), count);
    gpu->set_l2_prefetch(0);
    const PassBits reference = poisoned_pass(*gpu, some);
    for (const int64_t megabytes : {int64_t{1}, int64_t{256}}) {
      SCOPED_TRACE(std::to_string(megabytes) + " MiB, " + std::to_string(count) + " requests");
      gpu->set_l2_prefetch(megabytes << 20);
      const int64_t failures = gpu->graph_failures();
      for (int sighting = 0; sighting < 3; ++sighting) {  // eager, captured, replayed
        SCOPED_TRACE("sighting " + std::to_string(sighting));
        expect_same_pass_bits(poisoned_pass(*gpu, some), reference);
      }
      EXPECT_EQ(gpu->graph_failures(), failures);
    }
  }
  // The planted store flips a bit of each layer's o_proj once per pass: the first pass must differ (the test can
  // fail), and the weights are wrong from then on, so this comes last.
  const std::span<const DraftRequest> one(requests.data(), 1);
  gpu->set_l2_prefetch(0);
  const PassBits reference = poisoned_pass(*gpu, one);
  gpu->set_l2_prefetch(int64_t{256} << 20, /*planted_store=*/true);
  const PassBits planted = poisoned_pass(*gpu, one);
  ASSERT_EQ(planted.hidden.size(), reference.hidden.size());
  EXPECT_NE(std::memcmp(planted.hidden.data(), reference.hidden.data(), reference.hidden.size() * sizeof(float)), 0)
      << "a pass whose prefetch branch stored into o_proj gave the reference's Hf: the bit test cannot see it";
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
