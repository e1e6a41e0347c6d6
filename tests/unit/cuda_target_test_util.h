// Shared by the CUDA target tests (cuda_target_*_test.cpp): targets on the device (small random dense / MoE, the
// nano checkpoint), rows as bit fingerprints, the one-row oracle and the width / many-stream checks against it.
#pragma once
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "lfm2_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/load.h"

namespace ls::lfm2::cuda_test {

// The repository root: the configured source dir, or the working directory when the binary was carried elsewhere.
inline std::string source_dir() {
  const std::string configured = LS_SOURCE_DIR;
  if (std::filesystem::exists(configured + "/tests/golden")) return configured;
  return std::filesystem::current_path().string();
}

inline uint64_t bits_hash(const float* values, size_t count) {
  uint64_t hash = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values);
  for (size_t i = 0; i < count * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

// One row's outputs as bit fingerprints (logits and taps) plus its draw.
struct RowBits {
  uint64_t logits = 0, taps = 0;
  int32_t draw = -1;
  bool operator==(const RowBits&) const = default;
};

inline RowBits row_bits(const Verified& v, int64_t row, int64_t V, int64_t tap_width) {
  return RowBits{bits_hash(v.logits.data() + row * V, V), bits_hash(v.taps.data() + row * tap_width, tap_width),
                 v.draws[row]};
}

inline LoadOptions cuda_options(int max_rows = 512) {
  LoadOptions options;
  options.device = Device::Cuda;
  options.max_rows = max_rows;
  options.max_streams = 64;
  options.kv_pages = 2048;
  options.kv_page_size = 16;
  options.exact_width_probe = 16;
  return options;
}

inline std::unique_ptr<CudaTarget> small_cuda_target(bool moe, int max_rows = 512) {
  const io::ModelConfig config = testing::small_config(moe);
  auto made = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 7), cuda_options(max_rows));
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  const int taps[] = {0, 2, 4};
  EXPECT_TRUE((*made)->set_taps(taps).ok());
  return std::move(made).value();
}

inline std::unique_ptr<Target> nano_cuda_target(int max_rows = 512) {
  const std::string dir = source_dir() + "/models/nano/target";
  if (!std::filesystem::exists(dir + "/config.json")) return nullptr;
  auto loaded = load_target(dir, cuda_options(max_rows));
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return nullptr;
  const int taps[] = {1, 4, 7};
  EXPECT_TRUE((*loaded)->set_taps(taps).ok());
  return std::move(loaded).value();
}

inline Sampling stream_sampling(int index) {
  Sampling s;
  if (index % 2 == 1) {
    s.temperature = 0.8f;
    s.top_k = index % 4 == 1 ? 40 : 0;
    s.top_p = 0.9f;
    s.seed = 1000 + index;
  }
  return s;
}

// Every row of `tokens` fed one at a time: the oracle.
inline std::vector<RowBits> one_row_oracle(Target& target, StreamId stream, const std::vector<int32_t>& tokens,
                                    const Sampling& sampling) {
  const int64_t V = target.facts().vocab_size;
  std::vector<RowBits> rows;
  target.release(stream);
  for (size_t i = 0; i < tokens.size(); ++i) {
    Window window;
    window.stream = stream;
    window.tokens = std::span<const int32_t>(&tokens[i], 1);
    window.want_logits = true;
    window.sampling = sampling;
    Result<Verified> v = target.forward(std::span<const Window>(&window, 1));
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    if (!v.ok()) return rows;
    const int64_t tap_width = static_cast<int64_t>(v->taps.size());
    rows.push_back(row_bits(*v, 0, V, tap_width));
    EXPECT_TRUE(target.commit(stream, 1).ok());
  }
  target.release(stream);
  return rows;
}

