// The shared DSpark warm-up.
#include "draft/dspark/warm_up.h"

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

}  // namespace ls::dspark
