// Every prompt tapped at admission (lanes11, LanesOptions::tap_every_prompt): once the scout proves the drafter, the
// other streams draft over whole contexts instead of restarting past prompts they never tapped. New forward shapes
// priced in the trim (PricingOptions::price_new_shapes).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

LanesOptions every_prompt(bool on) {
  LanesOptions options;
  options.tap_every_prompt = on;
  return options;
}

TEST(LanesPromptTaps, WithEveryPromptTappedTheStreamsTheScoutWakesDraftOverWholeContexts) {
  // 4 streams of 64 tokens on the H200-like nano pair (restarted contexts 15 % right, whole ones 75 %): with the
  // scout's prompt alone the others wake over restarted contexts, land little and drafting stops; with every prompt
  // tapped they draft over whole ones and keep drafting.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(4, 64);
  const FakeRun plain = run_fakes(pair.clock, pair.target, std::nullopt, arrivals, LanesOptions{});
  const FakeRun scout = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, every_prompt(false));
  const FakeRun every = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, every_prompt(true));
  ASSERT_EQ(reply_tokens(scout), reply_tokens(plain));
  ASSERT_EQ(reply_tokens(every), reply_tokens(plain));
  EXPECT_GE(every.stats.tap_rows, 4 * 64);
  EXPECT_GT(scout.stats.drafter_restarts, 0);
  EXPECT_EQ(every.stats.drafter_restarts, 0);
  EXPECT_GT(every.stats.drafts_accepted, 2 * scout.stats.drafts_accepted);
  EXPECT_LT(every.ms, scout.ms) << "scout only " << scout.ms << " ms, plain " << plain.ms << " ms";
}

TEST(LanesPromptTaps, WithNewShapesPricedTheTrimTakesFewerNewForwardShapes) {
  // PricingOptions::price_new_shapes: 4 streams of 64 tokens on the H200-like nano pair (a new (rows, windows) shape
  // costs 0.3 ms twice): the trim charges totals not yet seen twice the measured one-off and keeps fewer new shapes.
  NanoLikeFakes pair;
  const std::vector<Arrival> arrivals = pair.arrivals(4, 64);
  LanesOptions priced;
  priced.pricing.price_new_shapes = true;
  const FakeRun free = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, LanesOptions{});
  const FakeRun shapes = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, priced);
  ASSERT_EQ(reply_tokens(shapes), reply_tokens(free));
  EXPECT_LT(shapes.stats.slow_forwards, free.stats.slow_forwards);
  EXPECT_LT(shapes.ms, free.ms) << "shapes free " << free.ms << " ms";
}

TEST(LanesPromptTaps, WithEveryPromptTappedOrNewShapesPricedEveryReplyEqualsItsRequestRunAlonePlain) {
  LanesOptions shapes;
  shapes.pricing.price_new_shapes = true;
  for (const LanesOptions& options : {every_prompt(true), shapes}) {
    for (bool sampled : {false, true}) {
      for (bool device : {false, true}) {
        const ExactnessRun run = run_exactness_case(sampled, device, options, 3.0);
        EXPECT_EQ(reply_tokens(run.drafted), run.alone) << "sampled " << sampled << " device " << device;
        EXPECT_GT(run.drafted.stats.drafts_verified, 0) << "sampled " << sampled << " device " << device;
      }
    }
  }
}

}  // namespace
}  // namespace ls
