// Short blocks (draft/dspark/forward.h ShortBlock): a pass of depth d runs w(d) slots, each request its own width, and
// drafts exactly what a drafter trained at block size w drafts; through the lanes, replies stay the plain ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "draft/dspark/dspark_drafter.h"
#include "draft/dspark/forward.h"
#include "dspark_test_support.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "model/load.h"
#include "nano_pair.h"

namespace ls::dspark {
namespace {

using testing::EmbeddingTarget;
using testing::TempDir;

constexpr int kVocab = 96, kHidden = 32, kTapWidth = 2 * kHidden, kBlock = 4;

// Sets the switch for one test and restores the previous setting.
class ScopedShortBlock {
 public:
  explicit ScopedShortBlock(ShortBlock block) : saved_(short_block()) { set_short_block(block); }
  ~ScopedShortBlock() { set_short_block(saved_); }

 private:
  ShortBlock saved_;
};

TEST(ShortBlockSwitch, ParsesOffDepthAndDepthPlusN) {
  ShortBlock block;
  for (const char* off : {static_cast<const char*>(nullptr), "", "off", "0"}) {
    EXPECT_TRUE(parse_short_block(off, block));
    EXPECT_FALSE(block.on);
  }
  EXPECT_TRUE(parse_short_block("depth", block));
  EXPECT_TRUE(block.on);
  EXPECT_EQ(block.extra, 0);
  EXPECT_TRUE(parse_short_block("depth+2", block));
  EXPECT_TRUE(block.on);
  EXPECT_EQ(block.extra, 2);
  for (const char* bad : {"on", "depth+", "depth-1", "depth+x", "1", "depth+123"}) {
    EXPECT_FALSE(parse_short_block(bad, block)) << bad;
    EXPECT_FALSE(block.on) << bad;
  }
}

TEST(ShortBlockSwitch, WidthIsTheTrainedBlockWhenOffElseDepthPlusExtraCappedAtIt) {
  {
    ScopedShortBlock off(ShortBlock{});
    for (int depth = 1; depth <= 7; ++depth) EXPECT_EQ(block_width(depth, 7), 7);
  }
  ScopedShortBlock plus_one(ShortBlock{true, 1});
  EXPECT_EQ(block_width(1, 7), 2);
  EXPECT_EQ(block_width(5, 7), 6);
  EXPECT_EQ(block_width(6, 7), 7);
  EXPECT_EQ(block_width(7, 7), 7);
}

// The same random weights as a block-4 drafter and as drafters trained at smaller blocks (the weights do not depend on
// the block size), so a short pass can be checked against the full pass of a drafter of that width.
class ShortBlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int width = 1; width <= kBlock; ++width) {
      TempDir& dir = dirs_[width - 1];
      ASSERT_TRUE(testing::write_small_drafter(dir.path(), testing::small_drafter_config(96, 32, 2, width), 21).ok());
    }
  }

  std::unique_ptr<DsparkDrafter> load(int block) {
    Result<std::unique_ptr<DsparkDrafter>> drafter = DsparkDrafter::load(dirs_[block - 1].path(), target_, {});
    EXPECT_TRUE(drafter.ok()) << drafter.status().to_string();
    return drafter.ok() ? std::move(drafter).value() : nullptr;
  }

  // Absorbs streams 1 .. count with random taps of 5 + 3 * stream rows each.
  static void absorb(DsparkDrafter& drafter, int count) {
    for (StreamId stream = 1; stream <= static_cast<StreamId>(count); ++stream) {
      const int rows = 5 + 3 * static_cast<int>(stream);
      ASSERT_TRUE(drafter.absorb(stream, 0, rows, testing::random_taps(rows, kTapWidth, 60 + stream)).ok());
    }
  }

  TempDir dirs_[kBlock];
  EmbeddingTarget target_{testing::random_embedding(kVocab, kHidden, 7), kVocab, kHidden, 4};
};

void expect_same_draft(const Draft& got, const Draft& want, const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.to_string();
  ASSERT_TRUE(want.status.ok()) << what << ": " << want.status.to_string();
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.chances.size(), want.chances.size()) << what;
  EXPECT_EQ(std::memcmp(got.chances.data(), want.chances.data(), got.chances.size() * sizeof(float)), 0) << what;
}

TEST_F(ShortBlockTest, AShortPassRunsItsWidthAndDraftsTheBitsOfADrafterTrainedAtThatWidth) {
  std::unique_ptr<DsparkDrafter> full = load(kBlock);
  ASSERT_TRUE(full);
  absorb(*full, 1);
  for (int extra : {0, 1}) {
    for (int depth = 1; depth <= kBlock; ++depth) {
      const int width = std::min(kBlock, depth + extra);
      std::unique_ptr<DsparkDrafter> trained = load(width);
      ASSERT_TRUE(trained);
      absorb(*trained, 1);
      const DraftRequest r = testing::draft_request(1, 8, 30 + depth, depth);
      for (bool sampled : {false, true}) {
        DraftRequest asked = r;
        if (sampled) asked.sampling = {0.9f, 0, 1.0f, 0.0f, 0x77};
        const Draft want = trained->draft(std::span<const DraftRequest>(&asked, 1))[0];
        const std::vector<float> want_hidden(trained->last_final_hidden().begin(), trained->last_final_hidden().end());
        PassProfile profile;
        set_pass_profile(&profile);
        Draft got;
        {
          ScopedShortBlock on(ShortBlock{true, extra});
          got = full->draft(std::span<const DraftRequest>(&asked, 1))[0];
        }
        set_pass_profile(nullptr);
        const std::string what = "depth " + std::to_string(depth) + " extra " + std::to_string(extra) +
                                 (sampled ? " sampled" : " greedy");
        EXPECT_EQ(profile.passes, 1) << what;
        EXPECT_EQ(profile.rows, width) << what;
        expect_same_draft(got, want, what);
        // Hf of the drafted slots equal; the slots past the width are NaN.
        const std::span<const float> hidden = full->last_final_hidden();
        ASSERT_EQ(hidden.size(), static_cast<size_t>(kBlock * kHidden));
        EXPECT_EQ(std::memcmp(hidden.data(), want_hidden.data(), depth * kHidden * sizeof(float)), 0) << what;
        for (int slot = width; slot < kBlock; ++slot) EXPECT_TRUE(std::isnan(hidden[slot * kHidden])) << what;
      }
    }
  }
}

