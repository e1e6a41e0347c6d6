// Helpers for the LFM2 model tests: small random dense / MoE configs, targets on random weights, one-row oracles.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "base/hash.h"
#include "model/exact_width.h"
#include "model/lfm2/lfm2_target.h"

namespace ls::lfm2::testing {

// 5 layers (conv, attention, conv, conv, attention), D 64, 4 heads / 2 KV heads of 16, vocab 97.
inline io::ModelConfig small_config(bool moe) {
  io::ModelConfig config;
  config.model_type = moe ? "lfm2_moe" : "lfm2";
  config.vocab_size = 97;
  config.hidden_size = 64;
  config.num_layers = 5;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 16;
  config.ffn_size = 96;
  config.conv_kernel = 3;
  config.max_position = 4096;
  using io::LayerKind;
  config.layer_kinds = {LayerKind::Conv, LayerKind::Attention, LayerKind::Conv, LayerKind::Conv,
                        LayerKind::Attention};
  if (moe) {
    io::MoeConfig m;
    m.num_experts = 6;
    m.experts_per_token = 2;
    m.expert_ffn_size = 32;
    m.num_dense_layers = 1;
    config.moe = m;
  }
  return config;
}

inline std::unique_ptr<Lfm2Target> small_target(bool moe, NumericMode mode, int threads = 2, int pass_rows = 512,
                                                uint64_t seed = 7) {
  const io::ModelConfig config = small_config(moe);
  auto model = std::make_unique<Model>(config, random_weights(config, mode, seed), threads);
  auto target = std::make_unique<Lfm2Target>(std::move(model), 256, pass_rows);
  const int taps[] = {0, 2, 4};
  EXPECT_TRUE(target->set_taps(taps).ok());
  return target;
}

inline std::vector<int32_t> random_tokens(size_t count, uint64_t seed, int vocab = 97) {
  std::vector<int32_t> tokens(count);
  for (size_t i = 0; i < count; ++i) tokens[i] = static_cast<int32_t>(splitmix64(seed * 1000 + i) % vocab);
  return tokens;
}

// Per-row logits [V] and taps [taps, D] of a stream, row by row.
struct RowOutputs {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<float>> taps;
  std::vector<int32_t> draws;
};

// Appends the rows of one window's slice of a Verified to `out`.
inline void append_rows(const Verified& verified, size_t window, const Target& target, int tap_count,
                        RowOutputs& out) {
  const int64_t V = target.facts().vocab_size, D = target.facts().hidden_size;
  for (int64_t row = verified.row_begin[window]; row < verified.row_begin[window + 1]; ++row) {
    out.logits.emplace_back(verified.logits.begin() + row * V, verified.logits.begin() + (row + 1) * V);
    out.taps.emplace_back(verified.taps.begin() + row * tap_count * D, verified.taps.begin() + (row + 1) * tap_count * D);
    out.draws.push_back(verified.draws[row]);
  }
}

// The oracle: every token fed as its own one-row window, committed at once.
inline RowOutputs one_row_steps(Target& target, StreamId stream, const std::vector<int32_t>& tokens, int tap_count,
                                Sampling sampling = {}) {
  RowOutputs out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    Window window;
    window.stream = stream;
    window.tokens = std::span<const int32_t>(&tokens[i], 1);
    window.want_logits = true;
    window.sampling = sampling;
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    EXPECT_TRUE(verified.ok()) << verified.status().to_string();
    if (!verified.ok()) return out;
    append_rows(*verified, 0, target, tap_count, out);
    EXPECT_TRUE(target.commit(stream, 1).ok());
  }
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Feeds `tokens` in windows of the given widths (cycling) and returns every row's outputs.
inline RowOutputs windowed(Target& target, StreamId stream, const std::vector<int32_t>& tokens, std::vector<int> widths,
                           int tap_count) {
  RowOutputs out;
  size_t begin = 0;
  for (size_t turn = 0; begin < tokens.size(); ++turn) {
    const size_t rows = std::min<size_t>(widths[turn % widths.size()], tokens.size() - begin);
    Window window;
    window.stream = stream;
    window.tokens = std::span<const int32_t>(tokens.data() + begin, rows);
    window.want_logits = true;
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    EXPECT_TRUE(verified.ok());
    if (!verified.ok()) return out;
    append_rows(*verified, 0, target, tap_count, out);
    EXPECT_TRUE(target.commit(stream, static_cast<int>(rows)).ok());
    begin += rows;
  }
  return out;
}

// Rows whose logits, taps or draw differ (+1000 if the row counts differ).
inline int rows_differing(const RowOutputs& a, const RowOutputs& b) {
  int differing = 0;
  for (size_t i = 0; i < a.logits.size(); ++i)
    differing += !same_bits(a.logits[i], b.logits[i]) || !same_bits(a.taps[i], b.taps[i]) || a.draws[i] != b.draws[i];
  return differing + static_cast<int>(a.logits.size() != b.logits.size()) * 1000;
}

constexpr NumericMode kModes[] = {NumericMode::Fp32, NumericMode::Bf16};

// Every drawn row's logits (bits, when asked for), taps and draws of a two-stream run: a 20-row prompt (above 16
// rows: no decode-only path runs), then windows of 1, 5, 16, 1, 3 and 1 rows, each committed whole; greedy on stream
// 1, sampled on stream 2. Two modes of one target give equal vectors iff they give the same bits.
inline std::vector<uint32_t> window_run_bits(Target& target, bool logits) {
  std::vector<uint32_t> bits;
  const std::vector<int32_t> tokens = random_tokens(200, 5, target.facts().vocab_size);
  size_t done = 0;
  for (const int rows : {20, 1, 5, 16, 1, 3, 1}) {
    std::vector<Window> windows(2);
    for (int s = 0; s < 2; ++s) {
      windows[s].stream = 1 + s;
      windows[s].tokens = std::span<const int32_t>(tokens.data() + done + 7 * s, rows);
      windows[s].want_logits = logits;
      windows[s].sampling.temperature = s == 0 ? 0.0f : 0.8f;
      windows[s].sampling.seed = 11;
    }
    Result<Verified> v = target.forward(windows);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    if (!v.ok()) return bits;
    for (const float f : v->logits) bits.push_back(std::bit_cast<uint32_t>(f));
    for (const float f : v->taps) bits.push_back(std::bit_cast<uint32_t>(f));
    for (const int32_t d : v->draws) bits.push_back(static_cast<uint32_t>(d));
    for (int s = 0; s < 2; ++s) EXPECT_TRUE(target.commit(1 + s, rows).ok());
    done += rows;
  }
  target.release(1);
  target.release(2);
  return bits;
}

// Runs recorded three per mode by window_run_bits (with logits, then twice without: the third from captured graphs):
// succeeds iff every run has the bits of the first mode's run of the same kind (with / without logits).
inline ::testing::AssertionResult runs_match_the_first_mode(const std::vector<std::vector<uint32_t>>& runs) {
  if (runs.empty() || runs[0].empty()) return ::testing::AssertionFailure() << "no bits recorded";
  for (size_t i = 1; i < runs.size(); ++i) {
    const std::vector<uint32_t>& want = runs[i % 3 == 0 ? 0 : 1];
    if (runs[i].size() != want.size())
      return ::testing::AssertionFailure() << "run " << i << ": " << runs[i].size() << " values, want " << want.size();
    size_t differ = 0;
    for (size_t j = 0; j < want.size(); ++j) differ += runs[i][j] != want[j];
    if (differ != 0) return ::testing::AssertionFailure() << "run " << i << ": " << differ << " values differ";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ls::lfm2::testing
