// Numbered init steps of the drafter (each allocation and the warm-up), with a planted failure for tests.
#pragma once

#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ls::dspark {

// Counts init steps; step number `fail_at` (0-based) fails with OutOfMemory as if its allocation had failed.
// Also keeps the bytes the loader holds (final buffers plus temporaries) and their peak.
class InitSteps {
 public:
  explicit InitSteps(int fail_at = -1) : fail_at_(fail_at) {}

  // OutOfMemory "injected failure at drafter init step N (what)" at the planted step, else OK.
  Status step(std::string_view what) {
    const int number = count_++;
    if (number == fail_at_) {
      return Status(ErrorCode::OutOfMemory,
                    "injected failure at drafter init step " + std::to_string(number) + " (" + std::string(what) + ")");
    }
    return ok_status();
  }

  // Sizes `out` to `count` elements as one counted step; a real std::bad_alloc becomes OutOfMemory too.
  template <typename T>
  Status allocate(std::vector<T>& out, size_t count, std::string_view what) {
    LS_RETURN_IF_ERROR(step(what));
    try {
      out.assign(count, T{});
    } catch (const std::bad_alloc&) {
      return Status(ErrorCode::OutOfMemory,
                    "cannot allocate " + std::to_string(count * sizeof(T)) + " bytes for " + std::string(what));
    }
    hold(static_cast<int64_t>(count * sizeof(T)));
    return ok_status();
  }

  void hold(int64_t bytes) {
    held_bytes_ += bytes;
    if (held_bytes_ > peak_bytes_) peak_bytes_ = held_bytes_;
  }
  void drop(int64_t bytes) { held_bytes_ -= bytes; }

  int count() const { return count_; }
  int64_t held_bytes() const { return held_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  int fail_at_ = -1;
  int count_ = 0;
  int64_t held_bytes_ = 0;
  int64_t peak_bytes_ = 0;
};

}  // namespace ls::dspark
