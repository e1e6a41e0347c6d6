// The DSpark steps shared by the CPU and CUDA drafters.
#include "draft/dspark/shared_steps.h"

#include <string>

#include <limits>
#include <vector>

namespace ls::dspark {

Status warm_up_drafter(Drafter& drafter, const DsparkConfig& config) {
  constexpr StreamId kWarmUpStream = std::numeric_limits<StreamId>::max();
  const std::vector<float> taps(static_cast<size_t>(config.tap_count()) * config.hidden_size, 0.0f);
  Status status = drafter.absorb(kWarmUpStream, 0, 1, taps);
  if (status.ok()) {
    DraftRequest request;
    request.stream = kWarmUpStream;
    request.anchor_token = config.mask_token_id;
    request.anchor_position = 1;
    request.depth = config.block_size;
    std::vector<Draft> drafts = drafter.draft(std::span<const DraftRequest>(&request, 1));
    status = drafts[0].status;
  }
  drafter.release(kWarmUpStream);
  if (!status.ok()) return Status(status.code(), "drafter warm-up failed: " + status.message());
  return ok_status();
}

Status check_draft_request(const DraftRequest& request, int max_depth, int vocab_size, bool has_context,
                           int64_t held) {
  if (request.depth < 1 || request.depth > max_depth)
    return Status(ErrorCode::InvalidArgument, "draft depth " + std::to_string(request.depth) + " outside [1, " +
                                                  std::to_string(max_depth) + "]");
  if (request.anchor_token < 0 || request.anchor_token >= vocab_size)
    return Status(ErrorCode::InvalidArgument, "anchor token " + std::to_string(request.anchor_token) +
                                                  " outside vocabulary " + std::to_string(vocab_size));
  if (!has_context || held != request.anchor_position)
    return Status(ErrorCode::InvalidArgument, "the drafter holds " + std::to_string(held) + " positions of stream " +
                                                  std::to_string(request.stream) + ", the anchor is at " +
                                                  std::to_string(request.anchor_position));
  return ok_status();
}

}  // namespace ls::dspark
