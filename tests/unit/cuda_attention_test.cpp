// The CUDA target's attention kernels on random paged caches: the tile kernel against an fp64 reference, and every
// row's bits the same whether it runs alone, inside windows of 2..16 rows, or in forwards of 256+ rows; the target
// on tile attention. (Long contexts across chunk edges, split or not: cuda_attention_chunks_test.cpp.)
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cuda_attention_util.h"
#include "cuda_test_util.h"
#include "lfm2_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {
namespace {

using namespace attention_testing;

TEST(CudaAttention, TheTileKernelMatchesAnFp64ReferenceOnShuffledPagesForGqa1To8AndHeadDims16To128) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const Shape& shape : kShapes) {
    // contexts that end on and around page (32) and block (32 / 64) edges
    const PagedCase c = make_case(shape, {1, 33, 64, 65, 130, 200}, 11 + shape.heads);
    std::vector<Win> wins;
    for (int s = 0; s < 6; ++s) wins.push_back({s, 0, c.lengths[s]});
    for (Kernel kernel : {Kernel::Rows, Kernel::Tiles}) {
      const std::vector<bf16> out = run_forward(c, wins, kernel);
      double worst = 0, sum = 0;
      size_t unwritten = 0, count = 0;
      int64_t row = 0;
      for (int s = 0; s < 6; ++s)
        for (int64_t pos = 0; pos < c.lengths[s]; ++pos, ++row) {
          const std::vector<double> ref = reference_row(c, s, pos);
          for (int i = 0; i < c.q_width(); ++i) {
            const float got = bf16_to_float(out[row * c.q_width() + i]);
            if (!std::isfinite(got)) ++unwritten;
            const double err = std::abs(got - ref[i]);
            worst = std::max(worst, std::isfinite(got) ? err : 1e9);
            sum += err;
            ++count;
          }
        }
      std::printf("[cuda attention] %s %s: max err %.3g, mean %.3g\n", name(shape).c_str(),
                  kernel == Kernel::Rows ? "rows " : "tiles", worst, sum / count);
      EXPECT_EQ(unwritten, 0u) << name(shape);
      EXPECT_LE(worst, 0.03) << name(shape);
      EXPECT_LE(sum / count, 0.003) << name(shape);
    }
  }
}

// Counts rows of `out` (rows of the windows `wins`) whose bits differ from the same (stream, position) run alone.
int differing_rows(const PagedCase& c, const std::vector<std::vector<std::vector<bf16>>>& alone,
                   const std::vector<Win>& wins, const std::vector<bf16>& out) {
  int differ = 0;
  int64_t row = 0;
  for (const Win& w : wins)
    for (int64_t r = 0; r < w.rows; ++r, ++row) {
      const std::vector<bf16>& want = alone[w.stream][w.start + r];
      for (int i = 0; i < c.q_width(); ++i)
        if (out[row * c.q_width() + i].bits != want[i].bits) {
          ++differ;
          break;
        }
    }
  return differ;
}

// Every (stream, position) as a one-row forward.
std::vector<std::vector<std::vector<bf16>>> rows_alone(const PagedCase& c) {
  std::vector<std::vector<std::vector<bf16>>> alone(c.lengths.size());
  for (size_t s = 0; s < c.lengths.size(); ++s)
    for (int64_t pos = 0; pos < c.lengths[s]; ++pos)
      alone[s].push_back(run_forward(c, {{static_cast<int>(s), pos, 1}}, Kernel::Tiles));
  return alone;
}

// The forwards that must give the one-row bits: windows of 2..16 rows (one per stream per forward, so CTAs mix
// streams), each stream whole from 0 (300 rows), all streams at ragged starts, and one 16 x 16 = 256-row round.
std::vector<std::vector<Win>> layouts(const PagedCase& c) {
  const int streams = static_cast<int>(c.lengths.size());
  std::vector<std::vector<Win>> all;
  for (int64_t width = 2; width <= 16; ++width)
    for (int64_t start = 0; start < 300; start += width) {
      std::vector<Win> forward;
      for (int s = 0; s < streams; ++s)
        if (start < c.lengths[s]) forward.push_back({s, start, std::min(width, c.lengths[s] - start)});
      all.push_back(forward);
    }
  for (int s = 0; s < streams; ++s) all.push_back({{s, 0, c.lengths[s]}});
  std::vector<Win> ragged, round;
  for (int s = 0; s < streams; ++s) ragged.push_back({s, 7 * s + 5, c.lengths[s] - 7 * s - 5});
  for (int i = 0; i < 16; ++i) round.push_back({i % streams, 40 + 16 * (i / streams), 16});
  all.push_back(ragged);
  all.push_back(round);
  return all;
}

