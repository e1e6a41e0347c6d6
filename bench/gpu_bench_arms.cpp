// gpu_bench --arms: see gpu_bench_arms.h.
#include "gpu_bench_arms.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>

#include "bench_util.h"
#include "compute/cuda/kernels.h"
#include "gpu_bench_kernels.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::gpu_bench {
namespace {

using Clock = std::chrono::steady_clock;  // gpu_bench_kernels.h: ms_since, tokens_for

// What an arm sets: pipeline spread above one row, taps wanted, taps by the norm, 17..32-row windows.
struct Arm {
  int spread = 1;
  bool taps = false, taps_in_norm = false, rows32 = false;
};

// Tokens set switches on top of `defaults` (the process's settings when the arms began).
Arm parse_arm(const std::string& name, const Arm& defaults) {
  Arm arm = defaults;
  std::string list = name + "+";
  for (size_t at = 0, plus; (plus = list.find('+', at)) != std::string::npos; at = plus + 1) {
    const std::string part = list.substr(at, plus - at);
    if (part.rfind("spread", 0) == 0) arm.spread = std::atoi(part.c_str() + 6);
    else if (part == "taps") arm.taps = true;
    else if (part == "rows32") arm.rows32 = true;
    else if (part == "norows32") arm.rows32 = false;
    else if (part == "tapcopy") {
      arm.taps = true;
      arm.taps_in_norm = false;
    }
    else if (part == "tapnorm") arm.taps_in_norm = arm.taps = true;
    else if (part != "default" && !part.empty()) std::fprintf(stderr, "gpu_bench --arms: no switch '%s' (ignored)\n", part.c_str());
  }
  return arm;
}

void apply(lfm2::CudaTarget& target, const Arm& arm) {
  cuda::set_decode_pipe_spread(arm.spread);
  cuda::set_decode_pipe_rows32(arm.rows32);
  lfm2::CudaTarget::set_taps_in_norm(arm.taps_in_norm);
  target.set_graphs(false);  // drops the graphs captured under the other arm
  target.set_graphs(true);
}

std::string cell(const char* format, double value) {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// One arm's times on a fresh stream: [0] the decode step, then one per verify width (median of the repeats).
std::vector<double> time_arm(lfm2::CudaTarget& target, const ArmsOptions& o, const Arm& arm) {
  const int V = target.config().vocab_size;
  constexpr StreamId kStream = 41;
  const std::vector<int32_t> prompt = tokens_for(o.context, 1, V), steps = tokens_for(o.decode_tokens + 4, 2, V);
  Window w;
  w.stream = kStream;
  w.tokens = prompt;
  w.first_drawn_row = o.context - 1;
  w.want_taps = arm.taps;
  check(target.forward(std::span<const Window>(&w, 1)).status(), "arms prompt");
  check(target.commit(kStream, o.context), "commit");
  w.first_drawn_row = 0;
  std::vector<double> times;
  for (int i = 0; i < o.decode_tokens + 4; ++i) {
    if (i == 4) times.push_back(0);
    const Clock::time_point start = Clock::now();
    w.tokens = std::span<const int32_t>(&steps[i], 1);
    check(target.forward(std::span<const Window>(&w, 1)).status(), "arms decode");
    check(target.commit(kStream, 1), "commit");
    if (i >= 4) times[0] += ms_since(start) / o.decode_tokens;
  }
  for (const int rows : o.rows) {
    const std::vector<int32_t> window = tokens_for(rows, 3 + rows, V);
    w.tokens = window;
    std::vector<double> each;
    for (int i = 0; i < o.repeats + 2; ++i) {
      const Clock::time_point start = Clock::now();
      check(target.forward(std::span<const Window>(&w, 1)).status(), "arms verify");
      if (i >= 2) each.push_back(ms_since(start));
      check(target.commit(kStream, 1), "commit");
    }
    times.push_back(bench::median(each));
  }
  target.release(kStream);
  return times;
}

}  // namespace

bool parse_arms_flag(const std::string& flag, const std::string& value, ArmsOptions& options) {
  if (flag == "--arms") {
    options.arms.clear();
    std::string list = value + ",";
    for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1)
      if (comma > at) options.arms.push_back(list.substr(at, comma - at));
  } else if (flag == "--arms-rows") {
    options.rows = bench::parse_list(value);
  } else if (flag == "--taps") {
    options.taps = bench::parse_list(value);
  } else if (flag == "--rounds") {
    options.rounds = std::atoi(value.c_str());
  } else {
    return false;
  }
  return true;
}

void run_arms(lfm2::CudaTarget& target, const ArmsOptions& o) {
  const int spread = cuda::decode_pipe_spread();
  const bool taps_in_norm = lfm2::CudaTarget::taps_in_norm(), rows32 = cuda::decode_pipe_rows32();
  Arm defaults;
  defaults.spread = spread;
  defaults.taps_in_norm = taps_in_norm;
  defaults.rows32 = rows32;
  if (!o.taps.empty()) {
    check(target.set_taps(o.taps), "taps");
    target.keep_taps_on_device(true);  // as the lanes run a CUDA drafter: taps stay on the device
  }
  std::string header;
  for (const int rows : o.rows) header += cell(" %.0f", rows);
  std::printf("arms: ms per decode step (graphs, %d steps) | verify window of rows%s (median of %d), context %d, "
              "fresh stream per arm, arms alternating\n",
              o.decode_tokens, header.c_str(), o.repeats, o.context);
  std::map<std::string, std::vector<std::vector<double>>> all;
  for (int round = 0; round < o.rounds; ++round)
    for (const std::string& name : o.arms) {
      const Arm arm = parse_arm(name, defaults);
      if (arm.taps && o.taps.empty()) continue;
      apply(target, arm);
      const std::vector<double> times = time_arm(target, o, arm);
      all[name].push_back(times);
      std::string line;
      for (size_t i = 1; i < times.size(); ++i) line += cell(" %.3f", times[i]);
      std::printf("arms round %d %-24s decode %.4f | verify%s\n", round + 1, name.c_str(), times[0], line.c_str());
    }
  std::printf("arms summary (median of rounds):\n");
  for (const std::string& name : o.arms) {
    const auto found = all.find(name);
    if (found == all.end()) continue;
    std::string line;
    for (size_t i = 0; i < found->second.front().size(); ++i) {
      std::vector<double> column;
      for (const std::vector<double>& times : found->second) column.push_back(times[i]);
      line += cell(i == 1 ? " | verify %.4f" : " %.4f", bench::median(column));
    }
    std::printf("  %-24s decode%s\n", name.c_str(), line.c_str());
  }
  if (!o.taps.empty()) check(target.set_taps({}), "taps off");
  cuda::set_decode_pipe_spread(spread);
  cuda::set_decode_pipe_rows32(rows32);
  lfm2::CudaTarget::set_taps_in_norm(taps_in_norm);
  target.set_graphs(false);
  target.set_graphs(true);
}

}  // namespace ls::gpu_bench
