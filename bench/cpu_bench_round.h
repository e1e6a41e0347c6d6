// cpu_bench --round ROWS,DEPTH: 1-stream rounds in a round's order (verify a window of ROWS tapped rows, commit 2,
// absorb their taps, draft DEPTH), each phase timed by wall clock, with the --fused arms taken in turn round by round
// so every arm sees the same phase of a shared host. Medians and bests per arm. With --cpu-time 1 at one thread, the
// calling thread's CPU time instead (robust to other processes). Part of cpu_bench (not a test).
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/cpu/fused_ops.h"
#include "draft/dspark/dspark_drafter.h"
#include "model/target.h"

namespace ls::bench {

struct RoundPlan {
  int rows = 4;          // the verify window (pending token + drafts)
  int depth = 7;         // the pass's depth
  int rounds = 400;      // rounds per arm
  int context = 192;     // prompt rows before the first round
  std::vector<int> fused = {1};
  bool cpu_time = false;  // time by the calling thread's CPU time (one thread)
};

// Median / min of a list (copied).
inline double round_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

inline nlohmann::json bench_rounds(const RoundPlan& plan, Target& target, const std::string& drafter_dir, int threads,
                                   int drafter_bits) {
  // A point in time in ms: wall clock, or the calling thread's CPU time.
  auto now = [&plan] {
    timespec t;
    clock_gettime(plan.cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
  };
  auto ms = [](double a, double b) { return b - a; };
  DrafterOptions options;
  options.threads = threads;
  options.max_streams = 1;
  options.bits = drafter_bits;
  auto loaded = dspark::DsparkDrafter::load(drafter_dir, target, options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "drafter load failed: %s\n", loaded.status().to_string().c_str());
    std::exit(1);
  }
  dspark::DsparkDrafter& drafter = **loaded;
  if (Status status = target.set_taps(drafter.facts().tap_layers); !status.ok()) {
    std::fprintf(stderr, "set_taps failed: %s\n", status.to_string().c_str());
    std::exit(1);
  }
  const int vocab = target.facts().vocab_size;
  const StreamId stream = 7u << 20;
  const int64_t tap_width = static_cast<int64_t>(drafter.facts().tap_layers.size()) * target.facts().hidden_size;
  auto check = [](const Status& status, const char* what) {
    if (status.ok()) return;
    std::fprintf(stderr, "%s failed: %s\n", what, status.to_string().c_str());
    std::exit(1);
  };
  // The prompt, tapped and absorbed.
  std::vector<int32_t> tokens(plan.context);
  for (int i = 0; i < plan.context; ++i) tokens[i] = static_cast<int32_t>(splitmix64(i + 1) % vocab);
  Window window;
  window.stream = stream;
  window.tokens = tokens;
  window.first_drawn_row = plan.context - 1;
  Result<Verified> prompt = target.forward(std::span<const Window>(&window, 1));
  check(prompt.status(), "prompt forward");
  check(target.commit(stream, plan.context), "prompt commit");
  check(drafter.absorb(stream, 0, plan.context, prompt->taps), "prompt absorb");
  int64_t position = plan.context;
  const size_t arms = plan.fused.size();
  std::vector<std::vector<double>> verify(arms), absorb(arms), pass(arms), round(arms);
  std::vector<int32_t> row_tokens(plan.rows);
  for (int r = 0; r < plan.rounds * static_cast<int>(arms); ++r) {
    const size_t arm = static_cast<size_t>(r) % arms;
    compute::set_cpu_fusion_steps(static_cast<unsigned>(plan.fused[arm]));
    for (int i = 0; i < plan.rows; ++i) row_tokens[i] = static_cast<int32_t>(splitmix64(r * 131 + i) % vocab);
    window.tokens = row_tokens;
    window.first_drawn_row = 0;
    const double t0 = now();
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    check(verified.status(), "verify");
    const double t1 = now();
    const int kept = std::min(2, plan.rows);
    check(target.commit(stream, kept), "commit");
    check(drafter.absorb(stream, position,  kept,
                         std::span<const float>(verified->taps.data(), static_cast<size_t>(kept * tap_width))),
          "absorb");
    position += kept;
    const double t2 = now();
    DraftRequest request;
    request.stream = stream;
    request.anchor_token = row_tokens[0];
    request.anchor_position = position;
    request.depth = plan.depth;
    std::vector<Draft> drafts = drafter.draft(std::span<const DraftRequest>(&request, 1));
    check(drafts[0].status, "draft");
    const double t3 = now();
    verify[arm].push_back(ms(t0, t1));
    absorb[arm].push_back(ms(t1, t2));
    pass[arm].push_back(ms(t2, t3));
    round[arm].push_back(ms(t0, t3));
    if (position + plan.rows + 16 >= 4000) {  // start over before the context limit
      target.release(stream);
      drafter.release(stream);
      window.tokens = tokens;
      window.first_drawn_row = plan.context - 1;
      Result<Verified> again = target.forward(std::span<const Window>(&window, 1));
      check(again.status(), "prompt forward");
      check(target.commit(stream, plan.context), "prompt commit");
      check(drafter.absorb(stream, 0, plan.context, again->taps), "prompt absorb");
      position = plan.context;
    }
  }
  compute::set_cpu_fusion_steps(static_cast<unsigned>(plan.fused[0]));
  target.release(stream);
  drafter.release(stream);
  nlohmann::json result;
  result["rows"] = plan.rows;
  result["depth"] = plan.depth;
  for (size_t arm = 0; arm < arms; ++arm) {
    auto best = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    result["fused_" + std::to_string(plan.fused[arm])] = {
        {"verify_ms", round_median(verify[arm])}, {"absorb_ms", round_median(absorb[arm])},
        {"pass_ms", round_median(pass[arm])},     {"round_ms", round_median(round[arm])},
        {"best_verify_ms", best(verify[arm])},    {"best_pass_ms", best(pass[arm])},
        {"best_round_ms", best(round[arm])}};
  }
  return result;
}

}  // namespace ls::bench