TEST(CudaAttention, EveryRowHasItsOneRowBitsInWindowsOf2To16RowsAndInForwardsOf256RowsAndMore) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const Shape& shape : kShapes) {
    const PagedCase c = make_case(shape, {300, 129, 200}, 23 + shape.heads);
    const auto alone = rows_alone(c);
    int forwards = 0, differ = 0;
    for (const std::vector<Win>& wins : layouts(c)) {
      differ += differing_rows(c, alone, wins, run_forward(c, wins, Kernel::Tiles));
      ++forwards;
    }
    // the big forwards again with rows per CTA pinned: 1, 2 and the most
    const int most = 64 / (shape.heads / shape.kv_heads);
    const auto all = layouts(c);
    for (int tile : {1, 2, most})
      for (size_t i = all.size() - 5; i < all.size(); ++i) {
        differ += differing_rows(c, alone, all[i], run_forward(c, all[i], Kernel::Tiles, {tile, false, 0, false}));
        ++forwards;
      }
    EXPECT_EQ(differ, 0) << name(shape) << ": rows differing from their one-row run over " << forwards
                         << " forwards";
  }
}

// The planted swapped block order on the big forwards: rows differing from their one-row run, of `total` rows.
int block_order_fault_differences(int& total) {
  const PagedCase c = make_case({32, 8, 64}, {300, 129, 200}, 5);
  const auto alone = rows_alone(c);
  const auto all = layouts(c);
  int differ = 0;
  total = 0;
  for (size_t i = all.size() - 5; i < all.size(); ++i) {
    differ += differing_rows(c, alone, all[i], run_forward(c, all[i], Kernel::Tiles, {0, true, 0, false}));
    for (const Win& w : all[i]) total += static_cast<int>(w.rows);
  }
  return differ;
}

TEST(CudaAttention, APlantedBlockOrderFaultTurnsTheInvarianceCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  int total = 0;
  EXPECT_GT(block_order_fault_differences(total), total / 4) << "the swapped block order went unseen in " << total
                                                             << " rows";
}

// The tile kernel launched early (step10: programmatic, each CTA's first two blocks of keys of earlier positions staged
// before its wait; the only launch up to 256 rows since s10final): the bits of the plain instance the prefill runs
// (set_attention_tiles_early(false), tests only) on every layout, split or not, rows per CTA pinned too; and the
// planted block-order fault still seen under it.
TEST(CudaAttention, TheEarlyTileLaunchGivesThePlainInstanceBitsAndStillSeesAPlantedBlockOrderFault) {
  LS_SKIP_WITHOUT_DEVICE();
  struct EarlyScope {
    EarlyScope() : before(attention_tiles_early()) {}
    ~EarlyScope() { set_attention_tiles_early(before); }
    bool before;
  } scope;
  auto bits_differ = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
    int n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += a[i].bits != b[i].bits;
    return n;
  };
  for (const Shape& shape : kShapes) {
    const PagedCase c = make_case(shape, {300, 129, 200}, 31 + shape.heads);
    int differ = 0, forwards = 0;
    for (const std::vector<Win>& wins : layouts(c))
      for (const AttentionTiling& tiling : {AttentionTiling{}, AttentionTiling{1, false, 2, false},
                                            AttentionTiling{0, false, 7, false}, AttentionTiling{0, false, 1, false}}) {
        set_attention_tiles_early(false);
        const std::vector<bf16> want = run_forward(c, wins, Kernel::Tiles, tiling);
        set_attention_tiles_early(true);
        differ += bits_differ(run_forward(c, wins, Kernel::Tiles, tiling), want);
        ++forwards;
      }
    EXPECT_EQ(differ, 0) << name(shape) << ": outputs differing from the plain instance over " << forwards
                         << " forwards";
  }
  set_attention_tiles_early(true);
  int total = 0;
  EXPECT_GT(block_order_fault_differences(total), total / 4)
      << "the swapped block order went unseen under the early launch in " << total << " rows";
}

