// The fake target: history-hash logits, keyed draws, position checks, poisoned dropped rows, counted releases.
#include "lanes/testing/fake_target.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "base/hash.h"
#include "compute/sampling.h"

namespace ls {

uint64_t fake_history_hash(const FakeModelShape& shape, uint64_t previous, int32_t token) {
  return splitmix64(previous ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + shape.salt * 31));
}

void fake_logits(const FakeModelShape& shape, uint64_t history_hash, std::span<float> out) {
  const int favourite = static_cast<int>(history_hash % static_cast<uint64_t>(shape.vocab_size));
  for (int id = 0; id < shape.vocab_size; ++id) {
    out[id] = static_cast<float>(uniform_open01(splitmix64(history_hash + id)) * 2.0);
  }
  out[favourite] += shape.peak;
}

FakeTarget::FakeTarget(FakeTargetOptions options) : options_(std::move(options)) {
  if (options_.cpu_pool) pool_ = std::make_unique<ThreadPool>(1);
  facts_.vocab_size = options_.shape.vocab_size;
  facts_.hidden_size = options_.shape.hidden_size;
  facts_.num_layers = options_.shape.num_layers;
  facts_.max_rows = options_.max_rows;
  facts_.exact_width = options_.exact_width;
  facts_.eos_token_id = options_.eos_token_id;
  if (options_.kv_pages > 0) {
    facts_.kv_pages = options_.kv_pages;
    facts_.kv_page_size = options_.kv_page_size;
  }
}

Status FakeTarget::set_taps(std::span<const int> layers) {
  if (forwards_ > 0) return Status(ErrorCode::Internal, "taps declared after " + std::to_string(forwards_) + " forwards");
  for (int layer : layers) {
    if (layer < 0 || layer >= facts_.num_layers) {
      return Status(ErrorCode::DraftTargetMismatch, "tap layer " + std::to_string(layer) + " out of range");
    }
  }
  tap_layers_.assign(layers.begin(), layers.end());
  return ok_status();
}

