// LS_CPU_OP_SPLIT: the CPU forward's time by op kind and width (op_split.h).
#include "model/lfm2/op_split.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace ls::lfm2 {
namespace {

constexpr int kWidths = 17;  // 1..16 rows, then one bucket for wider forwards
constexpr int kKinds = static_cast<int>(OpKind::Count);
constexpr const char* kNames[kKinds] = {"embed", "norm", "conv_in", "proj_add", "qkv",
                                        "qk_rope", "kv_append", "attention", "gate_up", "head"};

struct Split {
  std::mutex mutex;
  std::array<int64_t, kWidths> forwards{};
  std::array<std::array<double, kKinds>, kWidths> ms{};
  int width = 0;  // the current forward's bucket
  ~Split() {
    const std::string report = op_split_report();
    if (!report.empty()) std::fputs(report.c_str(), stderr);
  }
};

Split& split() {
  static Split instance;
  return instance;
}

std::atomic<bool> g_on{[] {
  const char* text = std::getenv("LS_CPU_OP_SPLIT");
  return text && text[0] == '1';
}()};

}  // namespace

void set_op_split(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool op_split_on() { return g_on.load(std::memory_order_relaxed); }

void op_split_forward(int64_t rows) {
  if (!op_split_on()) return;
  Split& s = split();
  std::lock_guard lock(s.mutex);
  s.width = static_cast<int>(std::clamp<int64_t>(rows, 1, kWidths) - 1);
  ++s.forwards[s.width];
}

void op_split_add(OpKind kind, double ms) {
  Split& s = split();
  std::lock_guard lock(s.mutex);
  s.ms[s.width][static_cast<int>(kind)] += ms;
}

void op_split_clear() {
  Split& s = split();
  std::lock_guard lock(s.mutex);
  s.forwards = {};
  s.ms = {};
}

std::string op_split_report() {
  Split& s = split();
  std::lock_guard lock(s.mutex);
  std::string out;
  char line[256];
  for (int width = 0; width < kWidths; ++width) {
    const int64_t n = s.forwards[width];
    if (n == 0) continue;
    double total = 0;
    for (double ms : s.ms[width]) total += ms;
    std::snprintf(line, sizeof line, "op split (LS_CPU_OP_SPLIT) rows %s%d: %lld forwards, %.4f ms a forward:",
                  width + 1 == kWidths ? ">=" : "", width + 1, static_cast<long long>(n), total / n);
    out += line;
    for (int kind = 0; kind < kKinds; ++kind) {
      std::snprintf(line, sizeof line, " %s %.4f", kNames[kind], s.ms[width][kind] / n);
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace ls::lfm2
