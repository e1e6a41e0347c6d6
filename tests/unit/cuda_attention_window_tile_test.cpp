// The one-window tile (session 13, set_attention_window_tile / LS_ATTENTION_WINDOW_TILE): a forward of one window (a
// stream's verify window) runs N rows a CTA instead of the automatic rule's one. Every row of windows of 1..16 rows
// keeps the bits of its one-row forward, split or not, on every test shape at contexts past several chunks, and the
// planted block-order fault (inert in CTAs of one row) turns it red, which shows the wider tile ran.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include "cuda_attention_util.h"

namespace ls::lfm2::gpu {
namespace {

using namespace attention_testing;

struct WindowTileScope {
  explicit WindowTileScope(int rows) : before(attention_window_tile()) { set_attention_window_tile(rows); }
  ~WindowTileScope() { set_attention_window_tile(before); }
  int before;
};

// Rows of one-window forwards (windows of 1..16 rows ending at each stream's last position) whose bits differ from
// the same rows' one-row forwards, under `tile` rows a CTA; `fault` plants the swapped first blocks.
int differing_rows(const PagedCase& c, int tile, int splits, bool fault, int& rows_seen) {
  const WindowTileScope scope(tile);
  const int width = c.q_width();
  int differ = 0;
  for (int s = 0; s < static_cast<int>(c.lengths.size()); ++s)
    for (int64_t rows = 1; rows <= 16; ++rows) {
      const int64_t start = c.lengths[s] - rows;
      AttentionTiling tiling;
      tiling.splits = splits;
      tiling.window_count = 1;
      tiling.fault_swap_first_blocks = fault;
      const std::vector<bf16> got = run_forward(c, {{s, start, rows}}, Kernel::Tiles, tiling);
      for (int64_t r = 0; r < rows; ++r) {
        AttentionTiling one;
        one.splits = splits;
        const std::vector<bf16> want = run_forward(c, {{s, start + r, 1}}, Kernel::Tiles, one);
        bool same = true;
        for (int i = 0; i < width; ++i) same = same && got[r * width + i].bits == want[i].bits;
        differ += !same;
        ++rows_seen;
      }
    }
  return differ;
}

TEST(CudaAttentionWindowTile, EveryRowOfOneWindowKeepsItsOneRowBitsAtTilesOf8And16SplitOrNot) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const Shape& shape : kShapes) {
    const PagedCase c = make_case(shape, {300, 40, 700}, 61 + shape.heads + shape.head_dim);
    const int most = 64 / (shape.heads / shape.kv_heads);
    for (const int tile : {8, 16})
      for (const int splits : {0, 1, 3}) {
        int rows = 0;
        EXPECT_EQ(differing_rows(c, std::min(tile, most), splits, false, rows), 0)
            << name(shape) << ", tile " << tile << ", splits " << splits << ": rows differing of " << rows;
      }
  }
}

TEST(CudaAttentionWindowTile, APlantedBlockOrderFaultIsSeenUnderTheWindowTileAndNotInOneRowCtas) {
  LS_SKIP_WITHOUT_DEVICE();
  const PagedCase c = make_case({32, 8, 64}, {300, 200}, 67);
  int rows = 0;
  EXPECT_GT(differing_rows(c, 8, 0, true, rows), rows / 4) << "the swapped first blocks went unseen in " << rows
                                                            << " rows under the one-window tile of 8";
  rows = 0;
  EXPECT_EQ(differing_rows(c, 0, 0, true, rows), 0) << "the automatic rule runs one row a CTA at 16 rows and less";
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
