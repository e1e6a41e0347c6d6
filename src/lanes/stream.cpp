// Stream bookkeeping: appending generated tokens under eos, max_tokens and the stop hook.
#include "lanes/stream.h"

#include <algorithm>

namespace ls {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "unknown";
}

bool Stream::append(int32_t token) {
  if (finished()) return false;
  generated.push_back(token);
  if (std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end()) {
    finish = FinishReason::Stop;
  } else if (request.stop && request.stop(generated)) {
    finish = FinishReason::Stop;
  } else if (remaining() <= 0) {
    finish = FinishReason::Length;
  }
  return !finished();
}

}  // namespace ls
