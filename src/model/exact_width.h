// Measures a target's exact width: the widest window whose rows equal one-row steps bit for bit.
#pragma once

#include "base/status.h"
#include "model/target.h"

namespace ls {

// Feeds `max_width` seeded random tokens one row at a time, then as windows of widths 2 .. max_width on fresh
// streams, and returns the widest W such that every width up to W reproduced the one-row logits and draws bitwise.
// Uses (and releases) stream ids near UINT64_MAX; the target must hold no window on them.
Result<int> measure_exact_width(Target& target, int max_width);

}  // namespace ls
