// Synthetic checkpoints and the CLI (benchmarks only): synth writes a drafter that loads beside its target, and
// generate --synthetic-acceptance prints the plain reply and refuses bad means.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "draft/dspark/config.h"
#include "draft/load.h"
#include "draft/synthetic/synthetic_drafter_checkpoint.h"
#include "model/load.h"

namespace ls {
namespace {

const std::string kNanoTarget = std::string(LS_SOURCE_DIR) + "/models/nano/target";
const std::string kNanoDrafter = std::string(LS_SOURCE_DIR) + "/models/nano/drafter";

// Runs a CLI subcommand in-process on {name, args...}; its stdout / stderr into *out / *err when given.
int run_cli(int (*command)(int, char**), std::vector<std::string> args, std::string* out = nullptr,
            std::string* err = nullptr) {
  args.insert(args.begin(), "cli");
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = command(static_cast<int>(pointers.size()), pointers.data());
  const std::string printed = testing::internal::GetCapturedStdout();
  const std::string reported = testing::internal::GetCapturedStderr();
  if (out) *out = printed;
  if (err) *err = reported;
  return code;
}

TEST(SyntheticDrafterCheckpoint, TapsAreLiquidAIsPublishedIdsOrSpreadEvenlyAndOneLayerIsRefused) {
  EXPECT_EQ(*dspark::drafter_taps_for(16), (std::vector<int>{2, 5, 8, 11, 14}));
  EXPECT_EQ(*dspark::drafter_taps_for(24), (std::vector<int>{2, 6, 10, 14, 18}));
  EXPECT_EQ(*dspark::drafter_taps_for(30), (std::vector<int>{2, 9, 17, 21, 27}));
  EXPECT_EQ(*dspark::drafter_taps_for(4), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(*dspark::drafter_taps_for(10), (std::vector<int>{0, 2, 4, 6, 8}));
  EXPECT_EQ(*dspark::drafter_taps_for(2), (std::vector<int>{0}));
  EXPECT_EQ(dspark::drafter_taps_for(1).status().code(), ErrorCode::InvalidArgument);
  io::ModelConfig odd;
  odd.hidden_size = 1000;
  odd.num_layers = 16;
  odd.vocab_size = 512;
  Result<std::string> refused = dspark::drafter_config_json(odd, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(refused.status().message().find("1000"), std::string::npos);
}

TEST(SyntheticDrafterCheckpoint, SynthWritesADrafterThatLoadsBesideItsTarget) {
  const std::string dir = testing::TempDir() + "/synth_pair_" + std::to_string(getpid());
  ASSERT_EQ(run_cli(cli::run_synth, {"--shape", "lfm2-350m", "--layers", "4", "--vocab", "512", "--out", dir + "/t",
                                     "--drafter-out", dir + "/d", "--drafter-layers", "1", "--drafter-block", "4"}),
            0);
  Result<dspark::DsparkConfig> config = dspark::read_dspark_config(dir + "/d");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->block_size, 4);
  EXPECT_EQ(config->num_layers, 1);
  EXPECT_EQ(config->target_layer_ids, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(config->markov_rank, 256);
  EXPECT_TRUE(config->has_confidence);
  LoadOptions load;
  load.exact_width_probe = 0;
  auto target = load_target(dir + "/t", load);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  auto drafter = load_drafter(dir + "/d", **target, DrafterOptions{});
  ASSERT_TRUE(drafter.ok()) << drafter.status().to_string();
  EXPECT_EQ((*drafter)->facts().max_depth, 4);
  EXPECT_EQ(run_cli(cli::run_synth, {"--shape", "lfm2-350m", "--layers", "2", "--vocab", "512", "--out", dir + "/t2",
                                     "--drafter-out", dir + "/d2", "--drafter-layers", "0"}),
            2);
  std::filesystem::remove_all(dir);
}

TEST(SyntheticAcceptanceGenerate, GenerateWithSyntheticAcceptancePrintsThePlainReplyAndRefusesBadMeans) {
  if (!std::filesystem::exists(kNanoTarget + "/config.json") || !std::filesystem::exists(kNanoDrafter + "/config.json"))
    GTEST_SKIP() << "no nano pair under models/nano";
  for (const std::vector<std::string>& sampling :
       {std::vector<std::string>{}, std::vector<std::string>{"--temperature", "0.8", "--top-k", "20", "--seed", "5"}}) {
    std::vector<std::string> plain_args = {"--model", kNanoTarget, "--prompt-ids", "1,30,31,32,33", "--max-tokens",
                                           "40", "--threads", "2"};
    plain_args.insert(plain_args.end(), sampling.begin(), sampling.end());
    std::vector<std::string> synthetic_args = plain_args;
    // --draft-always: the drafts reach the verifier whatever this machine's timings make pricing decide.
    for (const char* arg : {"--drafter", kNanoDrafter.c_str(), "--synthetic-acceptance", "5.02", "--draft-always"})
      synthetic_args.push_back(arg);
    std::string plain, synthetic, report;
    ASSERT_EQ(run_cli(cli::run_generate, plain_args, &plain), 0);
    ASSERT_EQ(run_cli(cli::run_generate, synthetic_args, &synthetic, &report), 0);
    EXPECT_GT(plain.size(), 10u);
    EXPECT_EQ(synthetic, plain);
    // "drafting: R rounds, V drafts verified, A accepted, ...": the replayed drafts were verified and kept.
    const size_t verified = report.find(" drafts verified, ");
    ASSERT_NE(verified, std::string::npos) << report;
    EXPECT_GT(std::atoi(report.c_str() + verified + 18), 0) << report;
  }
  const std::vector<std::string> base = {"--model", kNanoTarget, "--prompt-ids", "1,2,3", "--max-tokens", "4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  EXPECT_EQ(run_cli(cli::run_generate, with({"--synthetic-acceptance", "5.02"})), 1) << "needs --drafter";
  EXPECT_EQ(run_cli(cli::run_generate, with({"--drafter", kNanoDrafter, "--synthetic-acceptance", "0.5"})), 1);
  EXPECT_EQ(run_cli(cli::run_generate, with({"--drafter", kNanoDrafter, "--synthetic-acceptance", "9.5"})), 1)
      << "the nano drafter's 7 drafts reach a mean of at most 8";
}

}  // namespace
}  // namespace ls
