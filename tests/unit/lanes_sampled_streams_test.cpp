// Sampled passes only in rounds of few streams (lanes12, PricingOptions::sampled_most_streams).
#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls {
namespace {

std::vector<Arrival> sampled_arrivals(const NanoLikeFakes& pair, int streams) {
  std::vector<Arrival> arrivals = pair.arrivals(streams, 256);
  for (int index = 0; index < streams; ++index) {
    arrivals[index].request.sampling = make_fake_request(index, true, pair.target.shape.vocab_size).sampling;
  }
  return arrivals;
}

LanesOptions most_streams(int most) {
  LanesOptions options;
  options.pricing.sampled_most_streams = most;
  return options;
}

TEST(LanesSampledStreams, SampledPassesRunAtOneStreamAndNotInRoundsOfMoreStreams) {
  NanoLikeFakes pair;
  for (int streams : {1, 4}) {
    const std::vector<Arrival> arrivals = sampled_arrivals(pair, streams);
    const FakeRun any = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, most_streams(0));
    const FakeRun one = run_fakes(pair.clock, pair.target, pair.drafter, arrivals, most_streams(1));
    ASSERT_EQ(reply_tokens(one), reply_tokens(any)) << streams;
    EXPECT_GT(any.stats.drafter_passes, 0) << streams;
    if (streams == 1) {
      EXPECT_EQ(one.stats.drafter_passes, any.stats.drafter_passes);
    } else {
      EXPECT_EQ(one.stats.drafter_passes, 0);
      EXPECT_EQ(one.stats.tap_rows, 0);
    }
  }
}

}  // namespace
}  // namespace ls
