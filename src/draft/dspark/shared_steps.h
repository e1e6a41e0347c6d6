// Steps every DSpark drafter (CPU and CUDA) takes the same way: the load-time warm-up, the checks of a request.
#pragma once

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

}  // namespace ls::dspark