// One stream's windows, every width 1..16 in turn over `tokens`: the rows whose bits differ from the oracle's (-1 when
// a forward failed); `taps_only`: the rows whose taps differ.
inline int width_mismatches(Target& target, const std::vector<int32_t>& tokens, const std::vector<RowBits>& oracle,
                            bool taps_only = false) {
  const int64_t V = target.facts().vocab_size;
  int mismatches = 0;
  for (int width = 1; width <= 16; ++width) {
    target.release(2);
    for (size_t begin = 0; begin < tokens.size(); begin += width) {
      const size_t rows = std::min<size_t>(width, tokens.size() - begin);
      Window window;
      window.stream = 2;
      window.tokens = std::span<const int32_t>(tokens.data() + begin, rows);
      window.want_logits = true;
      window.sampling = stream_sampling(1);
      Result<Verified> v = target.forward(std::span<const Window>(&window, 1));
      EXPECT_TRUE(v.ok()) << v.status().to_string();
      if (!v.ok()) return -1;
      const int64_t tap_width = static_cast<int64_t>(v->taps.size() / rows);
      for (size_t r = 0; r < rows; ++r) {
        const RowBits got = row_bits(*v, static_cast<int64_t>(r), V, tap_width);
        const bool differs = taps_only ? got.taps != oracle[begin + r].taps : !(got == oracle[begin + r]);
        if (differs && mismatches == 0 && !taps_only)
          ADD_FAILURE() << "first differing row: width " << width << " row " << begin + r;
        mismatches += differs;
      }
      EXPECT_TRUE(target.commit(2, static_cast<int>(rows)).ok());
    }
  }
  target.release(2);
  return mismatches;
}

// Streams fed in rounds of windows (all max_width, then ragged (s + round) % max_width + 1), one forward per round; every row
// must equal the oracle's bits. Returns the widest forward seen.
inline int64_t check_many_streams(Target& target, int streams, int tokens_per_stream, int max_width) {
  const int64_t V = target.facts().vocab_size;
  std::vector<std::vector<int32_t>> tokens(streams);
  std::vector<std::vector<RowBits>> oracle(streams);
  for (int s = 0; s < streams; ++s) {
    tokens[s] = testing::random_tokens(tokens_per_stream, 100 + s, target.facts().vocab_size);
    oracle[s] = one_row_oracle(target, 500 + s, tokens[s], stream_sampling(s));
  }
  std::vector<int> done(streams, 0);
  int64_t widest = 0;
  for (int round = 0;; ++round) {
    std::vector<Window> windows;
    std::vector<int> owner;
    for (int s = 0; s < streams; ++s) {
      if (done[s] == tokens_per_stream) continue;
      // Round 0: every stream takes max_width rows (the widest forward); later rounds are ragged.
      const int width = std::min(round == 0 ? max_width : (s + round) % max_width + 1, tokens_per_stream - done[s]);
      Window window;
      window.stream = 900 + s;
      window.tokens = std::span<const int32_t>(tokens[s].data() + done[s], width);
      window.want_logits = true;
      window.sampling = stream_sampling(s);
      windows.push_back(window);
      owner.push_back(s);
    }
    if (windows.empty()) break;
    Result<Verified> v = target.forward(windows);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    if (!v.ok()) return widest;
    widest = std::max(widest, v->row_begin.back());
    const int64_t tap_width = static_cast<int64_t>(v->taps.size()) / v->row_begin.back();
    for (size_t w = 0; w < windows.size(); ++w) {
      const int s = owner[w];
      for (int64_t r = v->row_begin[w]; r < v->row_begin[w + 1]; ++r) {
        const int64_t at = done[s] + (r - v->row_begin[w]);
        EXPECT_EQ(row_bits(*v, r, V, tap_width), oracle[s][at])
            << "stream " << s << " row " << at << " (window of " << windows[w].tokens.size() << ", forward of "
            << v->row_begin.back() << " rows)";
      }
      EXPECT_TRUE(target.commit(windows[w].stream, static_cast<int>(windows[w].tokens.size())).ok());
      done[s] += static_cast<int>(windows[w].tokens.size());
    }
  }
  for (int s = 0; s < streams; ++s) target.release(900 + s);
  return widest;
}

}  // namespace ls::lfm2::cuda_test

#endif  // LS_HAVE_CUDA
