// Tests for the DSpark drafter behind the Drafter interface: context, rollback, batching, failure flags, clean init.
#include "draft/dspark/dspark_drafter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "draft/load.h"
#include "dspark_test_support.h"

namespace ls::dspark {
namespace {

using json = nlohmann::json;
using testing::EmbeddingTarget;
using testing::TempDir;

constexpr int kVocab = 96, kHidden = 32, kTapWidth = 2 * kHidden, kBlock = 4;

// A small random drafter on disk plus a target that shares its embedding.
class DrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::write_small_drafter(dir_.path(), testing::small_drafter_config(), 21).ok());
  }

  std::unique_ptr<DsparkDrafter> load(DrafterOptions options = {}) {
    Result<std::unique_ptr<DsparkDrafter>> drafter = DsparkDrafter::load(dir_.path(), target_, options);
    EXPECT_TRUE(drafter.ok()) << drafter.status().to_string();
    return drafter.ok() ? std::move(drafter).value() : nullptr;
  }

  static DraftRequest request(StreamId stream, int64_t position, int32_t anchor, int depth = kBlock) {
    return testing::draft_request(stream, position, anchor, depth);
  }

  static Draft draft_one(Drafter& drafter, const DraftRequest& r) {
    return std::move(drafter.draft(std::span<const DraftRequest>(&r, 1))[0]);
  }

  TempDir dir_;
  EmbeddingTarget target_{testing::random_embedding(kVocab, kHidden, 7), kVocab, kHidden, 4};
};

void expect_same_draft(const Draft& a, const Draft& b) {
  ASSERT_TRUE(a.status.ok()) << a.status.to_string();
  ASSERT_TRUE(b.status.ok()) << b.status.to_string();
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.chances.size(), b.chances.size());
  EXPECT_EQ(std::memcmp(a.chances.data(), b.chances.data(), a.chances.size() * sizeof(float)), 0);
}

TEST_F(DrafterTest, FactsDescribeTheBlockTapsAndConfidenceHead) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  EXPECT_EQ(drafter->facts().max_depth, kBlock);
  EXPECT_EQ(drafter->facts().tap_layers, (std::vector<int>{0, 2}));
  EXPECT_TRUE(drafter->facts().has_confidence);
  EXPECT_EQ(drafter->facts().stream_bytes_per_position, 2 * 2 * 32 * 4);  // layers x (K, V) x kv width x fp32
  EXPECT_EQ(drafter->open_streams(), 0u);                                 // the warm-up stream was released
}

TEST_F(DrafterTest, DraftGivesDepthTokensInVocabularyWithNonIncreasingChances) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(drafter->absorb(1, 0, 6, testing::random_taps(6, kTapWidth, 1)).ok());
  for (int depth = 1; depth <= kBlock; ++depth) {
    Draft draft = draft_one(*drafter, request(1, 6, 5, depth));
    ASSERT_TRUE(draft.status.ok()) << draft.status.to_string();
    ASSERT_EQ(draft.tokens.size(), static_cast<size_t>(depth));
    for (size_t slot = 0; slot < draft.tokens.size(); ++slot) {
      EXPECT_GE(draft.tokens[slot], 0);
      EXPECT_LT(draft.tokens[slot], kVocab);
      EXPECT_GT(draft.chances[slot], 0.0f);
      EXPECT_LE(draft.chances[slot], 1.0f);
      if (slot > 0) {
        EXPECT_LE(draft.chances[slot], draft.chances[slot - 1]);
      }
    }
  }
  // A shallower draft is a prefix of the full one (the block always runs full width).
  Draft full = draft_one(*drafter, request(1, 6, 5));
  Draft two = draft_one(*drafter, request(1, 6, 5, 2));
  EXPECT_EQ(std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 2), two.tokens);
}

