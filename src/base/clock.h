// Time as an injected dependency: WallClock in production, FixedClock in tests.
#pragma once

#include <chrono>

namespace ls {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since an arbitrary fixed origin.
  virtual double now_ms() const = 0;
};

class WallClock final : public Clock {
 public:
  double now_ms() const override {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

// A clock that moves only when a test advances it.
class FixedClock final : public Clock {
 public:
  double now_ms() const override { return now_ms_; }
  void advance_ms(double ms) { now_ms_ += ms; }

 private:
  double now_ms_ = 0;
};

}  // namespace ls
