// cpu_bench --round ROWS,DEPTH: 1-stream rounds in a round's order (verify a window of ROWS tapped rows, commit 2,
// absorb their taps, draft DEPTH), each phase timed by wall clock, with the arms (--fused masks x --spin-us pool spin
// budgets x --chunk-kb few-row chunk sizes x --prefetch verify prefetch settings x --short short-block widths x
// --passes with and without the pass; --round-gap-us of busy host work
// before each phase, as the lanes' own work) taken in turn round by round so every arm sees the same phase of a
// shared host. Medians and bests per arm. With --cpu-time 1 at one thread, the calling thread's CPU time instead
// (robust to other processes). Part of cpu_bench (not a test).
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "compute/cpu/fused_ops.h"
#include "compute/cpu/matmul_avx512.h"
#include "draft/dspark/dspark_drafter.h"
#include "model/target.h"

namespace ls::bench {

struct RoundPlan {
  int rows = 4;          // the verify window (pending token + drafts)
  int depth = 7;         // the pass's depth
  int rounds = 400;      // rounds per arm
  int context = 192;     // prompt rows before the first round
  int span = 128;        // positions a stream grows by before it starts over at the prompt (contexts stay short)
  std::vector<int> fused = {1};
  std::vector<int> spins;  // pool spin budgets (us) crossed with `fused` (empty: leave the pool's as it is)
  std::vector<int> chunk_kib;  // few-row chunk sizes (KiB) crossed with the others (empty: as set)
  std::vector<int> prefetch;   // verify prefetch as ROWS*10+GROUPS (e.g. 62 = default, 12 = from 2 rows, 2 ahead)
  std::vector<int> small_m;    // set_small_m_kernel masks crossed with the others (empty: as set)
  std::vector<int> short_block;  // short-block arms: -1 the trained width, N >= 0 depth+N (empty: as set)
  std::vector<int> passes;       // 1 a round drafts, 0 it skips the pass (the forwards without the drafter's reads)
  int gap_us = 0;          // host work between the phases, busy on the calling thread (as the lanes' own work)
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
  // The prompt, tapped and absorbed (again each time the stream starts over).
  std::vector<int32_t> tokens(plan.context);
  for (int i = 0; i < plan.context; ++i) tokens[i] = static_cast<int32_t>(splitmix64(i + 1) % vocab);
  Window window;
  window.stream = stream;
  auto feed_prompt = [&] {
    window.tokens = tokens;
    window.first_drawn_row = plan.context - 1;
    Result<Verified> prompt = target.forward(std::span<const Window>(&window, 1));
    check(prompt.status(), "prompt forward");
    check(target.commit(stream, plan.context), "prompt commit");
    check(drafter.absorb(stream, 0, plan.context, prompt->taps), "prompt absorb");
  };
  feed_prompt();
  int64_t position = plan.context;
  // Arms: every fusion mask with every spin budget, taken in turn round by round.
  struct Arm {
    int fused, spin, chunk, prefetch, small_m, short_block, pass;
    std::string name() const {
      return "fused_" + std::to_string(fused) + (spin >= 0 ? "_spin_" + std::to_string(spin) : "") +
             (chunk > 0 ? "_chunk_" + std::to_string(chunk) : "") +
             (prefetch >= 0 ? "_pf_" + std::to_string(prefetch) : "") +
             (small_m >= 0 ? "_sm_" + std::to_string(small_m) : "") +
             (short_block >= -1 ? (short_block < 0 ? "_full" : "_depth+" + std::to_string(short_block)) : "") +
             (pass == 0 ? "_nopass" : "");
    }
  };
  std::vector<Arm> arm_list;
  for (int fused : plan.fused)
    for (int spin : plan.spins.empty() ? std::vector<int>{-1} : plan.spins)
      for (int chunk : plan.chunk_kib.empty() ? std::vector<int>{0} : plan.chunk_kib)
        for (int prefetch : plan.prefetch.empty() ? std::vector<int>{-1} : plan.prefetch)
          for (int small_m : plan.small_m.empty() ? std::vector<int>{-1} : plan.small_m)
            for (int short_block : plan.short_block.empty() ? std::vector<int>{-2} : plan.short_block)
              for (int pass : plan.passes.empty() ? std::vector<int>{1} : plan.passes)
                arm_list.push_back({fused, spin, chunk, prefetch, small_m, short_block, pass});
  const int64_t chunk_before = compute::set_stream_chunk_bytes(0);
  compute::set_stream_chunk_bytes(chunk_before);
  compute::set_verify_prefetch(-1, 0);
  const int spin_before = ThreadPool::spin_microseconds();
  const dspark::ShortBlock short_before = dspark::short_block();
  auto host_gap = [&] {
    const double until = now() + plan.gap_us / 1000.0;
    while (now() < until) {
    }
  };
  const size_t arms = arm_list.size();
  std::vector<std::vector<double>> verify(arms), absorb(arms), pass(arms), round(arms);
  std::vector<int32_t> row_tokens(plan.rows);
  for (int r = 0; r < plan.rounds * static_cast<int>(arms); ++r) {
    const size_t arm = static_cast<size_t>(r) % arms;
    compute::set_cpu_fusion_steps(static_cast<unsigned>(arm_list[arm].fused));
    if (arm_list[arm].spin >= 0) ThreadPool::set_spin_microseconds(arm_list[arm].spin);
    if (arm_list[arm].chunk > 0) compute::set_stream_chunk_bytes(int64_t{arm_list[arm].chunk} * 1024);
    if (const int prefetch = arm_list[arm].prefetch; prefetch >= 0)
      compute::set_verify_prefetch(prefetch / 10, prefetch % 10);
    if (arm_list[arm].small_m >= 0) compute::set_small_m_kernel(arm_list[arm].small_m);
    if (const int extra = arm_list[arm].short_block; extra >= -1)
      dspark::set_short_block(dspark::ShortBlock{extra >= 0, std::max(0, extra)});
    host_gap();
    for (int i = 0; i < plan.rows; ++i) row_tokens[i] = static_cast<int32_t>(splitmix64(r * 131 + i) % vocab);
    window.tokens = row_tokens;
    window.first_drawn_row = 0;
    const double t0 = now();
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    check(verified.status(), "verify");
    const double t1 = now();
    const int kept = std::min(2, plan.rows);
    host_gap();
    check(target.commit(stream, kept), "commit");
    check(drafter.absorb(stream, position,  kept,
                         std::span<const float>(verified->taps.data(), static_cast<size_t>(kept * tap_width))),
          "absorb");
    position += kept;
    host_gap();
    const double t2 = now();
    DraftRequest request;
    request.stream = stream;
    request.anchor_token = row_tokens[0];
    request.anchor_position = position;
    request.depth = plan.depth;
    if (arm_list[arm].pass != 0) {
      std::vector<Draft> drafts = drafter.draft(std::span<const DraftRequest>(&request, 1));
      check(drafts[0].status, "draft");
    }
    const double t3 = now();
    const double gaps = 2 * plan.gap_us / 1000.0;  // the host work inside [t1, t2) is not the absorb's
    verify[arm].push_back(ms(t0, t1));
    absorb[arm].push_back(ms(t1, t2) - gaps);
    pass[arm].push_back(ms(t2, t3));
    round[arm].push_back(ms(t0, t3) - gaps);
    // Start over, so every arm sees contexts of context .. context + span.
    if (position >= std::min(plan.context + plan.span, 4000)) {
      target.release(stream);
      drafter.release(stream);
      feed_prompt();
      position = plan.context;
    }
  }
  compute::set_cpu_fusion_steps(static_cast<unsigned>(plan.fused[0]));
  ThreadPool::set_spin_microseconds(spin_before);
  compute::set_stream_chunk_bytes(chunk_before);
  compute::set_verify_prefetch(-1, 0);
  if (!plan.small_m.empty()) compute::set_small_m_kernel(-1);
  if (!plan.short_block.empty()) dspark::set_short_block(short_before);
  target.release(stream);
  drafter.release(stream);
  nlohmann::json result;
  result["rows"] = plan.rows;
  result["depth"] = plan.depth;
  for (size_t arm = 0; arm < arms; ++arm) {
    auto best = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    result["arms"].push_back(arm_list[arm].name());
    result[arm_list[arm].name()] = {
        {"verify_ms", round_median(verify[arm])}, {"absorb_ms", round_median(absorb[arm])},
        {"pass_ms", round_median(pass[arm])},     {"round_ms", round_median(round[arm])},
        {"best_verify_ms", best(verify[arm])},    {"best_pass_ms", best(pass[arm])},
        {"best_round_ms", best(round[arm])}};
  }
  return result;
}

}  // namespace ls::bench
