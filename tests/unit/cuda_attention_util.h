// Shared pieces of the CUDA attention tests: random paged KV caches with shuffled pages, forwards of windows of
// many streams on the attention kernels (output and scratch poisoned), the fp64 reference.
#pragma once
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/hash.h"
#include "cuda_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "ops_test_util.h"

namespace ls::lfm2::gpu::attention_testing {

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

inline PagedCase make_case(Shape shape, std::vector<int64_t> lengths, uint64_t seed, int page_size = 32) {
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

  // Split-attention scratch for `chunks` chunks per (row, head) of this forward (0: none, never split); poisoned.
  void give_scratch(const PagedCase& c, int64_t chunks) {
    states = cuda::testing::poisoned<float>(std::max<int64_t>(1, attention_scratch_floats(c.kv_shape(), rows, chunks)));
    scratch = chunks > 0 ? AttentionScratch{states.data(), attention_scratch_floats(c.kv_shape(), rows, chunks)}
                         : AttentionScratch{};
  }

  Status launch(const PagedCase& c, Kernel kernel, AttentionTiling tiling = {}) {
    const KvLayer layer{c.dev_keys.data(), c.dev_values.data()};
    return kernel == Kernel::Rows ? attention_rows(q.data(), rows, row_window.data(), windows.data(),
                                                   c.dev_pages.data(), c.kv_shape(), layer, out.data(), nullptr)
                                  : attention_tiles(q.data(), rows, row_window.data(), windows.data(),
                                                    c.dev_pages.data(), c.kv_shape(), layer, out.data(), nullptr,
                                                    tiling, scratch);
  }

  DeviceBuffer<float> states;
  AttentionScratch scratch;
};

// Chunks of scratch the tests give a forward unless told otherwise: room for contexts up to 6144.
constexpr int64_t kScratchChunks = 48;

// Runs one forward of the windows (output and scratch poisoned first); returns out [rows, heads * hd].
inline std::vector<bf16> run_forward(const PagedCase& c, const std::vector<Win>& wins, Kernel kernel,
                              AttentionTiling tiling = {}, int64_t scratch_chunks = kScratchChunks) {
  Forward forward(c, wins);
  forward.give_scratch(c, scratch_chunks);
  const Status status = forward.launch(c, kernel, tiling);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return download(forward.out, forward.rows * c.q_width());
}

// Output of (stream, position) in fp64: softmax over keys 0..position of the bf16 inputs.
inline std::vector<double> reference_row(const PagedCase& c, int s, int64_t pos) {
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

inline const Shape kShapes[] = {{8, 8, 64}, {32, 8, 64}, {16, 2, 128}, {8, 2, 128}, {6, 2, 64}, {4, 2, 16}};

inline std::string name(const Shape& s) {
  return std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " heads, hd " + std::to_string(s.head_dim);
}

}  // namespace ls::lfm2::gpu::attention_testing

#endif  // LS_HAVE_CUDA
