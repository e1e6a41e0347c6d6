// The CUDA target's attention kernels on random paged caches: the tile kernel against an fp64 reference, and every
// row's bits the same whether it runs alone, inside windows of 2..16 rows, or in forwards of 256+ rows.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "base/hash.h"
#include "cuda_test_util.h"
#include "lfm2_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "ops_test_util.h"

namespace ls::lfm2::gpu {
namespace {

using cuda::DeviceBuffer;
using cuda::testing::download;
using cuda::testing::upload;

struct Shape {
  int heads, kv_heads, head_dim;
};

// Streams of random keys/values in a page pool whose pages are handed out in a shuffled order; every slot past a
// stream's length holds NaN, so reading a key the row may not see shows. q for every (stream, position) is fixed.
struct PagedCase {
  Shape shape;
  int page_size = 32;
  std::vector<int64_t> lengths;
  std::vector<std::vector<int32_t>> stream_pages;
  std::vector<int32_t> page_list;
  std::vector<int32_t> page_begin;
  std::vector<bf16> keys, values;                  // [pages, page_size, kv_width]
  std::vector<std::vector<bf16>> q;                // per stream [length, heads * hd]
  DeviceBuffer<bf16> dev_keys, dev_values;
  DeviceBuffer<int32_t> dev_pages;

  int kv_width() const { return shape.kv_heads * shape.head_dim; }
  int q_width() const { return shape.heads * shape.head_dim; }
  KvShape kv_shape() const {
    return KvShape{page_size, shape.heads, shape.kv_heads, shape.head_dim,
                   1.0f / std::sqrt(static_cast<float>(shape.head_dim))};
  }
  int64_t slot(int s, int64_t j) const { return int64_t{stream_pages[s][j / page_size]} * page_size + j % page_size; }
};

PagedCase make_case(Shape shape, std::vector<int64_t> lengths, uint64_t seed, int page_size = 32) {
  PagedCase c;
  c.shape = shape;
  c.page_size = page_size;
  c.lengths = lengths;
  int total = 0;
  for (int64_t length : lengths) total += static_cast<int>((length + page_size - 1) / page_size);
  std::vector<int32_t> order(total + 3);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[splitmix64(seed + i) % (i + 1)]);
  const size_t pool = order.size() * page_size * c.kv_width();
  c.keys.assign(pool, bf16{0xFFFF});
  c.values.assign(pool, bf16{0xFFFF});
  int next = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    c.page_begin.push_back(static_cast<int32_t>(c.page_list.size()));
    std::vector<int32_t> own;
    for (int64_t p = 0; p < (lengths[s] + page_size - 1) / page_size; ++p) own.push_back(order[next++]);
    c.stream_pages.push_back(own);
    c.page_list.insert(c.page_list.end(), own.begin(), own.end());
    const auto k = compute::testing::random_values(lengths[s] * c.kv_width(), seed * 31 + 2 * s + 1, 2.0f);
    const auto v = compute::testing::random_values(lengths[s] * c.kv_width(), seed * 37 + 2 * s + 2, 1.0f);
    for (int64_t j = 0; j < lengths[s]; ++j)
      for (int i = 0; i < c.kv_width(); ++i) {
        c.keys[c.slot(static_cast<int>(s), j) * c.kv_width() + i] = float_to_bf16(k[j * c.kv_width() + i]);
        c.values[c.slot(static_cast<int>(s), j) * c.kv_width() + i] = float_to_bf16(v[j * c.kv_width() + i]);
      }
    c.q.push_back(cuda::testing::to_bf16(
        compute::testing::random_values(lengths[s] * c.q_width(), seed * 41 + s, 2.0f)));
  }
  c.dev_keys = upload(c.keys);
  c.dev_values = upload(c.values);
  c.dev_pages = upload(c.page_list);
  return c;
}

// One window of a forward: `rows` rows of stream `stream` from position `start`.
struct Win {
  int stream;
  int64_t start, rows;
};

enum class Kernel { Rows, Tiles };

// One forward on the device: the windows' q rows, row -> window, window records, output [rows, heads * hd].
struct Forward {
  int64_t rows = 0;
  DeviceBuffer<bf16> q, out;
  DeviceBuffer<int32_t> row_window;
  DeviceBuffer<WindowInfo> windows;

