// The fake drafter: history from taps, the target's own keyed draws as proposals, keyed mistakes, planted faults.
#include "lanes/testing/fake_drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/hash.h"
#include "compute/sampling.h"

namespace ls {

FakeDrafter::FakeDrafter(FakeDrafterOptions options) : options_(std::move(options)) {
  facts_.max_depth = options_.max_depth;
  facts_.tap_layers = options_.tap_layers;
  facts_.stream_bytes_per_position = 12;
  facts_.has_confidence = options_.confidences;
  facts_.restarts = options_.restarts;
  facts_.tap_device = options_.device_taps ? kFakeTapDevice : -1;
}

Status FakeDrafter::restart(StreamId stream, int64_t position) {
  if (!options_.restarts) return Drafter::restart(stream, position);
  if (options_.shape.hidden_size < 6) {
    return Status(ErrorCode::InvalidArgument, "a fake drafter restarts only with taps of at least 6 columns");
  }
  History& history = histories_[stream];
  release_counts_.try_emplace(stream, 0);
  const int64_t held = static_cast<int64_t>(history.tokens.size());
  if (position < held) {
    return Status(ErrorCode::InvalidArgument, "restart at " + std::to_string(position) + " before the " +
                                                  std::to_string(held) + " positions held");
  }
  ++restarts_;
  restarted_[stream] = position;
  history.tokens.resize(position, -1);
  history.hashes.resize(position, kPoisonedRow);  // unknown: skipped
  return ok_status();
}

Status FakeDrafter::absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) {
  const int64_t call = absorbs_++;
  release_counts_.try_emplace(stream, 0);
  if (options_.fault == FakeDraftFault::AbsorbError && options_.fault_every > 0 &&
      call % options_.fault_every == options_.fault_every - 1) {
    ++faults_planted_;
    return Status(ErrorCode::Internal, "planted absorb fault for stream " + std::to_string(stream));
  }
  LS_RETURN_IF_ERROR(absorb_rows(stream, start, rows, taps));
  if (options_.clock != nullptr) options_.clock->advance_ms(options_.absorb_call_ms + options_.absorb_row_ms * rows);
  return ok_status();
}

Status FakeDrafter::absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) {
  if (!options_.device_taps || taps.device != kFakeTapDevice || taps.data == nullptr) {
    return Status(ErrorCode::InvalidArgument, "device taps on device " + std::to_string(taps.device) +
                                                  ", this fake drafter reads " +
                                                  (options_.device_taps ? std::to_string(kFakeTapDevice) : "none"));
  }
  ++device_absorbs_;
  int total = 0;
  for (const TapRows& piece : rows) {
    if (piece.first_row < 0 || piece.first_row + piece.rows > taps.rows) {
      return Status(ErrorCode::InvalidArgument, "tap rows " + std::to_string(piece.first_row) + " + " +
                                                    std::to_string(piece.rows) + " outside the " +
                                                    std::to_string(taps.rows) + " rows on the device");
    }
    release_counts_.try_emplace(piece.stream, 0);
    total += piece.rows;
  }
  if (options_.clock != nullptr) options_.clock->advance_ms(options_.absorb_call_ms + options_.absorb_row_ms * total);
  if (options_.absorb_in_flight) {
    in_flight_.emplace_back(std::vector<TapRows>(rows.begin(), rows.end()), taps);
    return ok_status();
  }
  return read_device_rows(rows, taps);
}

Status FakeDrafter::read_device_rows(std::span<const TapRows> rows, const DeviceTaps& taps) {
  const auto* values = static_cast<const float*>(taps.data);
  const size_t row_values = static_cast<size_t>(taps.row_values);
  for (const TapRows& piece : rows) {
    LS_RETURN_IF_ERROR(absorb_rows(piece.stream, piece.start, piece.rows,
                                   std::span<const float>(values + piece.first_row * row_values,
                                                          static_cast<size_t>(piece.rows) * row_values)));
  }
  return ok_status();
}

Status FakeDrafter::settle() {
  ++settles_;
  Status first_error = ok_status();
  for (const auto& [rows, taps] : in_flight_) {
    Status status = read_device_rows(rows, taps);
    if (first_error.ok()) first_error = status;
  }
  in_flight_.clear();
  return first_error;
}

