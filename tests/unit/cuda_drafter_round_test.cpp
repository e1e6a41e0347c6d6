// Session 19's round switches against the default drafter, bit for bit: the grouped row attention
// (set_row_group) and the absorb inside the next pass's graph (set_absorb_in_pass).
// Shared setup: cuda_drafter_test_util.h.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_drafter_test_util.h"

namespace ls::dspark {
namespace {

using namespace cuda_test;

// One request at contexts of 11, 300 and 600 rows (inside the row kernel's 160 staged keys, past them, past the
// grouped kernel's 512): Hf, U, tokens and chance bits equal the row kernel's with the nano's 3 query heads a KV head
// in one CTA, eagerly, captured and replayed (scratch poisoned before every pass). Planted: the grouped kernel
// without its first chunk must change U.
TEST(CudaDrafterLaunches, TheGroupedRowAttentionGivesTheRowKernelsPassBits) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, gpu, c, width] = nano;
  const int group = c.num_heads / c.num_kv_heads;
  const cuda::AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 0.125f};
  ASSERT_TRUE(cuda::block_attention_row_group_supported(c.block_size, dims, group));
  ASSERT_EQ(gpu->row_attention(), 1);
  ASSERT_EQ(gpu->row_group(), 4) << "the default since session 19 (4 heads a CTA; the nano's 3 take it when set)";
  for (const int length : {11, 300, 600}) {
    SCOPED_TRACE("context " + std::to_string(length));
    const StreamId stream = length;
    ASSERT_TRUE(gpu->absorb(stream, 0, length, testing::random_taps(length, width, 1700 + length)).ok());
    const DraftRequest request = request_at(stream, length, 40 + length % 97, c.block_size);
    const std::span<const DraftRequest> one(&request, 1);
    gpu->set_row_group(0);
    const PassBits reference = poisoned_pass(*gpu, one);
    gpu->set_row_group(group);
    const int64_t failures = gpu->graph_failures();
    for (int sighting = 0; sighting < 3; ++sighting) {  // eager, captured, replayed
      SCOPED_TRACE("sighting " + std::to_string(sighting));
      expect_same_pass_bits(poisoned_pass(*gpu, one), reference);
    }
    EXPECT_EQ(gpu->graph_failures(), failures);
    gpu->set_row_group(group, /*planted_first_chunk=*/true);
    const PassBits planted = poisoned_pass(*gpu, one);
    ASSERT_EQ(planted.logits.size(), reference.logits.size());
    EXPECT_NE(std::memcmp(planted.logits.data(), reference.logits.data(), planted.logits.size() * sizeof(float)), 0)
        << "the grouped kernel without its first chunk left U as it was: the bit test cannot see it";
    gpu->set_row_group(0);
    gpu->release(stream);
  }
}