  Forward(const PagedCase& c, const std::vector<Win>& wins) {
    std::vector<WindowInfo> infos;
    std::vector<int32_t> rw;
    std::vector<bf16> host_q;
    for (const Win& w : wins) {
      WindowInfo info;
      info.first_row = static_cast<int32_t>(rw.size());
      info.rows = static_cast<int32_t>(w.rows);
      info.committed = w.start;
      info.page_begin = c.page_begin[w.stream];
      for (int64_t r = 0; r < w.rows; ++r) rw.push_back(static_cast<int32_t>(infos.size()));
      host_q.insert(host_q.end(), c.q[w.stream].begin() + w.start * c.q_width(),
                    c.q[w.stream].begin() + (w.start + w.rows) * c.q_width());
      infos.push_back(info);
    }
    rows = static_cast<int64_t>(rw.size());
    q = upload(host_q);
    row_window = upload(rw);
    EXPECT_TRUE(windows.allocate(infos.size()).ok());
    EXPECT_EQ(cudaMemcpy(windows.data(), infos.data(), infos.size() * sizeof(WindowInfo), cudaMemcpyHostToDevice),
              cudaSuccess);
    out = cuda::testing::poisoned<bf16>(rows * c.q_width());
  }

  Status launch(const PagedCase& c, Kernel kernel, AttentionTiling tiling = {}) {
    const KvLayer layer{c.dev_keys.data(), c.dev_values.data()};
    return kernel == Kernel::Rows ? attention_rows(q.data(), rows, row_window.data(), windows.data(),
                                                   c.dev_pages.data(), c.kv_shape(), layer, out.data(), nullptr)
                                  : attention_tiles(q.data(), rows, row_window.data(), windows.data(),
                                                    c.dev_pages.data(), c.kv_shape(), layer, out.data(), nullptr,
                                                    tiling);
  }
};

// Runs one forward of the windows (output poisoned first); returns out [rows, heads * hd].
std::vector<bf16> run_forward(const PagedCase& c, const std::vector<Win>& wins, Kernel kernel,
                              AttentionTiling tiling = {}) {
  Forward forward(c, wins);
  const Status status = forward.launch(c, kernel, tiling);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return download(forward.out, forward.rows * c.q_width());
}

// Output of (stream, position) in fp64: softmax over keys 0..position of the bf16 inputs.
std::vector<double> reference_row(const PagedCase& c, int s, int64_t pos) {
  const int hd = c.shape.head_dim, group = c.shape.heads / c.shape.kv_heads;
  std::vector<double> out(c.q_width(), 0.0);
  for (int h = 0; h < c.shape.heads; ++h) {
    const int kv = h / group;
    std::vector<double> score(pos + 1);
    double top = -INFINITY;
    for (int64_t j = 0; j <= pos; ++j) {
      double dot = 0;
      for (int d = 0; d < hd; ++d)
        dot += double(bf16_to_float(c.q[s][pos * c.q_width() + h * hd + d])) *
               bf16_to_float(c.keys[c.slot(s, j) * c.kv_width() + kv * hd + d]);
      score[j] = dot / std::sqrt(double(hd));
      top = std::max(top, score[j]);
    }
    double total = 0;
    for (double& x : score) total += (x = std::exp(x - top));
    for (int64_t j = 0; j <= pos; ++j)
      for (int d = 0; d < hd; ++d)
        out[h * hd + d] += score[j] / total * bf16_to_float(c.values[c.slot(s, j) * c.kv_width() + kv * hd + d]);
  }
  return out;
}

const Shape kShapes[] = {{8, 8, 64}, {32, 8, 64}, {16, 2, 128}, {8, 2, 128}, {6, 2, 64}, {4, 2, 16}};

std::string name(const Shape& s) {
  return std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " heads, hd " + std::to_string(s.head_dim);
}

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
        differ += differing_rows(c, alone, all[i], run_forward(c, all[i], Kernel::Tiles, {tile, false}));
        ++forwards;
      }
    EXPECT_EQ(differ, 0) << name(shape) << ": rows differing from their one-row run over " << forwards
                         << " forwards";
  }
}

