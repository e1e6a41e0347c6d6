// Drafter::restart on the CPU DSpark drafter (nano pair): a restart where the context ends changes nothing, a
// restart past it lets later rows follow the rows held, rewrites before it and restarts backwards are refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "draft/load.h"
#include "model/load.h"

namespace ls {
namespace {

const std::string kNanoTarget = std::string(LS_SOURCE_DIR) + "/models/nano/target";
const std::string kNanoDrafter = std::string(LS_SOURCE_DIR) + "/models/nano/drafter";

struct NanoPair {
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> drafter;
};

NanoPair load_nano() {
  NanoPair pair;
  if (!std::filesystem::exists(kNanoTarget + "/config.json") ||
      !std::filesystem::exists(kNanoDrafter + "/config.json")) {
    return pair;
  }
  LoadOptions load;
  load.max_rows = 64;
  auto target = load_target(kNanoTarget, load);
  EXPECT_TRUE(target.ok()) << target.status().to_string();
  if (!target.ok()) return pair;
  pair.target = std::move(target).value();
  auto drafter = load_drafter(kNanoDrafter, *pair.target, DrafterOptions{});
  EXPECT_TRUE(drafter.ok()) << drafter.status().to_string();
  if (drafter.ok()) pair.drafter = std::move(drafter).value();
  return pair;
}

// `rows` rows of tap values, bf16-exact, different per `seed`.
std::vector<float> taps(int rows, int64_t row_values, int seed) {
  std::vector<float> values(static_cast<size_t>(rows * row_values));
  for (size_t i = 0; i < values.size(); ++i) values[i] = round_to_bf16(std::sin(0.37f * static_cast<float>(i) + seed));
  return values;
}

Draft draft_one(Drafter& drafter, StreamId stream, int64_t anchor_position) {
  DraftRequest request;
  request.stream = stream;
  request.anchor_token = 5;
  request.anchor_position = anchor_position;
  request.depth = drafter.facts().max_depth;
  std::vector<Draft> drafts = drafter.draft({&request, 1});
  EXPECT_EQ(drafts.size(), 1u);
  return drafts.empty() ? Draft{} : drafts[0];
}

TEST(DrafterRestart, ARestartWhereTheContextEndsChangesNoBitOfTheDrafts) {
  NanoPair pair = load_nano();
  if (!pair.drafter) GTEST_SKIP() << "no nano pair";
  Drafter& drafter = *pair.drafter;
  ASSERT_TRUE(drafter.facts().restarts);
  const int64_t row_values =
      static_cast<int64_t>(drafter.facts().tap_layers.size()) * pair.target->facts().hidden_size;
  const std::vector<float> first = taps(4, row_values, 1), second = taps(3, row_values, 2);
  for (StreamId stream : {1, 2}) {
    ASSERT_TRUE(drafter.absorb(stream, 0, 4, first).ok());
    if (stream == 2) {
      ASSERT_TRUE(drafter.restart(stream, 4).ok());
    }
    ASSERT_TRUE(drafter.absorb(stream, 4, 3, second).ok());
  }
  const Draft plain = draft_one(drafter, 1, 7), restarted = draft_one(drafter, 2, 7);
  ASSERT_TRUE(plain.status.ok() && restarted.status.ok());
  EXPECT_EQ(plain.tokens, restarted.tokens);
  ASSERT_EQ(plain.chances.size(), restarted.chances.size());
  for (size_t k = 0; k < plain.chances.size(); ++k) {
    EXPECT_EQ(std::bit_cast<uint32_t>(plain.chances[k]), std::bit_cast<uint32_t>(restarted.chances[k])) << k;
  }
}

TEST(DrafterRestart, RowsAfterASkipFollowTheRowsHeldAndTheAnchorIsWhereTheContextEnds) {
  NanoPair pair = load_nano();
  if (!pair.drafter) GTEST_SKIP() << "no nano pair";
  Drafter& drafter = *pair.drafter;
  const int64_t row_values =
      static_cast<int64_t>(drafter.facts().tap_layers.size()) * pair.target->facts().hidden_size;
  ASSERT_TRUE(drafter.absorb(3, 0, 4, taps(4, row_values, 1)).ok());
  EXPECT_EQ(drafter.restart(3, 2).code(), ErrorCode::InvalidArgument);  // before what it covers
  ASSERT_TRUE(drafter.restart(3, 50).ok());
  EXPECT_EQ(drafter.absorb(3, 49, 1, taps(1, row_values, 3)).code(), ErrorCode::InvalidArgument);  // before it
  EXPECT_EQ(drafter.absorb(3, 51, 1, taps(1, row_values, 3)).code(), ErrorCode::InvalidArgument);  // a gap
  ASSERT_TRUE(drafter.absorb(3, 50, 3, taps(3, row_values, 2)).ok());
  EXPECT_FALSE(draft_one(drafter, 3, 7).status.ok());  // the anchor must be where the context ends: 53
  const Draft skipped = draft_one(drafter, 3, 53);
  ASSERT_TRUE(skipped.status.ok()) << skipped.status.to_string();
  EXPECT_EQ(static_cast<int>(skipped.tokens.size()), drafter.facts().max_depth);
  for (float chance : skipped.chances) EXPECT_TRUE(std::isfinite(chance));
  // A restart of an unknown stream opens it: it drafts over no rows at all, still a valid (if blind) draft.
  ASSERT_TRUE(drafter.restart(4, 30).ok());
  EXPECT_TRUE(draft_one(drafter, 4, 30).status.ok());
}

}  // namespace
}  // namespace ls
