// The window rules shared by the CPU and CUDA targets.
#include "model/window_checks.h"

#include <string>
#include <unordered_set>

namespace ls {

Status check_windows(std::span<const Window> windows, const WindowLimits& limits,
                     const std::function<int64_t(StreamId)>& committed,
                     const std::function<int64_t(StreamId)>& pending) {
  int64_t total = 0;
  std::unordered_set<StreamId> seen;
  for (const Window& window : windows) {
    const std::string stream = "stream " + std::to_string(window.stream);
    const int64_t rows = static_cast<int64_t>(window.tokens.size());
    if (rows == 0) return Status(ErrorCode::InvalidArgument, stream + ": a window needs at least one row");
    if (!seen.insert(window.stream).second)
      return Status(ErrorCode::InvalidArgument, stream + " has two windows in one forward");
    for (int32_t token : window.tokens)
      if (token < 0 || token >= limits.vocab_size)
        return Status(ErrorCode::InvalidArgument, stream + ": token " + std::to_string(token) +
                                                      " is outside the vocabulary of " +
                                                      std::to_string(limits.vocab_size));
    if (window.first_drawn_row < 0 || window.first_drawn_row > rows)
      return Status(ErrorCode::InvalidArgument, stream + ": first_drawn_row " +
                                                    std::to_string(window.first_drawn_row) + " outside 0.." +
                                                    std::to_string(rows));
    const int64_t held = committed(window.stream);
    if (const int64_t waiting = pending(window.stream); waiting > 0)
      return Status(ErrorCode::InvalidArgument, stream + " has an uncommitted window of " +
                                                    std::to_string(waiting) + " rows");
    if (window.start_position >= 0 && window.start_position != held)
      return Status(ErrorCode::InvalidArgument, stream + ": window starts at position " +
                                                    std::to_string(window.start_position) + " but the stream holds " +
                                                    std::to_string(held));
    if (held + rows > limits.max_position)
      return Status(ErrorCode::InvalidArgument, stream + ": positions up to " + std::to_string(held + rows) +
                                                    " exceed max_position_embeddings " +
                                                    std::to_string(limits.max_position));
    total += rows;
  }
  if (total > limits.max_rows)
    return Status(ErrorCode::InvalidArgument, "forward of " + std::to_string(total) + " rows exceeds max_rows " +
                                                  std::to_string(limits.max_rows));
  return ok_status();
}

Status check_embed_args(std::span<const int32_t> tokens, size_t out_floats, const TargetFacts& facts) {
  const int64_t D = facts.hidden_size;
  if (static_cast<int64_t>(out_floats) != static_cast<int64_t>(tokens.size()) * D)
    return Status(ErrorCode::InvalidArgument, "embed: out holds " + std::to_string(out_floats) + " floats, " +
                                                  std::to_string(tokens.size()) + " tokens need " +
                                                  std::to_string(tokens.size() * D));
  for (int32_t token : tokens)
    if (token < 0 || token >= facts.vocab_size)
      return Status(ErrorCode::InvalidArgument, "embed: token " + std::to_string(token) + " is outside the vocabulary");
  return ok_status();
}

Status check_head_args(int rows, size_t hidden_floats, size_t out_floats, const TargetFacts& facts) {
  const int64_t D = facts.hidden_size, V = facts.vocab_size;
  if (rows < 0 || static_cast<int64_t>(hidden_floats) != rows * D || static_cast<int64_t>(out_floats) != rows * V)
    return Status(ErrorCode::InvalidArgument, "head: " + std::to_string(rows) + " rows need hidden " +
                                                  std::to_string(rows * D) + " and out " + std::to_string(rows * V) +
                                                  " floats, got " + std::to_string(hidden_floats) + " and " +
                                                  std::to_string(out_floats));
  return ok_status();
}

}  // namespace ls
