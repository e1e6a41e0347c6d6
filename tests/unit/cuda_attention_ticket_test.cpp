// The tile kernel's ticket fold (set_attention_ticket, step11: the last CTA of each (row tile, KV head) folds the split
// pairs' chunk states, no combine launch): the combine's bits on decode rows, verify windows and short windows across
// chunk edges, split automatically and pinned, rows per CTA 1 and the most; every launch leaves its tickets at zero (a
// second launch on the same counters, output poisoned again, gives the same bits); so do windows of 2 or 3 chunks
// walked by one CTA (set_attention_split_from 3 / 4); a planted fault (each pair's last chunk left out of the fold)
// turns the check red.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda_attention_util.h"
#include "cuda_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {
namespace {

using namespace attention_testing;

struct TicketScope {
  TicketScope(bool on, int split_from) : before(attention_ticket_fold()) {
    set_attention_ticket(on);
    set_attention_split_from(split_from);
  }
  ~TicketScope() {
    set_attention_ticket(before);
    set_attention_split_from(2);
  }
  bool before;
};

// Forwards over streams of 1030, 513 and 300 keys: one decode row per stream at each side of every chunk edge, rounds
// of 16-row windows straddling each edge, and windows of 2 / 5 rows of every stream.
std::vector<std::vector<Win>> ticket_layouts(const PagedCase& c) {
  std::vector<std::vector<Win>> all;
  const int streams = static_cast<int>(c.lengths.size());
  for (int64_t edge = kAttentionChunkKeys; edge < 1030; edge += kAttentionChunkKeys) {
    std::vector<Win> decode, round;
    for (int s = 0; s < streams; ++s) {
      for (int64_t p : {edge - 1, edge})
        if (p < c.lengths[s]) decode.push_back({s, p, 1});
      if (edge + 8 <= c.lengths[s]) round.push_back({s, edge - 8, 16});
    }
    all.push_back(decode);
    if (!round.empty()) all.push_back(round);
  }
  for (int64_t width : {2, 5}) {
    std::vector<Win> forward;
    for (int s = 0; s < streams; ++s) forward.push_back({s, c.lengths[s] - width, width});
    all.push_back(forward);
  }
  return all;
}

// Output of one forward's tiles, ticket fold on or off; on, launched `launches` times on the same (zero) counters,
// the output poisoned before each launch, every launch's output compared with the first (`relaunch_differ`).
std::vector<bf16> tiles_output(const PagedCase& c, const std::vector<Win>& wins, bool ticket, int split_from,
                               AttentionTiling tiling, int launches, int& relaunch_differ) {
  const TicketScope scope(ticket, split_from);
  Forward forward(c, wins);
  forward.give_scratch(c, kScratchChunks);
  if (ticket) forward.give_tickets(c);
  const int64_t count = forward.rows * c.q_width();
  std::vector<bf16> first;
  for (int i = 0; i < launches; ++i) {
    forward.out = cuda::testing::poisoned<bf16>(count);
    const Status status = forward.launch(c, Kernel::Tiles, tiling);
    EXPECT_TRUE(status.ok()) << status.to_string();
    const std::vector<bf16> out = download(forward.out, count);
    if (i == 0) first = out;
    else if (std::memcmp(out.data(), first.data(), sizeof(bf16) * count) != 0) ++relaunch_differ;
  }
  return first;
}

// Rows of the layouts whose bits under the ticket fold (windows split from `split_from` chunks) differ from the
// combine's (every window past one chunk split); `rows` counts the rows compared.
int ticket_differences(const Shape& shape, bool fault, int split_from, int& rows, int& relaunch_differ) {
  const PagedCase c = make_case(shape, {1030, 513, 300}, 91 + shape.heads);
  const int most = 64 / (shape.heads / shape.kv_heads);
  int differ = 0;
  for (const std::vector<Win>& wins : ticket_layouts(c))
    for (const AttentionTiling& base : {AttentionTiling{}, AttentionTiling{1, false, 2, false},
                                        AttentionTiling{most, false, 3, false}, AttentionTiling{1, false, 7, false}}) {
      const std::vector<bf16> want = tiles_output(c, wins, false, 2, base, 1, relaunch_differ);
      AttentionTiling tiling = base;
      tiling.fault_ticket_last_chunk = fault;
      const std::vector<bf16> got = tiles_output(c, wins, true, split_from, tiling, fault ? 1 : 2, relaunch_differ);
      for (size_t r = 0; r * c.q_width() < want.size(); ++r, ++rows)
        if (std::memcmp(want.data() + r * c.q_width(), got.data() + r * c.q_width(), sizeof(bf16) * c.q_width()))
          ++differ;
      if (split_from > 2 && !fault) {  // the combine launch with the shorter windows walked by one CTA too
        const std::vector<bf16> walked = tiles_output(c, wins, false, split_from, base, 1, relaunch_differ);
        if (std::memcmp(want.data(), walked.data(), sizeof(bf16) * want.size()) != 0) ++differ;
      }
    }
  return differ;
}

TEST(CudaAttentionTicket, TheTicketFoldGivesTheCombineBitsAndLeavesItsTicketsAtZero) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const Shape& shape : {Shape{32, 8, 64}, Shape{8, 2, 128}, Shape{4, 2, 16}})
    for (const int split_from : {2, 3, 4}) {
      int rows = 0, relaunch_differ = 0;
      EXPECT_EQ(ticket_differences(shape, false, split_from, rows, relaunch_differ), 0)
          << name(shape) << " split from " << split_from << " chunks, of " << rows << " rows";
      EXPECT_EQ(relaunch_differ, 0) << name(shape) << ": a second launch on the same tickets differed";
      EXPECT_GT(rows, 500) << name(shape);
    }
}

TEST(CudaAttentionTicket, APlantedLastChunkLeftOutOfTheTicketFoldTurnsTheCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  int rows = 0, relaunch_differ = 0;
  // every row past the first chunk of a split window folds one chunk fewer: most rows must differ
  EXPECT_GT(ticket_differences({32, 8, 64}, true, 2, rows, relaunch_differ), rows / 2) << "of " << rows << " rows";
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