Status FakeDrafter::absorb_rows(StreamId stream, int64_t start, int rows, std::span<const float> taps) {
  const int hidden = options_.shape.hidden_size;
  const size_t row_floats = options_.tap_layers.size() * hidden;
  if (taps.size() != static_cast<size_t>(rows) * row_floats) {
    return Status(ErrorCode::InvalidArgument, "absorb of " + std::to_string(rows) + " rows got " +
                                                  std::to_string(taps.size()) + " floats");
  }
  History& history = histories_[stream];
  if (start > static_cast<int64_t>(history.tokens.size())) {
    return Status(ErrorCode::Internal, "absorb at " + std::to_string(start) + " leaves a gap after " +
                                           std::to_string(history.tokens.size()) + " rows");
  }
  history.tokens.resize(start);
  history.hashes.resize(start);
  for (int row = 0; row < rows; ++row) {
    const float* tap = &taps[row * row_floats];
    if (std::isnan(tap[0]) || std::isnan(tap[1]) || std::isnan(tap[2])) {
      return Status(ErrorCode::Internal, "absorbed row " + std::to_string(start + row) + " was never written");
    }
    const int32_t token = static_cast<int32_t>(tap[0]);
    const int64_t position = start + row;
    if (static_cast<int64_t>(tap[1]) != position) {
      return Status(ErrorCode::Internal, "absorbed row says position " + std::to_string(tap[1]) + ", expected " +
                                             std::to_string(position));
    }
    const uint64_t previous = position == 0 ? options_.shape.salt : history.hashes.back();
    uint64_t hash = fake_history_hash(options_.shape, previous, token);
    if (previous == kPoisonedRow && position > 0) {
      // The first row after a restart: the hash comes from the taps (the rest of it rides in columns 4 and 5).
      hash = static_cast<uint64_t>(tap[2]) | static_cast<uint64_t>(tap[4]) << 24 | static_cast<uint64_t>(tap[5]) << 48;
    }
    if (static_cast<float>(hash & 0xffffff) != tap[2]) {
      return Status(ErrorCode::Internal, "absorbed row at " + std::to_string(position) + " disagrees with the history");
    }
    history.tokens.push_back(token);
    history.hashes.push_back(hash);
  }
  absorbed_rows_ += rows;
  return ok_status();
}

