// The drafter's per-stream context K/V storage: open, grow, release.
#include "draft/dspark/context_cache.h"

#include <algorithm>
#include <new>

namespace ls::dspark {

StreamContext* ContextCache::find(StreamId stream) {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

StreamContext& ContextCache::open(StreamId stream) {
  std::unique_ptr<StreamContext>& slot = streams_[stream];
  if (!slot) {
    slot = std::make_unique<StreamContext>();
    slot->keys.resize(layers_);
    slot->values.resize(layers_);
  }
  return *slot;
}

Status ContextCache::reserve(StreamContext& context, int64_t rows) {
  if (rows <= context.capacity) return ok_status();
  const int64_t capacity = std::max<int64_t>({rows, 2 * context.capacity, 64});
  try {
    for (int layer = 0; layer < layers_; ++layer) {
      context.keys[layer].resize(static_cast<size_t>(capacity * kv_size_));
      context.values[layer].resize(static_cast<size_t>(capacity * kv_size_));
    }
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::OutOfMemory, "drafter context cache cannot grow to " + std::to_string(capacity) +
                                              " positions (" + std::to_string(capacity * bytes_per_position()) +
                                              " bytes)");
  }
  context.capacity = capacity;
  return ok_status();
}

}  // namespace ls::dspark
