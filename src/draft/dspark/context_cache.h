// Per-stream context cache of the DSpark drafter: each draft layer's K/V rows of the positions absorbed so far.
//
// Rows [0, length - skipped) hold context K/V (each key rotated at its own position, so rows after a restart's skip
// sit right after the rows before it). A block pass writes its own K/V temporarily at the rows after them
// (so attention reads context and block as one contiguous key range); those rows are never part of the context.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "base/status.h"
#include "model/target.h"

namespace ls::dspark {

struct StreamContext {
  int64_t length = 0;                      // positions 0 .. length-1 are covered (held or skipped)
  int64_t skipped = 0;                     // positions restarts skipped: position p >= resumed_at sits at row p - skipped
  int64_t resumed_at = 0;                  // the last restart's position: absorbs may not rewrite rows before it
  int64_t capacity = 0;                    // rows allocated per layer
  std::vector<std::vector<float>> keys;    // [layers][capacity, kv_size] fp32 (bf16-exact in Bf16 mode)
  std::vector<std::vector<float>> values;  // [layers][capacity, kv_size]
};

class ContextCache {
 public:
  ContextCache(int layers, int kv_size) : layers_(layers), kv_size_(kv_size) {}

  // The stream's context, or nullptr if it has none.
  StreamContext* find(StreamId stream);
  // The stream's context, opened empty on first use.
  StreamContext& open(StreamId stream);
  // Grows capacity to at least `rows` (doubling); OutOfMemory with the numbers if the allocation fails.
  Status reserve(StreamContext& context, int64_t rows);
  // Frees everything the stream holds; unknown streams are a no-op.
  void release(StreamId stream) { streams_.erase(stream); }

  int64_t bytes_per_position() const { return static_cast<int64_t>(layers_) * 2 * kv_size_ * sizeof(float); }
  size_t stream_count() const { return streams_.size(); }

 private:
  int layers_;
  int kv_size_;
  std::map<StreamId, std::unique_ptr<StreamContext>> streams_;
};

}  // namespace ls::dspark
