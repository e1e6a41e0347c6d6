// The load-time warm-up every DSpark drafter runs (CPU and CUDA): one absorb and one full-block draft.
#pragma once

#include "base/status.h"
#include "draft/drafter.h"
#include "draft/dspark/config.h"

namespace ls::dspark {

// Absorbs one zero row and drafts a whole block on a scratch stream, then releases it; a failure is named
// ("drafter warm-up failed: ...") and the scratch stream is gone either way.
Status warm_up_drafter(Drafter& drafter, const DsparkConfig& config);

}  // namespace ls::dspark
