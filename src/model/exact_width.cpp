// measure_exact_width: one-row steps are the oracle; each wider window must reproduce them bit for bit.
#include "model/exact_width.h"

#include <cstring>
#include <limits>
#include <vector>

#include "base/hash.h"

namespace ls {
namespace {

constexpr StreamId kProbeStreamBase = std::numeric_limits<StreamId>::max() - 64;

// Runs `tokens` as consecutive windows of `width` rows on a fresh stream; logits [rows, V] and draws [rows].
Status run_in_windows(Target& target, StreamId stream, std::span<const int32_t> tokens, int width,
                      std::vector<float>& logits, std::vector<int32_t>& draws) {
  const int64_t V = target.facts().vocab_size;
  logits.assign(tokens.size() * V, 0.0f);
  draws.assign(tokens.size(), -1);
  target.release(stream);
  for (size_t begin = 0; begin < tokens.size(); begin += width) {
    const size_t rows = std::min<size_t>(width, tokens.size() - begin);
    Window window;
    window.stream = stream;
    window.tokens = tokens.subspan(begin, rows);
    window.want_logits = true;
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    if (!verified.ok()) {
      target.release(stream);
      return verified.status();
    }
    std::memcpy(logits.data() + begin * V, verified->logits.data(), sizeof(float) * rows * V);
    std::memcpy(draws.data() + begin, verified->draws.data(), sizeof(int32_t) * rows);
    const Status committed = target.commit(stream, static_cast<int>(rows));
    if (!committed.ok()) {
      target.release(stream);
      return committed;
    }
  }
  target.release(stream);
  return ok_status();
}

}  // namespace

Result<int> measure_exact_width(Target& target, int max_width) {
  if (max_width < 1) return Status(ErrorCode::InvalidArgument, "max_width must be >= 1, got " + std::to_string(max_width));
  const int vocab = target.facts().vocab_size;
  std::vector<int32_t> tokens(max_width);
  for (int i = 0; i < max_width; ++i) tokens[i] = static_cast<int32_t>(splitmix64(0x5eed + i) % vocab);
  std::vector<float> oracle_logits, logits;
  std::vector<int32_t> oracle_draws, draws;
  LS_RETURN_IF_ERROR(run_in_windows(target, kProbeStreamBase, tokens, 1, oracle_logits, oracle_draws));
  int exact = 1;
  for (int width = 2; width <= max_width; ++width) {
    LS_RETURN_IF_ERROR(run_in_windows(target, kProbeStreamBase + width, tokens, width, logits, draws));
    if (draws != oracle_draws || std::memcmp(logits.data(), oracle_logits.data(), sizeof(float) * logits.size()) != 0)
      break;
    exact = width;
  }
  return exact;
}

}  // namespace ls
