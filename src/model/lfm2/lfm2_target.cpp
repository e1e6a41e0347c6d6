// Lfm2Target: validates windows, splits their rows into passes (a long prompt spans several), draws, commits.
#include "model/lfm2/lfm2_target.h"

#include "model/window_checks.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_set>

#include "compute/sampling.h"

namespace ls::lfm2 {
namespace {
constexpr int64_t kHeadGroupRows = 64;  // drawn rows sent through the head together (bounds the logits buffer)
}

Lfm2Target::Lfm2Target(std::unique_ptr<Model> model, int max_rows, int pass_rows)
    : model_(std::move(model)), pass_rows_(pass_rows) {
  const io::ModelConfig& config = model_->config();
  facts_.vocab_size = config.vocab_size;
  facts_.hidden_size = config.hidden_size;
  facts_.num_layers = config.num_layers;
  facts_.max_rows = max_rows;
  facts_.exact_width = 1;
  facts_.eos_token_id = config.eos_token_id;
}

Status Lfm2Target::set_taps(std::span<const int> layers) {
  for (int layer : layers)
    if (layer < 0 || layer >= facts_.num_layers)
      return Status(ErrorCode::InvalidArgument, "tap layer " + std::to_string(layer) + " is outside the model's " +
                                                    std::to_string(facts_.num_layers) + " layers");
  taps_.assign(layers.begin(), layers.end());
  return ok_status();
}

Status Lfm2Target::check_windows(std::span<const Window> windows) const {
  const auto find = [this](StreamId id) { return streams_.find(id); };
  return ls::check_windows(
      windows, WindowLimits{facts_.vocab_size, model_->config().max_position, facts_.max_rows},
      [&](StreamId id) { return find(id) == streams_.end() ? int64_t{0} : find(id)->second.committed; },
      [&](StreamId id) { return find(id) == streams_.end() ? int64_t{0} : find(id)->second.window_rows; });
}

Result<Verified> Lfm2Target::forward(std::span<const Window> windows) {
  LS_RETURN_IF_ERROR(check_windows(windows));
  const int64_t D = facts_.hidden_size, V = facts_.vocab_size;
  Verified verified;
  verified.row_begin.push_back(0);
  bool any_logits = false;
  bool any_taps = false;
  for (const Window& window : windows) {
    verified.row_begin.push_back(verified.row_begin.back() + static_cast<int64_t>(window.tokens.size()));
    any_logits = any_logits || window.want_logits;
    any_taps = any_taps || window.want_taps;
  }
  // Every row is tapped when any window wants taps (the copy is part of the layer loop); none when no window does.
  const std::span<const int> tap_layers = any_taps ? std::span<const int>(taps_) : std::span<const int>();
  const int64_t tap_count = static_cast<int64_t>(tap_layers.size());
  if (!any_taps) verified.tap_row_begin.assign(windows.size() + 1, 0);
  const int64_t total = verified.row_begin.back();
  verified.draws.assign(total, -1);
  if (any_logits) verified.logits.assign(total * V, std::numeric_limits<float>::quiet_NaN());
  verified.taps.assign(total * tap_count * D, 0.0f);

  std::vector<StreamState*> states;
  for (const Window& window : windows) {
    auto [it, inserted] = streams_.try_emplace(window.stream);
    if (inserted) it->second = model_->new_stream();
    states.push_back(&it->second);
  }
  // Passes of at most pass_rows_ rows; a window longer than the room left continues in the next pass.
  std::vector<int32_t> tokens;
  std::vector<Segment> segments;
  std::vector<DrawnRow> drawn;
  size_t window_index = 0;
  int64_t row_in_window = 0, pass_first_global = 0;
  while (window_index < windows.size()) {
    tokens.clear();
    segments.clear();
    drawn.clear();
    while (window_index < windows.size() && static_cast<int64_t>(tokens.size()) < pass_rows_) {
      const Window& window = windows[window_index];
      const int64_t rows = static_cast<int64_t>(window.tokens.size());
      const int64_t take = std::min<int64_t>(rows - row_in_window, pass_rows_ - static_cast<int64_t>(tokens.size()));
      StreamState* state = states[window_index];
      Segment segment{state, state->committed + row_in_window, row_in_window, static_cast<int64_t>(tokens.size()), take};
      for (int64_t r = row_in_window; r < row_in_window + take; ++r) {
        if (r >= window.first_drawn_row)
          drawn.push_back({static_cast<int64_t>(tokens.size()), verified.row_begin[window_index] + r, &window,
                           state->committed + r});
        tokens.push_back(window.tokens[r]);
      }
      segments.push_back(segment);
      row_in_window += take;
      if (row_in_window == rows) {
        ++window_index;
        row_in_window = 0;
      }
    }
    const int64_t pass_rows = static_cast<int64_t>(tokens.size());
    hidden_.resize(pass_rows * D);
    model_->run_pass(tokens, segments, tap_layers, hidden_.data(),
                     verified.taps.data() + pass_first_global * tap_count * D);
    draw_rows(drawn, verified);
    pass_first_global += pass_rows;
  }
  for (size_t w = 0; w < windows.size(); ++w) states[w]->window_rows = static_cast<int64_t>(windows[w].tokens.size());
  return verified;
}

void Lfm2Target::draw_rows(std::span<const DrawnRow> rows, Verified& verified) {
  const int64_t D = facts_.hidden_size, V = facts_.vocab_size;
  for (size_t group = 0; group < rows.size(); group += kHeadGroupRows) {
    const int64_t n = std::min<int64_t>(kHeadGroupRows, static_cast<int64_t>(rows.size() - group));
    gathered_.resize(n * D);
    logits_.resize(n * V);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(gathered_.data() + i * D, hidden_.data() + rows[group + i].pass_row * D, sizeof(float) * D);
    // Greedy rows that want no logits: the head + argmax in one pass, no logits written (the same tokens).
    bool only_greedy = true;
    for (int64_t i = 0; i < n; ++i)
      only_greedy = only_greedy && rows[group + i].window->sampling.greedy() && !rows[group + i].window->want_logits;
    if (only_greedy) {
      std::vector<int32_t> tokens(n);
      model_->greedy_tokens(gathered_.data(), n, tokens.data());
      for (int64_t i = 0; i < n; ++i) verified.draws[rows[group + i].global_row] = tokens[i];
      continue;
    }
    model_->logits(gathered_.data(), n, logits_.data());
    for (int64_t i = 0; i < n; ++i) {
      const DrawnRow& row = rows[group + i];
      const std::span<const float> row_logits(logits_.data() + i * V, V);
      // The draw at position p is the keyed choice for the token at p + 1.
      verified.draws[row.global_row] = draw_token(row_logits, row.window->sampling, row.position + 1);
      if (row.window->want_logits)
        std::memcpy(verified.logits.data() + row.global_row * V, row_logits.data(), sizeof(float) * V);
    }
  }
}

Status Lfm2Target::commit(StreamId stream, int kept) {
  const auto found = streams_.find(stream);
  if (found == streams_.end() || found->second.window_rows == 0)
    return Status(ErrorCode::InvalidArgument, "stream " + std::to_string(stream) + " has no window to commit");
  if (kept < 1 || kept > found->second.window_rows)
    return Status(ErrorCode::InvalidArgument, "stream " + std::to_string(stream) + ": commit keeps " +
                                                  std::to_string(kept) + " rows of a window of " +
                                                  std::to_string(found->second.window_rows));
  model_->commit(found->second, kept);
  return ok_status();
}

int64_t Lfm2Target::committed_length(StreamId stream) const {
  const auto found = streams_.find(stream);
  return found == streams_.end() ? 0 : found->second.committed;
}

void Lfm2Target::release(StreamId stream) { streams_.erase(stream); }

Status Lfm2Target::embed(std::span<const int32_t> tokens, std::span<float> out) const {
  LS_RETURN_IF_ERROR(check_embed_args(tokens, out.size(), facts_));
  compute::embed_rows(compute::OpContext{nullptr, compute::NumericMode::Fp32}, model_->weights().embedding.view(),
                      tokens, out.data());
  return ok_status();
}

Status Lfm2Target::head(std::span<const float> hidden, int rows, std::span<float> out) const {
  LS_RETURN_IF_ERROR(check_head_args(rows, hidden.size(), out.size(), facts_));
  compute::matmul(compute::OpContext{&model_->pool(), compute::NumericMode::Fp32}, hidden.data(), rows,
                  model_->weights().head().view(), out.data());
  return ok_status();
}

}  // namespace ls::lfm2
