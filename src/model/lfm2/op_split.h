// The CPU forward's time by op kind and window width, for finding where a few-row verify goes on a quiet machine
// (LS_CPU_OP_SPLIT=1 at start, or set_op_split(true)): wall time of each kind on the calling thread, so a pool call
// counts with its waits. Off by default: one relaxed load per op. Printed to stderr at exit when anything was timed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ls::lfm2 {

enum class OpKind : int {
  Embed,
  Norm,        // the layers' operator and FFN norms
  ConvIn,      // the ShortConv in_proj and the conv itself (one pool call when fused)
  ProjectAdd,  // out_proj / o_proj / down_proj and the residual add
  Qkv,         // q/k/v in one pool call
  QkRope,      // per-head q/k norms and RoPE
  KvAppend,    // the new rows' K/V into the cache
  Attention,
  GateUp,      // gate/up and SwiGLU
  Head,        // final norm and the tied head (logits or greedy pick)
  Count
};

void set_op_split(bool on);
bool op_split_on();
// Forwards of `rows` rows start here (widths above 16 share one bucket).
void op_split_forward(int64_t rows);
void op_split_add(OpKind kind, double ms);
// Mean ms per forward of each kind by width ("" when nothing was timed).
std::string op_split_report();
// Forgets everything timed so far (tests).
void op_split_clear();

// Times its scope as `kind` when the split is on.
class OpTimer {
 public:
  explicit OpTimer(OpKind kind) : kind_(kind), on_(op_split_on()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (on_) op_split_add(kind_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  OpKind kind_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ls::lfm2
