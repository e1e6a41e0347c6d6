// Proposals from recorded sequences, keyed mistakes, and context bookkeeping checks.
#include "lanes/testing/recorded_drafter.h"

#include <limits>
#include <string>

#include "base/hash.h"

namespace ls {

RecordedDrafter::RecordedDrafter(RecordedDrafterOptions options) : options_(std::move(options)) {
  facts_.max_depth = options_.max_depth;
  facts_.tap_layers = options_.tap_layers;
  facts_.has_confidence = false;
  facts_.restarts = true;
}

void RecordedDrafter::expect(StreamId stream, std::vector<int32_t> sequence) { sequences_[stream] = std::move(sequence); }

Status RecordedDrafter::restart(StreamId stream, int64_t position) {
  int64_t& held = held_rows_[stream];
  if (position < held) {
    return Status(ErrorCode::InvalidArgument, "restart at " + std::to_string(position) + " before the " +
                                                  std::to_string(held) + " rows held");
  }
  held = position;
  return ok_status();
}

Status RecordedDrafter::absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) {
  ++absorbs_;
  release_counts_.try_emplace(stream, 0);
  const size_t row_floats = options_.tap_layers.size() * static_cast<size_t>(options_.hidden_size);
  if (options_.hidden_size > 0 && taps.size() != row_floats * rows) {
    return Status(ErrorCode::InvalidArgument, "absorb of " + std::to_string(rows) + " rows got " +
                                                  std::to_string(taps.size()) + " floats");
  }
  int64_t& held = held_rows_[stream];
  if (start > held) {
    return Status(ErrorCode::Internal, "absorb at " + std::to_string(start) + " leaves a gap after " +
                                           std::to_string(held) + " rows");
  }
  held = start + rows;
  return ok_status();
}

std::vector<Draft> RecordedDrafter::draft(std::span<const DraftRequest> requests) {
  ++passes_;
  std::vector<Draft> drafts;
  for (const DraftRequest& request : requests) {
    Draft draft;
    auto held = held_rows_.find(request.stream);
    const int64_t context = held == held_rows_.end() ? 0 : held->second;
    if (context != request.anchor_position) {
      draft.status = Status(ErrorCode::Internal, "anchor at " + std::to_string(request.anchor_position) +
                                                     ", context holds " + std::to_string(context) + " rows");
      drafts.push_back(std::move(draft));
      continue;
    }
    auto found = sequences_.find(request.stream);
    for (int depth_index = 0; depth_index < request.depth; ++depth_index) {
      const int64_t position = request.anchor_position + 1 + depth_index;
      int32_t truth = 0;
      if (found != sequences_.end() && position < static_cast<int64_t>(found->second.size())) {
        truth = found->second[position];
      }
      const bool wrong = uniform_open01(splitmix64(request.stream * 1000003 + position)) < options_.wrong_rate;
      draft.tokens.push_back(wrong ? (truth + 1) % options_.vocab_size : truth);
      draft.chances.push_back(std::numeric_limits<float>::quiet_NaN());
    }
    drafts.push_back(std::move(draft));
  }
  return drafts;
}

void RecordedDrafter::release(StreamId stream) {
  auto counted = release_counts_.find(stream);
  if (counted != release_counts_.end()) ++counted->second;
  held_rows_.erase(stream);
}

}  // namespace ls