// Lanes-like rounds on two drafters of the nano pair, one with set_absorb_in_pass: absorb_device() of 1..16 rows of
// one stream waits for the next draft() of one request and runs inside its graph; a pass of two requests, a
// settle(), a release and a 17-row absorb run it first the old way; two streams' pieces never wait. Every round's Hf, U, tokens and
// chance bits equal the absorb-first drafter's (scratch poisoned between the absorb and the pass, so the absorb's own
// scratch too); the rounds run twice, the second time with the one graph on both.
// Planted: the branch without its gather projects poisoned features and must not draft the same.
TEST(CudaDrafterLaunches, AnAbsorbInsideThePassGivesTheAbsorbFirstBits) {
  LS_SKIP_WITHOUT_DEVICE();
  NanoDrafter nano;
  ASSERT_TRUE(nano.load());
  auto& [target, reference, c, width] = nano;
  std::unique_ptr<CudaDsparkDrafter> inside = nano.another();
  ASSERT_TRUE(inside);
  EXPECT_TRUE(inside->absorb_in_pass()) << "the default since session 19";
  reference->set_absorb_in_pass(false);
  reference->set_one_graph(false);
  inside->set_one_graph(false);
  reference->capture_bucket_graphs();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  const UploadedTaps taps = upload_taps(24, width, 1900, device);
  int64_t lengths[2] = {40, 25};
  for (CudaDsparkDrafter* d : {reference.get(), inside.get()}) {
    for (StreamId stream : {0, 1}) {
      ASSERT_TRUE(d->absorb(stream, 0, lengths[stream], testing::random_taps(lengths[stream], width, 1800 + stream))
                      .ok());
    }
  }
  // A round: pieces {stream, first tap row, rows}, the streams drafted, how the absorb reaches the pass.
  enum class Then { Pass, Settle, Release };
  struct Piece {
    StreamId stream;
    int first_row, rows;
  };
  struct Round {
    std::vector<Piece> pieces;
    std::vector<StreamId> drafted;
    bool waits;  // the absorb waits for the pass (at most 16 rows)
    Then then = Then::Pass;
  };
  const std::vector<Round> rounds = {
      {{{0, 0, 5}}, {0}, true},
      {{{0, 7, 1}}, {0}, true},
      {{{0, 3, 9}, {1, 12, 4}}, {0}, false},  // two streams' pieces: absorbed at once, as before
      {{{1, 0, 16}}, {1}, true},
      {{{0, 2, 6}}, {0}, true, Then::Settle},
      {{{0, 5, 3}, {1, 9, 2}}, {0, 1}, false},  // two streams' pieces (then a pass of two requests)
      {{{1, 13, 3}}, {0, 1}, true},             // one stream's rows, then a pass of two requests: runs first
      {{{0, 0, 17}}, {0}, false},              // more than 16 rows: never waits
      {{{0, 11, 4}}, {0}, true},
  };
  const Round last = {{{1, 20, 2}}, {0}, true, Then::Release};
  // The rounds alone, then again with set_one_graph on both (captured at load), then the release.
  std::vector<const Round*> schedule;
  for (const Round& round : rounds) schedule.push_back(&round);
  for (const Round& round : rounds) schedule.push_back(&round);
  schedule.push_back(&last);
  int round_index = 0;
  for (const Round* scheduled : schedule) {
    const Round& round = *scheduled;
    if (round_index == static_cast<int>(rounds.size())) {
      for (CudaDsparkDrafter* d : {reference.get(), inside.get()}) {
        d->set_one_graph(true);
        d->capture_bucket_graphs();
      }
    }
    SCOPED_TRACE("round " + std::to_string(round_index++));
    std::vector<TapRows> pieces;
    for (const Piece& piece : round.pieces) {
      pieces.push_back(TapRows{piece.stream, lengths[piece.stream], piece.first_row, piece.rows});
      lengths[piece.stream] += piece.rows;
    }
    std::vector<DraftRequest> requests;
    for (const StreamId stream : round.drafted) {
      requests.push_back(request_at(stream, lengths[stream], 60 + 7 * round_index + stream, c.block_size));
    }
    std::vector<PassBits> passes;
    for (CudaDsparkDrafter* d : {reference.get(), inside.get()}) {
      ASSERT_TRUE(d->absorb_device(pieces, taps.taps).ok());
      if (d == inside.get()) {
        EXPECT_EQ(inside->absorb_pending(), round.waits);
      }
      if (round.then == Then::Settle) {
        ASSERT_TRUE(d->settle().ok());
      }
      if (round.then == Then::Release) d->release(1);
      EXPECT_FALSE(d == inside.get() && round.then != Then::Pass && inside->absorb_pending());
      passes.push_back(poisoned_pass(*d, requests));
      EXPECT_FALSE(d->absorb_pending());
    }
    expect_same_pass_bits(passes[1], passes[0]);
  }
  EXPECT_EQ(inside->graph_failures(), 0);
  // Planted: without the gather the absorb projects the poisoned features (NaN), so the pass cannot draft the same.
  inside->set_absorb_in_pass(true, /*planted_no_gather=*/true);
  inside->capture_bucket_graphs();
  const std::vector<TapRows> pieces = {TapRows{0, lengths[0], 1, 5}};
  lengths[0] += 5;
  const std::vector<DraftRequest> requests = {request_at(0, lengths[0], 77, c.block_size)};
  std::vector<PassBits> passes;
  for (CudaDsparkDrafter* d : {reference.get(), inside.get()}) {
    ASSERT_TRUE(d->absorb_device(pieces, taps.taps).ok());
    passes.push_back(poisoned_pass(*d, requests));
  }
  ASSERT_TRUE(passes[0].drafts[0].status.ok());
  const bool same_u = passes[1].logits.size() == passes[0].logits.size() &&
                      std::memcmp(passes[1].logits.data(), passes[0].logits.data(),
                                  passes[0].logits.size() * sizeof(float)) == 0;
  EXPECT_TRUE(!passes[1].drafts[0].status.ok() || passes[1].drafts[0].tokens != passes[0].drafts[0].tokens || !same_u)
      << "the absorb branch without its gather drafted the reference's bits: the test cannot see a lost absorb";
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