TEST_F(DrafterTest, ContextMattersSoADifferentHistoryChangesTheBlock) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(drafter->absorb(1, 0, 6, testing::random_taps(6, kTapWidth, 1)).ok());
  ASSERT_TRUE(drafter->absorb(2, 0, 6, testing::random_taps(6, kTapWidth, 2)).ok());
  drafter->draft(std::vector<DraftRequest>{request(1, 6, 5)});
  const std::vector<float> first(drafter->last_base_logits().begin(), drafter->last_base_logits().end());
  drafter->draft(std::vector<DraftRequest>{request(2, 6, 5)});
  const std::vector<float> second(drafter->last_base_logits().begin(), drafter->last_base_logits().end());
  ASSERT_EQ(first.size(), static_cast<size_t>(kBlock * kVocab));
  EXPECT_NE(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

TEST_F(DrafterTest, AbsorbInPiecesEqualsAbsorbAtOnceBitForBit) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  const std::vector<float> taps = testing::random_taps(80, kTapWidth, 3);  // crosses the 64-row chunk
  ASSERT_TRUE(drafter->absorb(1, 0, 80, taps).ok());
  for (int64_t start = 0; start < 80; start += 7) {
    const int rows = static_cast<int>(std::min<int64_t>(7, 80 - start));
    ASSERT_TRUE(
        drafter->absorb(2, start, rows, std::span<const float>(taps).subspan(start * kTapWidth, rows * kTapWidth))
            .ok());
  }
  expect_same_draft(draft_one(*drafter, request(1, 80, 9)), draft_one(*drafter, request(2, 80, 9)));
}

TEST_F(DrafterTest, RowsAtOrPastStartReplaceWhatWasHeldSoRollbackReachesTheDrafter) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  const std::vector<float> kept = testing::random_taps(10, kTapWidth, 4);
  const std::vector<float> rejected = testing::random_taps(5, kTapWidth, 5);
  // Stream 1: 10 rows, then 5 wrong rows past them, then a rollback rewriting from 10 with 2 kept rows.
  ASSERT_TRUE(drafter->absorb(1, 0, 10, kept).ok());
  ASSERT_TRUE(drafter->absorb(1, 10, 5, rejected).ok());
  EXPECT_EQ(drafter->context_length(1), 15);
  const std::vector<float> next = testing::random_taps(2, kTapWidth, 6);
  ASSERT_TRUE(drafter->absorb(1, 10, 2, next).ok());
  EXPECT_EQ(drafter->context_length(1), 12);
  // Stream 2 never saw the rejected rows.
  ASSERT_TRUE(drafter->absorb(2, 0, 10, kept).ok());
  ASSERT_TRUE(drafter->absorb(2, 10, 2, next).ok());
  expect_same_draft(draft_one(*drafter, request(1, 12, 17)), draft_one(*drafter, request(2, 12, 17)));
}

TEST_F(DrafterTest, AStreamDraftsTheSameBitsAloneOrBesideOtherStreams) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  for (StreamId stream = 1; stream <= 5; ++stream)
    ASSERT_TRUE(
        drafter->absorb(stream, 0, 3 + 4 * stream, testing::random_taps(3 + 4 * stream, kTapWidth, stream)).ok());
  std::vector<DraftRequest> all;
  for (StreamId stream = 1; stream <= 5; ++stream)
    all.push_back(request(stream, 3 + 4 * stream, 10 + stream, 1 + stream % kBlock));
  all[2].sampling.temperature = 1.0f;
  all[2].sampling.seed = 99;
  const std::vector<Draft> together = drafter->draft(all);
  const std::vector<float> together_logits(drafter->last_base_logits().begin(), drafter->last_base_logits().end());
  for (size_t index = 0; index < all.size(); ++index) {
    expect_same_draft(draft_one(*drafter, all[index]), together[index]);
    // The head runs up to each pass's deepest request: compare the slots this request drafts.
    const std::span<const float> alone = drafter->last_base_logits();
    const size_t drafted = static_cast<size_t>(all[index].depth) * kVocab;
    EXPECT_EQ(std::memcmp(alone.data(), together_logits.data() + index * kBlock * kVocab, drafted * sizeof(float)), 0);
  }
}

