// Steps every DSpark drafter (CPU and CUDA) takes the same way: the load-time warm-up, the checks of a request.
#pragma once

#include <string>

#include "base/status.h"
#include "draft/drafter.h"
#include "draft/dspark/config.h"

namespace ls::dspark {

// Absorbs one zero row and drafts a whole block on a scratch stream, then releases it; a failure is named
// ("drafter warm-up failed: ...") and the scratch stream is gone either way.
Status warm_up_drafter(Drafter& drafter, const DsparkConfig& config);

// InvalidArgument for a depth outside [1, max_depth], an anchor token outside the vocabulary, or a context that does
// not hold exactly the anchor's position (`held` positions; `has_context` false for a stream never absorbed).
Status check_draft_request(const DraftRequest& request, int max_depth, int vocab_size, bool has_context,
                           int64_t held);

// Drafter::restart for a context with `length`, `skipped` and `resumed_at` (CPU and CUDA alike): the positions from
// length to `position` are skipped, never absorbed; a position inside what the context covers is InvalidArgument.
template <typename Context>
Status restart_context(Context& context, StreamId stream, int64_t position) {
  if (position < context.length) {
    return Status(ErrorCode::InvalidArgument, "restart of stream " + std::to_string(stream) + " at position " +
                                                  std::to_string(position) + " before the " +
                                                  std::to_string(context.length) + " positions it covers");
  }
  if (position == context.length) return ok_status();
  context.skipped += position - context.length;
  context.length = position;
  context.resumed_at = position;
  return ok_status();
}

}  // namespace ls::dspark