Draft FakeDrafter::draft_one(const DraftRequest& request, bool faulty) {
  Draft draft;
  auto found = histories_.find(request.stream);
  const int64_t held = found == histories_.end() ? 0 : static_cast<int64_t>(found->second.tokens.size());
  if (held != request.anchor_position) {
    draft.status = Status(ErrorCode::Internal, "NoRowToDraftFrom: anchor at " + std::to_string(request.anchor_position) +
                                                   ", context holds " + std::to_string(held) + " rows");
    return draft;
  }
  if (request.depth < 1 || request.depth > options_.max_depth) {
    draft.status = Status(ErrorCode::InvalidArgument, "depth " + std::to_string(request.depth));
    return draft;
  }
  uint64_t hash = held == 0 ? options_.shape.salt : found->second.hashes.back();
  if (hash == kPoisonedRow) {
    // Restarted with no row absorbed since: no history to draft from, so blind (wrong) guesses.
    for (int depth_index = 0; depth_index < request.depth; ++depth_index) {
      draft.tokens.push_back((request.anchor_token + 1 + depth_index) % options_.shape.vocab_size);
      draft.chances.push_back(options_.confidences ? 0.01f : std::numeric_limits<float>::quiet_NaN());
    }
    drafts_proposed_ += request.depth;
    return draft;
  }
  int32_t token = request.anchor_token;
  int64_t position = request.anchor_position;
  std::vector<float> logits(options_.shape.vocab_size);
  double chance = 1.0;
  for (int depth_index = 0; depth_index < request.depth; ++depth_index) {
    hash = fake_history_hash(options_.shape, hash, token);
    fake_logits(options_.shape, hash, logits);
    const int32_t truth = draw_token(logits, request.sampling, position + 1);
    const bool hopeless = options_.hopeless_from >= 0 && depth_index >= options_.hopeless_from;
    const bool restarted = restarted_.count(request.stream) > 0;
    const double wrong_rate =
        options_.restarted_wrong_rate >= 0 && restarted ? options_.restarted_wrong_rate : options_.wrong_rate;
    const bool right = pass_right_ || std::find(options_.right_streams.begin(), options_.right_streams.end(),
                                                request.stream) != options_.right_streams.end();
    const bool wrong =
        hopeless || pass_wrong_ || (!right && uniform_open01(splitmix64(hash ^ 0xd1ce)) < wrong_rate);
    token = wrong ? (truth + 1) % options_.shape.vocab_size : truth;
    const double reported = options_.reported_wrong_rate >= 0 ? options_.reported_wrong_rate : options_.wrong_rate;
    chance *= hopeless ? 0.01 : std::max(0.05, 1.0 - reported);
    draft.tokens.push_back(token);
    draft.chances.push_back(options_.confidences ? static_cast<float>(chance)
                                                 : std::numeric_limits<float>::quiet_NaN());
    ++position;
  }
  if (faulty) {
    ++faults_planted_;
    switch (options_.fault) {
      case FakeDraftFault::NonfiniteChance: draft.chances.back() = std::numeric_limits<float>::quiet_NaN(); break;
      case FakeDraftFault::InfiniteChance: draft.chances.front() = std::numeric_limits<float>::infinity(); break;
      case FakeDraftFault::OutOfRangePick: draft.tokens.front() = options_.shape.vocab_size + 3; break;
      case FakeDraftFault::DraftError:
        draft.status = Status(ErrorCode::DraftNonfinite, "planted draft fault");
        break;
      default: break;
    }
  }
  drafts_proposed_ += static_cast<int64_t>(draft.tokens.size());
  return draft;
}

std::vector<Draft> FakeDrafter::draft(std::span<const DraftRequest> requests) {
  // A pass queues behind the device absorbs in flight (a failed one fails every request of the pass).
  if (!in_flight_.empty()) {
    const Status settled = settle();
    if (!settled.ok()) {
      std::vector<Draft> failed(requests.size());
      for (Draft& draft : failed) draft.status = settled;
      return failed;
    }
  }
  ++passes_;
  pass_wrong_ = forced_wrong_passes_ > 0;
  if (pass_wrong_) --forced_wrong_passes_;
  const bool over_restart = std::any_of(requests.begin(), requests.end(), [&](const DraftRequest& request) {
    return restarted_.count(request.stream) > 0;
  });
  restarted_passes_ += over_restart;
  pass_right_ = !pass_wrong_ && over_restart && restarted_passes_ <= options_.lucky_restarted_passes;
  widest_pass_ = std::max<int64_t>(widest_pass_, static_cast<int64_t>(requests.size()));
  std::vector<Draft> drafts;
  int deepest = 0;
  bool sampled = false;
  for (const DraftRequest& request : requests) {
    sampled = sampled || !request.sampling.greedy();
    const int64_t index = requests_++;
    const bool faulty = options_.fault != FakeDraftFault::None && options_.fault != FakeDraftFault::AbsorbError &&
                        options_.fault_every > 0 && index % options_.fault_every == options_.fault_every - 1;
    drafts.push_back(draft_one(request, faulty));
    deepest = std::max(deepest, request.depth);
  }
  ++passes_by_depth_[deepest];
  if (options_.clock != nullptr) {
    const double factor = sampled ? options_.sampled_pass_factor : 1.0;
    const bool short_block = deepest <= options_.short_block_depth;
    options_.clock->advance_ms(factor * ((short_block ? 0.5 : 1.0) * options_.draft_fixed_ms +
                                         options_.draft_row_ms * static_cast<double>(requests.size()) * deepest));
  }
  return drafts;
}

void FakeDrafter::release(StreamId stream) {
  auto counted = release_counts_.find(stream);
  if (counted != release_counts_.end()) ++counted->second;
  histories_.erase(stream);
  restarted_.erase(stream);
}

}  // namespace ls