TEST_F(DrafterTest, AShallowPassRunsTheHeadAndALoneRequestsLastLayerOnlyUpToItsDepthWithTheBitsOfAFullPass) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  for (StreamId stream = 1; stream <= 3; ++stream)
    ASSERT_TRUE(drafter->absorb(stream, 0, 9, testing::random_taps(9, kTapWidth, 40 + stream)).ok());
  std::vector<DraftRequest> full, shallow;
  for (StreamId stream = 1; stream <= 3; ++stream) {
    full.push_back(request(stream, 9, 20 + stream));
    shallow.push_back(request(stream, 9, 20 + stream, 1 + static_cast<int>(stream) % 2));  // depths 2, 1, 2
  }
  for (size_t count : {size_t{1}, size_t{3}}) {  // one request (in place) and several (packed through the head)
    const std::span<const DraftRequest> some_full(full.data(), count), some_shallow(shallow.data(), count);
    const std::vector<Draft> deep = drafter->draft(some_full);
    const std::vector<float> deep_logits(drafter->last_base_logits().begin(), drafter->last_base_logits().end());
    const std::vector<float> deep_hidden(drafter->last_final_hidden().begin(), drafter->last_final_hidden().end());
    const std::vector<Draft> cut = drafter->draft(some_shallow);
    const std::span<const float> cut_logits = drafter->last_base_logits();
    const std::span<const float> cut_hidden = drafter->last_final_hidden();
    ASSERT_EQ(cut_hidden.size(), deep_hidden.size());
    // Hf: one request's last layer runs only its drafted slots (NaN past them); several requests keep every row.
    for (size_t row = 0; row < count * kBlock; ++row) {
      const float* got = cut_hidden.data() + row * kHidden;
      if (count == 1 && static_cast<int>(row) >= shallow[0].depth)
        EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[kHidden - 1])) << "Hf row " << row;
      else
        EXPECT_EQ(std::memcmp(got, deep_hidden.data() + row * kHidden, kHidden * sizeof(float)), 0) << "Hf row " << row;
    }
    ASSERT_EQ(cut_logits.size(), deep_logits.size());
    const int deepest = count == 1 ? shallow[0].depth : 2;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_TRUE(cut[i].status.ok()) << cut[i].status.to_string();
      EXPECT_EQ(cut[i].tokens,
                std::vector<int32_t>(deep[i].tokens.begin(), deep[i].tokens.begin() + shallow[i].depth));
      // The confidences of the kept slots too (the lanes' trim prices them), bit for bit.
      ASSERT_EQ(cut[i].chances.size(), static_cast<size_t>(shallow[i].depth));
      EXPECT_EQ(std::memcmp(cut[i].chances.data(), deep[i].chances.data(), cut[i].chances.size() * sizeof(float)), 0)
          << count << " requests, request " << i;
      for (int slot = 0; slot < kBlock; ++slot) {
        const float* got = cut_logits.data() + (i * kBlock + slot) * kVocab;
        if (slot < deepest) {
          EXPECT_EQ(std::memcmp(got, deep_logits.data() + (i * kBlock + slot) * kVocab, kVocab * sizeof(float)), 0)
              << count << " requests, request " << i << " slot " << slot;
        } else {
          EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[kVocab - 1])) << "slot " << slot << " past the deepest";
        }
      }
    }
  }
}

TEST_F(DrafterTest, ThreadCountDoesNotChangeTheDraft) {
  std::unique_ptr<DsparkDrafter> one = load();
  DrafterOptions options;
  options.threads = 2;
  std::unique_ptr<DsparkDrafter> two = load(options);
  ASSERT_TRUE(one && two);
  const std::vector<float> taps = testing::random_taps(9, kTapWidth, 8);
  ASSERT_TRUE(one->absorb(1, 0, 9, taps).ok());
  ASSERT_TRUE(two->absorb(1, 0, 9, taps).ok());
  expect_same_draft(draft_one(*one, request(1, 9, 3)), draft_one(*two, request(1, 9, 3)));
}

// Beside a CPU target whose pool has the drafter's thread count the drafter runs on that pool (no second pool whose
// idle worker spins against the target's); other thread counts keep a pool of their own; the drafts are the same bits.
TEST_F(DrafterTest, ADrafterSharesTheTargetsPoolOfTheSameThreadCountAndDraftsTheSameBits) {
  ThreadPool two(2), three(3);
  DrafterOptions options;
  options.threads = 2;
  target_.pool = &two;
  std::unique_ptr<DsparkDrafter> sharing = load(options);
  target_.pool = &three;
  std::unique_ptr<DsparkDrafter> own = load(options);
  target_.pool = nullptr;
  std::unique_ptr<DsparkDrafter> alone = load();  // one thread: no pool at all
  ASSERT_TRUE(sharing && own && alone);
  EXPECT_EQ(sharing->pool(), &two);
  ASSERT_NE(own->pool(), nullptr);
  EXPECT_NE(own->pool(), &three);
  EXPECT_EQ(own->pool()->size(), 2);
  EXPECT_EQ(alone->pool(), nullptr);
  const std::vector<float> taps = testing::random_taps(9, kTapWidth, 12);
  for (DsparkDrafter* drafter : {sharing.get(), own.get(), alone.get()})
    ASSERT_TRUE(drafter->absorb(1, 0, 9, taps).ok());
  const Draft reference = draft_one(*alone, request(1, 9, 5));
  expect_same_draft(draft_one(*sharing, request(1, 9, 5)), reference);
  expect_same_draft(draft_one(*own, request(1, 9, 5)), reference);
}

