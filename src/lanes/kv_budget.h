// What a target's fixed KV pool (TargetFacts::kv_pages, the CUDA target's) allows: the lanes admit a stream only when
// the pages of its longest possible history (prompt + max_tokens + one verify window) are free beside every admitted
// stream's, so no round runs out of pages mid-reply. pages 0: no fixed pool (the CPU target), admit everything.
#pragma once

#include <algorithm>
#include <cstdint>

#include "lanes/stream.h"
#include "model/target.h"

namespace ls {

struct KvBudget {
  int64_t pages = 0;
  int page_size = 0;
  int window = 1;  // most rows of one verify window (the lanes' width)

  static KvBudget of(const TargetFacts& facts, int window) {
    if (facts.kv_pages <= 0 || facts.kv_page_size <= 0) return {};
    return KvBudget{facts.kv_pages, facts.kv_page_size, std::max(1, window)};
  }
  // Most positions one request can hold: its prompt and reply together stay within this (0: no fixed pool).
  int64_t most_positions() const { return pages > 0 ? pages * page_size - window + 1 : 0; }
  // The last forward holds the committed history (prompt + max_tokens - 1 at most) and one window past it.
  int64_t pages_for(const Request& request) const {
    if (pages <= 0) return 0;
    const int64_t positions = static_cast<int64_t>(request.prompt.size()) + std::max(1, request.max_tokens) - 1 + window;
    return (positions + page_size - 1) / page_size;
  }
};

}  // namespace ls