TEST(CudaAttention, TheTileKernelRefusesShapesItCannotRunTooManyRowsPerCtaAndSplitsWithoutScratchByName) {
  LS_SKIP_WITHOUT_DEVICE();
  const PagedCase c = make_case({4, 2, 16}, {40}, 3);
  KvShape odd = c.kv_shape();
  odd.head_dim = 48;
  EXPECT_FALSE(attention_tiles_supported(odd));
  const KvLayer layer{c.dev_keys.data(), c.dev_values.data()};
  const Status wide = attention_tiles(nullptr, 1, nullptr, nullptr, nullptr, odd, layer, nullptr, nullptr);
  EXPECT_EQ(wide.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(wide.message().find("head_dim 48"), std::string::npos) << wide.to_string();
  const Status tall = attention_tiles(nullptr, 1, nullptr, nullptr, nullptr, c.kv_shape(), layer, nullptr, nullptr,
                                      {33, false, 0, false});
  EXPECT_EQ(tall.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(tall.message().find("33 rows per CTA, at most 32"), std::string::npos) << tall.to_string();
  const Status bare = attention_tiles(nullptr, 1, nullptr, nullptr, nullptr, c.kv_shape(), layer, nullptr, nullptr,
                                      {0, false, 4, false});
  EXPECT_EQ(bare.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(bare.message().find("4 splits"), std::string::npos) << bare.to_string();
  DeviceBuffer<float> states = cuda::testing::poisoned<float>(1024);
  const Status many = attention_tiles(nullptr, 1, nullptr, nullptr, nullptr, c.kv_shape(), layer, nullptr, nullptr,
                                      {0, false, 65, false}, {states.data(), 1024});
  EXPECT_EQ(many.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(many.message().find("65 splits (at most 64"), std::string::npos) << many.to_string();
}

// Chooses a kernel for attention() for the life of a test, then restores the previous choice.
struct ChosenKernel {
  AttentionKernel before = attention_kernel();
  explicit ChosenKernel(AttentionKernel kernel) { set_attention_kernel(kernel); }
  ~ChosenKernel() { set_attention_kernel(before); }
};

// The logits of `prompt` fed to a fresh stream in the given chunks (each committed), rows in order.
std::vector<std::vector<float>> prompt_logits(CudaTarget& target, StreamId stream, const std::vector<int32_t>& prompt,
                                              const std::vector<int>& chunks) {
  std::vector<std::vector<float>> rows;
  size_t begin = 0;
  for (int chunk : chunks) {
    Window w;
    w.stream = stream;
    w.tokens = std::span<const int32_t>(prompt.data() + begin, chunk);
    w.want_logits = true;
    Result<Verified> v = target.forward(std::span<const Window>(&w, 1));
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    if (!v.ok()) return rows;
    const size_t vocab = v->logits.size() / chunk;
    for (int r = 0; r < chunk; ++r)
      rows.emplace_back(v->logits.begin() + r * vocab, v->logits.begin() + (r + 1) * vocab);
    EXPECT_TRUE(target.commit(stream, chunk).ok());
    begin += chunk;
  }
  target.release(stream);
  return rows;
}

TEST(CudaAttention, TheTargetOnTileAttentionGivesTheSameBitsForAnyPromptSplitAndStaysNearTheRowKernel) {
  LS_SKIP_WITHOUT_DEVICE();
  const io::ModelConfig config = testing::small_config(false);
  LoadOptions options;
  options.device = Device::Cuda;
  options.max_rows = 512;
  options.max_streams = 8;
  options.kv_pages = 256;
  options.kv_page_size = 16;
  auto made = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 7), options);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  CudaTarget& target = **made;
  const std::vector<int32_t> prompt = testing::random_tokens(300, 21);
  std::vector<std::vector<float>> rows_kernel;
  {
    ChosenKernel rows(AttentionKernel::Rows);
    rows_kernel = prompt_logits(target, 1, prompt, {300});
  }
  ChosenKernel tiles(AttentionKernel::Tiles);
  const auto whole = prompt_logits(target, 2, prompt, {300});
  const auto split = prompt_logits(target, 3, prompt, {37, 200, 63});
  const auto one_by_one = prompt_logits(target, 4, prompt, std::vector<int>(300, 1));
  ASSERT_EQ(whole.size(), 300u);
  ASSERT_EQ(rows_kernel.size(), 300u);
  int differ_split = 0, differ_single = 0;
  double worst = 0;
  for (size_t r = 0; r < 300; ++r) {
    differ_split += std::memcmp(whole[r].data(), split[r].data(), whole[r].size() * sizeof(float)) != 0;
    differ_single += std::memcmp(whole[r].data(), one_by_one[r].data(), whole[r].size() * sizeof(float)) != 0;
    double diff = 0, scale = 0;
    for (size_t i = 0; i < whole[r].size(); ++i) {
      diff = std::max(diff, double(std::abs(whole[r][i] - rows_kernel[r][i])));
      scale = std::max(scale, double(std::abs(rows_kernel[r][i])));
    }
    worst = std::max(worst, std::isfinite(diff) ? diff / scale : 1e9);
  }
  std::printf("[cuda attention] small target: tiles vs rows kernel, max rel logit diff %.3g\n", worst);
  EXPECT_EQ(differ_split, 0) << "rows of 37+200+63 differing from one 300-row window";
  EXPECT_EQ(differ_single, 0) << "rows fed one at a time differing from one 300-row window";
  EXPECT_LE(worst, 0.03);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
