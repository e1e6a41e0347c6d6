// What every Target refuses in a forward's windows before it touches any state (one set of rules for all backends).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "model/target.h"

namespace ls {

struct WindowLimits {
  int vocab_size = 0;
  int64_t max_position = 0;  // max_position_embeddings
  int64_t max_rows = 0;      // rows of all windows together
};

// InvalidArgument naming the stream for: an empty window, two windows of one stream, a token outside the
// vocabulary, first_drawn_row out of range, an uncommitted earlier window, a start_position that is not the
// committed length, positions past max_position; and for a forward of more than max_rows rows.
// `committed(stream)`: positions the stream holds (0 when new); `pending(stream)`: rows of its uncommitted window.
Status check_windows(std::span<const Window> windows, const WindowLimits& limits,
                     const std::function<int64_t(StreamId)>& committed,
                     const std::function<int64_t(StreamId)>& pending);

// InvalidArgument unless out holds tokens * hidden floats and every token is inside the vocabulary (Target::embed).
Status check_embed_args(std::span<const int32_t> tokens, size_t out_floats, const TargetFacts& facts);
// InvalidArgument unless hidden holds rows * hidden_size floats and out rows * vocab (Target::head).
Status check_head_args(int rows, size_t hidden_floats, size_t out_floats, const TargetFacts& facts);

}  // namespace ls