TEST(CudaAttention, APlantedBlockOrderFaultTurnsTheInvarianceCheckRed) {
  LS_SKIP_WITHOUT_DEVICE();
  const PagedCase c = make_case({32, 8, 64}, {300, 129, 200}, 5);
  const auto alone = rows_alone(c);
  const auto all = layouts(c);
  int differ = 0, total = 0;
  for (size_t i = all.size() - 5; i < all.size(); ++i) {
    differ += differing_rows(c, alone, all[i], run_forward(c, all[i], Kernel::Tiles, {0, true}));
    for (const Win& w : all[i]) total += static_cast<int>(w.rows);
  }
  EXPECT_GT(differ, total / 4) << "the swapped block order went unseen in " << total << " rows";
}

TEST(CudaAttention, TheTileKernelRefusesShapesItCannotRunAndTooManyRowsPerCtaByName) {
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
                                      {33, false});
  EXPECT_EQ(tall.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(tall.message().find("33 rows per CTA, at most 32"), std::string::npos) << tall.to_string();
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

// Timing, not a check (run by name with --gtest_also_run_disabled_tests): rows vs tiles on the LFM2.5-1.2B shape
// (32 heads, 8 KV heads, head_dim 64) at context 2048, ms per layer (the model has 6). The 16-stream cases share one
// stream's pages, so their keys sit in L2 more than real streams' would.
TEST(CudaAttention, DISABLED_TimesRowsAndTilesOnThe12BShapeAtContext2048) {
  LS_SKIP_WITHOUT_DEVICE();
  const int64_t n = 2048;
  const PagedCase c = make_case({32, 8, 64}, {n}, 9);
  struct Scenario {
    const char* name;
    int copies;
    int64_t start, rows;
  };
  const Scenario scenarios[] = {{"prefill 2048", 1, 0, n},           {"prefill 512", 1, 0, 512},
                                {"decode at 200", 1, 199, 1},         {"decode, 1 stream", 1, n - 1, 1},
                                {"decode, 16 streams", 16, n - 1, 1}, {"verify 16 rows", 1, n - 16, 16},
                                {"verify 16 x 16 rows", 16, n - 16, 16}};
  cudaEvent_t begin, end;
  ASSERT_EQ(cudaEventCreate(&begin), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  std::printf("[cuda attention timing] ms per layer at context %lld: scenario, rows kernel, tiles kernel, max |diff|\n",
              static_cast<long long>(n));
  for (const Scenario& sc : scenarios) {
    const std::vector<Win> wins(sc.copies, Win{0, sc.start, sc.rows});
    Forward forward(c, wins);
    double ms[2];
    std::vector<bf16> outs[2];
    for (Kernel kernel : {Kernel::Rows, Kernel::Tiles}) {
      const int k = kernel == Kernel::Rows ? 0 : 1;
      ASSERT_TRUE(forward.launch(c, kernel).ok());
      std::vector<float> times;
      const int inner = forward.rows >= 1024 ? 3 : 30;
      for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(begin);
        for (int i = 0; i < inner; ++i) (void)forward.launch(c, kernel);
        cudaEventRecord(end);
        ASSERT_EQ(cudaEventSynchronize(end), cudaSuccess);
        float t = 0;
        cudaEventElapsedTime(&t, begin, end);
        times.push_back(t / inner);
      }
      std::sort(times.begin(), times.end());
      ms[k] = times[times.size() / 2];
      outs[k] = download(forward.out, forward.rows * c.q_width());
    }
    double diff = 0;
    for (size_t i = 0; i < outs[0].size(); ++i) {
      const double d = std::abs(double(bf16_to_float(outs[0][i])) - bf16_to_float(outs[1][i]));
      diff = std::isfinite(d) ? std::max(diff, d) : INFINITY;
    }
    std::printf("[cuda attention timing] %-20s rows %9.4f ms  tiles %9.4f ms  (%.1fx)  max |diff| %.3g\n", sc.name,
                ms[0], ms[1], ms[0] / ms[1], diff);
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
}

}  // namespace
}  // namespace ls::lfm2::gpu

#endif  // LS_HAVE_CUDA