TEST_F(DrafterTest, SampledDraftsAreKeyedBySeedAndPosition) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(drafter->absorb(1, 0, 5, testing::random_taps(5, kTapWidth, 9)).ok());
  DraftRequest sampled = request(1, 5, 4);
  sampled.sampling.temperature = 2.0f;
  sampled.sampling.seed = 1;
  const Draft first = draft_one(*drafter, sampled);
  expect_same_draft(first, draft_one(*drafter, sampled));  // same key, same draft
  bool differs = false;
  for (uint64_t seed = 2; seed < 12 && !differs; ++seed) {
    sampled.sampling.seed = seed;
    differs = draft_one(*drafter, sampled).tokens != first.tokens;
  }
  EXPECT_TRUE(differs) << "ten seeds all drew the greedy-identical block";
}

TEST_F(DrafterTest, MisplacedRequestsFailAloneWithTheNumbers) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(drafter->absorb(1, 0, 4, testing::random_taps(4, kTapWidth, 10)).ok());
  const std::vector<Draft> drafts = drafter->draft(std::vector<DraftRequest>{
      request(1, 5, 3), request(1, 4, 3, kBlock + 1), request(1, 4, kVocab), request(7, 0, 3), request(1, 4, 3)});
  EXPECT_EQ(drafts[0].status.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(drafts[0].status.message().find("holds 4 positions of stream 1, the anchor is at 5"), std::string::npos);
  EXPECT_EQ(drafts[1].status.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(drafts[1].status.message().find("depth 5 outside [1, 4]"), std::string::npos);
  EXPECT_EQ(drafts[2].status.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(drafts[3].status.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(drafts[4].status.ok()) << drafts[4].status.to_string();
  EXPECT_EQ(drafts[4].tokens.size(), static_cast<size_t>(kBlock));
  // A gap in absorb is refused too.
  Status gap = drafter->absorb(1, 6, 1, testing::random_taps(1, kTapWidth, 1));
  EXPECT_EQ(gap.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(gap.message().find("holds 4 positions"), std::string::npos);
}

TEST_F(DrafterTest, ReleaseFreesTheStreamAndItsContext) {
  std::unique_ptr<DsparkDrafter> drafter = load();
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(drafter->absorb(1, 0, 4, testing::random_taps(4, kTapWidth, 10)).ok());
  ASSERT_TRUE(drafter->absorb(2, 0, 4, testing::random_taps(4, kTapWidth, 10)).ok());
  EXPECT_EQ(drafter->open_streams(), 2u);
  drafter->release(1);
  drafter->release(1);  // twice is a no-op
  drafter->release(42);
  EXPECT_EQ(drafter->open_streams(), 1u);
  EXPECT_EQ(drafter->context_length(1), 0);
  EXPECT_EQ(draft_one(*drafter, request(1, 4, 3)).status.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(draft_one(*drafter, request(2, 4, 3)).status.ok());
}

TEST_F(DrafterTest, IntEightDraftsAgreeWithBf16OnMostPicks) {
  std::unique_ptr<DsparkDrafter> bf16 = load();
  DrafterOptions options;
  options.bits = 8;
  std::unique_ptr<DsparkDrafter> int8 = load(options);
  ASSERT_TRUE(bf16 && int8);
  EXPECT_LT(int8->weight_bytes(), bf16->weight_bytes());
  int same = 0, total = 0;
  for (StreamId stream = 1; stream <= 12; ++stream) {
    const std::vector<float> taps = testing::random_taps(8, kTapWidth, 100 + stream);
    ASSERT_TRUE(bf16->absorb(stream, 0, 8, taps).ok());
    ASSERT_TRUE(int8->absorb(stream, 0, 8, taps).ok());
    const Draft a = draft_one(*bf16, request(stream, 8, static_cast<int32_t>(stream)));
    const Draft b = draft_one(*int8, request(stream, 8, static_cast<int32_t>(stream)));
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    // Compare slot by slot while the chains agree (after a different pick the chains condition differently).
    for (size_t slot = 0; slot < a.tokens.size(); ++slot) {
      ++total;
      if (a.tokens[slot] != b.tokens[slot]) break;
      ++same;
    }
  }
  EXPECT_GE(same, total * 8 / 10) << same << " of " << total;
}

}  // namespace
}  // namespace ls::dspark
