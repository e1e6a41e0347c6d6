// The nano pair through the lanes with every round drafting (always_draft, whole contexts, up to 16 streams):
// every reply equal to the same request run alone without a drafter, no drafter fault, drafts accepted. The check the
// drafter's kernels (AMX tiles, int8, panels) each run: a drafter's bits may change what it proposes, never a reply.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "nano_pair.h"

namespace ls {

// The lanes' options of these checks: every round drafting, whole contexts, up to 16 streams.
inline LanesOptions always_drafting_options() {
  LanesOptions options = sampled_any_streams();
  options.pricing.always_draft = true;
  options.scout_prompt_only = false;
  options.max_streams = 16;
  options.calibration.repeats = 1;
  return options;
}

inline void expect_drafted_replies_equal_alone(NanoPair& pair, int streams, bool sampled) {
  const std::vector<Arrival> arrivals = staggered_arrivals(streams, sampled, pair.target->facts().vocab_size, 24);
  const auto alone = run_each_alone_plain(*pair.target, arrivals);
  FixedClock clock;
  auto lanes = Lanes::create(*pair.target, pair.drafter.get(), always_drafting_options(), clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  expect_replies_equal_alone(*replies, alone);
  EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
}

}  // namespace ls