Result<Verified> FakeTarget::forward(std::span<const Window> windows) {
  if (options_.before_forward) options_.before_forward();
  const int64_t forward_index = forwards_++;
  if (forward_index == options_.fail_forward_at) {
    return Status(ErrorCode::Internal, "planted forward fault at forward " + std::to_string(forward_index));
  }
  Verified verified;
  verified.row_begin.push_back(0);
  std::set<StreamId> seen;
  for (const Window& window : windows) {
    if (window.tokens.empty()) return Status(ErrorCode::InvalidArgument, "an empty window");
    if (!seen.insert(window.stream).second) {
      return Status(ErrorCode::InvalidArgument, "stream " + std::to_string(window.stream) + " twice in one forward");
    }
    auto found = streams_.find(window.stream);
    if (found != streams_.end() && found->second.tentative_rows >= 0) {
      return Status(ErrorCode::Internal, "stream " + std::to_string(window.stream) + " has an uncommitted window");
    }
    const int64_t committed = found == streams_.end() ? 0 : found->second.committed;
    if (window.start_position >= 0 && window.start_position != committed) {
      return Status(ErrorCode::Internal, "PositionMismatch: stream " + std::to_string(window.stream) +
                                             " window at position " + std::to_string(window.start_position) +
                                             ", history length " + std::to_string(committed));
    }
    const int drawn = static_cast<int>(window.tokens.size()) - window.first_drawn_row;
    if (drawn > facts_.exact_width) {
      return Status(ErrorCode::InvalidArgument, "window draws " + std::to_string(drawn) + " rows, exact width " +
                                                    std::to_string(facts_.exact_width));
    }
    verified.row_begin.push_back(verified.row_begin.back() + static_cast<int64_t>(window.tokens.size()));
  }
  const int64_t total_rows = verified.row_begin.back();
  if (total_rows > options_.max_rows) {
    return Status(ErrorCode::InvalidArgument, "forward of " + std::to_string(total_rows) + " rows, max_rows " +
                                                  std::to_string(options_.max_rows));
  }
  if (options_.kv_pages > 0) {  // the CUDA target's pool check, before any state changes
    const int64_t P = options_.kv_page_size;
    int64_t needed = 0;
    for (const Window& window : windows) {
      auto found = streams_.find(window.stream);
      const int64_t committed = found == streams_.end() ? 0 : found->second.committed;
      const int64_t held = found == streams_.end() ? 0 : found->second.pages;
      needed += std::max<int64_t>(0, (committed + static_cast<int64_t>(window.tokens.size()) + P - 1) / P - held);
    }
    if (pages_held_ + needed > options_.kv_pages) {
      return Status(ErrorCode::OutOfMemory, "the forward needs " + std::to_string(needed) + " KV pages, " +
                                                std::to_string(options_.kv_pages - pages_held_) + " of " +
                                                std::to_string(options_.kv_pages) + " are free");
    }
    for (const Window& window : windows) {
      StreamState& state = streams_[window.stream];
      const int64_t pages = (state.committed + static_cast<int64_t>(window.tokens.size()) + P - 1) / P;
      if (pages > state.pages) {
        pages_held_ += pages - state.pages;
        state.pages = pages;
      }
    }
    most_pages_held_ = std::max(most_pages_held_, pages_held_);
  }
  const int vocab = facts_.vocab_size;
  const int hidden = facts_.hidden_size;
  const size_t row_taps = tap_layers_.size() * hidden;
  const bool any_logits = std::any_of(windows.begin(), windows.end(), [](const Window& w) { return w.want_logits; });
  // A stream's first rows (shape_by_taps: never a shape).
  const bool fresh_forward =
      std::any_of(windows.begin(), windows.end(), [](const Window& w) { return w.start_position == 0; });
  verified.draws.assign(total_rows, -1);
  // Only windows that want taps get them (compacted in window order), so the lanes' tap traffic is countable;
  // kept on the "device", every row has taps (poisoned first) and none is copied out.
  verified.tap_row_begin.assign(1, 0);
  for (const Window& window : windows) {
    verified.tap_row_begin.push_back(verified.tap_row_begin.back() + ((window.want_taps || keep_on_device_)
                                                                          ? static_cast<int64_t>(window.tokens.size())
                                                                          : 0));
  }
  std::vector<float>& tap_values = keep_on_device_ ? device_taps_ : verified.taps;
  // The "device" buffer is a pool sized once, as a CUDA target's: a read still in flight sees the next forward's rows.
  if (keep_on_device_) device_taps_.reserve(static_cast<size_t>(options_.max_rows) * row_taps);
  tap_values.assign(verified.tap_row_begin.back() * row_taps,
                    keep_on_device_ ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
  if (keep_on_device_) {
    verified.device_taps = DeviceTaps{device_taps_.data(), kFakeTapDevice, total_rows, static_cast<int64_t>(row_taps)};
  } else {
    tap_rows_ += verified.tap_row_begin.back();
  }
  if (any_logits) verified.logits.assign(total_rows * vocab, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> logits(vocab);
  for (size_t index = 0; index < windows.size(); ++index) {
    const Window& window = windows[index];
    StreamState& state = streams_[window.stream];
    const int rows = static_cast<int>(window.tokens.size());
    state.tokens.resize(std::max<size_t>(state.tokens.size(), state.committed + rows));
    state.hashes.resize(std::max<size_t>(state.hashes.size(), state.committed + rows), kPoisonedRow);
    for (int row = 0; row < rows; ++row) {
      const int64_t position = state.committed + row;
      const uint64_t previous = position == 0 ? options_.shape.salt : state.hashes[position - 1];
      if (previous == kPoisonedRow) {
        return Status(ErrorCode::Internal, "read a poisoned row at position " + std::to_string(position - 1));
      }
      const int32_t token = window.tokens[row];
      const uint64_t hash = fake_history_hash(options_.shape, previous, token);
      state.tokens[position] = token;
      state.hashes[position] = hash;
      const int64_t out_row = verified.row_begin[index] + row;
      for (size_t tap = 0; (window.want_taps || keep_on_device_) && tap < tap_layers_.size(); ++tap) {
        float* out = &tap_values[(verified.tap_row_begin[index] + row) * row_taps + tap * hidden];
        out[0] = static_cast<float>(token);
        out[1] = static_cast<float>(position);
        out[2] = static_cast<float>(hash & 0xffffff);
        out[3] = static_cast<float>(tap_layers_[tap]);
        // The rest of the hash, 24 bits a float, where the shape has room (a restarted fake drafter resumes from it).
        if (hidden >= 6) {
          out[4] = static_cast<float>((hash >> 24) & 0xffffff);
          out[5] = static_cast<float>(hash >> 48);
        }
      }
      if (row < window.first_drawn_row) continue;
      fake_logits(options_.shape, hash, logits);
      verified.draws[out_row] = draw_token(logits, window.sampling, position + 1);
      if (window.want_logits) std::copy(logits.begin(), logits.end(), verified.logits.begin() + out_row * vocab);
    }
    state.tentative_rows = rows;
    ++windows_by_drawn_rows_[rows - window.first_drawn_row];
    release_counts_.try_emplace(window.stream, 0);
  }
  rows_ += total_rows;
  if (options_.clock != nullptr) {
    int64_t shape = options_.shape_by_windows ? int64_t{total_rows} * 4096 + static_cast<int64_t>(windows.size())
                                              : int64_t{total_rows};
    const bool tapping = std::any_of(windows.begin(), windows.end(), [](const Window& window) { return window.want_taps; });
    if (options_.shape_by_taps && tapping) shape = -1 - shape;
    const bool new_shape = !(options_.shape_by_taps && fresh_forward) && ++shape_sightings_[shape] <= 2;
    std::set<int32_t> distinct;
    for (const Window& window : windows) distinct.insert(window.tokens.begin(), window.tokens.end());
    const double wide_rows = std::max(0.0, static_cast<double>(total_rows - options_.verify_wide_from));
    double sampled_rows = 0;
    for (const Window& window : windows) {
      if (!window.sampling.greedy()) sampled_rows += static_cast<double>(window.tokens.size());
    }
    options_.clock->advance_ms(options_.verify_fixed_ms + options_.verify_row_ms * static_cast<double>(total_rows) +
                               options_.verify_wide_row_ms * wide_rows +
                               (new_shape ? options_.new_shape_ms : 0.0) +
                               options_.distinct_token_ms * static_cast<double>(distinct.size()) +
                               options_.sampled_row_ms * sampled_rows);
  }
  return verified;
}

bool FakeTarget::keep_taps_on_device(bool on) {
  keep_on_device_ = on && options_.device_taps;
  return keep_on_device_ == on;
}

Status FakeTarget::commit(StreamId stream, int kept) {
  auto found = streams_.find(stream);
  if (found == streams_.end() || found->second.tentative_rows < 0) {
    return Status(ErrorCode::Internal, "commit for stream " + std::to_string(stream) + " without a window");
  }
  StreamState& state = found->second;
  if (kept < 1 || kept > state.tentative_rows) {
    return Status(ErrorCode::InvalidArgument, "commit keeps " + std::to_string(kept) + " of " +
                                                  std::to_string(state.tentative_rows) + " rows");
  }
  const int64_t window_end = state.committed + state.tentative_rows;
  state.committed += kept;
  for (int64_t position = state.committed; position < window_end; ++position) {
    state.hashes[position] = kPoisonedRow;  // a dropped row: any later read of it fails loudly
    state.tokens[position] = static_cast<int32_t>(kPoisonedRow);
  }
  state.tentative_rows = -1;
  return ok_status();
}

int64_t FakeTarget::committed_length(StreamId stream) const {
  auto found = streams_.find(stream);
  return found == streams_.end() ? 0 : found->second.committed;
}

void FakeTarget::release(StreamId stream) {
  // Counted for every stream that ever ran, so a second release shows up as 2.
  auto counted = release_counts_.find(stream);
  if (counted != release_counts_.end()) ++counted->second;
  auto found = streams_.find(stream);
  if (found == streams_.end()) return;
  pages_held_ -= found->second.pages;
  streams_.erase(found);
}

void FakeTarget::limit_kv_pages(int64_t pages, int page_size, bool advertised) {
  options_.kv_pages = pages;
  options_.kv_page_size = page_size;
  facts_.kv_pages = advertised ? pages : 0;
  facts_.kv_page_size = advertised ? page_size : 0;
}

int FakeTarget::releases(StreamId stream) const {
  auto found = release_counts_.find(stream);
  return found == release_counts_.end() ? 0 : found->second;
}

Status FakeTarget::embed(std::span<const int32_t> tokens, std::span<float> out) const {
  for (size_t index = 0; index < tokens.size(); ++index) {
    for (int column = 0; column < facts_.hidden_size; ++column) {
      out[index * facts_.hidden_size + column] = static_cast<float>(tokens[index] + column);
    }
  }
  return ok_status();
}

Status FakeTarget::head(std::span<const float> hidden, int rows, std::span<float> out) const {
  std::fill(out.begin(), out.begin() + static_cast<size_t>(rows) * facts_.vocab_size, 0.0f);
  return ok_status();
}

}  // namespace ls