TEST_F(ShortBlockTest, EachRequestOfAPassGetsItsOwnWidthSoItsDraftsDoNotDependOnItsNeighbours) {
  std::unique_ptr<DsparkDrafter> drafter = load(kBlock);
  ASSERT_TRUE(drafter);
  absorb(*drafter, 4);
  std::vector<DraftRequest> all;
  for (StreamId stream = 1; stream <= 4; ++stream)
    all.push_back(testing::draft_request(stream, 5 + 3 * stream, 40 + static_cast<int32_t>(stream),
                                         1 + static_cast<int>(stream * 3) % kBlock));
  all[1].sampling = {1.0f, 0, 0.9f, 0.0f, 0x99};
  ScopedShortBlock on(ShortBlock{true, 0});
  PassProfile profile;
  set_pass_profile(&profile);
  const std::vector<Draft> together = drafter->draft(all);
  set_pass_profile(nullptr);
  int rows = 0;
  for (const DraftRequest& r : all) rows += r.depth;
  EXPECT_EQ(profile.rows, rows) << "one width per request: the sum of the depths";
  for (size_t index = 0; index < all.size(); ++index) {
    const Draft alone = drafter->draft(std::span<const DraftRequest>(&all[index], 1))[0];
    expect_same_draft(together[index], alone, "request " + std::to_string(index));
  }
}

TEST_F(ShortBlockTest, FullWidthUnderTheSwitchIsTheSwitchOffPassBitForBit) {
  std::unique_ptr<DsparkDrafter> drafter = load(kBlock);
  ASSERT_TRUE(drafter);
  absorb(*drafter, 3);
  std::vector<DraftRequest> all;
  for (StreamId stream = 1; stream <= 3; ++stream)
    all.push_back(testing::draft_request(stream, 5 + 3 * stream, 50 + static_cast<int32_t>(stream), kBlock - 1));
  const std::vector<Draft> off = drafter->draft(all);
  const std::vector<float> off_hidden(drafter->last_final_hidden().begin(), drafter->last_final_hidden().end());
  ScopedShortBlock on(ShortBlock{true, 1});  // depth 3 + 1 = the trained 4
  const std::vector<Draft> on_drafts = drafter->draft(all);
  for (size_t index = 0; index < all.size(); ++index)
    expect_same_draft(on_drafts[index], off[index], "request " + std::to_string(index));
  const std::span<const float> on_hidden = drafter->last_final_hidden();
  ASSERT_EQ(on_hidden.size(), off_hidden.size());
  EXPECT_EQ(std::memcmp(on_hidden.data(), off_hidden.data(), off_hidden.size() * sizeof(float)), 0);
}

// The nano pair through the lanes with short blocks: every drafting stream asks up to 3 drafts (always_draft, so
// short passes run whatever the timings), and every reply equals the plain run alone.
struct NanoCase {
  int streams;
  bool sampled;
};

class ShortBlockLanes : public ::testing::TestWithParam<NanoCase> {};

TEST_P(ShortBlockLanes, RepliesEqualPlainRepliesWithShortPasses) {
  if (!nano_pair_present()) GTEST_SKIP() << "no nano pair";
  NanoPair pair;
  ASSERT_NO_FATAL_FAILURE(load_nano_pair(pair));
  const std::vector<Arrival> arrivals =
      staggered_arrivals(GetParam().streams, GetParam().sampled, pair.target->facts().vocab_size, 24);
  const std::vector<Reply> alone = run_each_alone_plain(*pair.target, arrivals);

  ScopedShortBlock on(ShortBlock{true, 0});
  FixedClock clock;
  LanesOptions options = sampled_any_streams();
  options.pricing.always_draft = true;
  options.scout_prompt_only = false;
  options.max_draft = 3;
  options.measure_width = 8;
  options.max_streams = 16;
  options.calibration.repeats = 1;
  auto lanes = Lanes::create(*pair.target, pair.drafter.get(), options, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  PassProfile profile;
  set_pass_profile(&profile);
  auto replies = run_arrivals(**lanes, arrivals);
  set_pass_profile(nullptr);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  expect_replies_equal_alone(*replies, alone);
  EXPECT_EQ((*lanes)->stats().drafter_faults, 0);
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
  ASSERT_GT(profile.passes, 0);
  // Depth <= 3 under the switch: at most 3 slots a request, never the trained 7.
  EXPECT_LE(profile.rows, int64_t{3} * GetParam().streams * profile.passes);
}

INSTANTIATE_TEST_SUITE_P(NanoPair, ShortBlockLanes,
                         ::testing::Values(NanoCase{1, false}, NanoCase{1, true}, NanoCase{4, false},
                                           NanoCase{4, true}),
                         [](const ::testing::TestParamInfo<NanoCase>& info) {
                           return std::to_string(info.param.streams) + (info.param.sampled ? "Sampled" : "Greedy");
                         });

}  // namespace
}  // namespace ls::dspark
