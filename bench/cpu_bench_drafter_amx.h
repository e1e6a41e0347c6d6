// cpu_bench --drafter DIR --drafter-amx 1,0 [--drafter-bits-ab 0,8] [--ab-streams 1,4,16]: the drafter's pass on AMX
// tiles (1) and on the AVX-512 panels (0), and with bf16 (0) or int8 (8) weights, side by side in one process
// (compute/cpu/matmul_amx.h, drafter_amx; every (amx, bits) pair is an arm). One drafter is loaded per arm
// beside the one target; at every (streams, depth) the arms' passes take turns, each right after a one-row-per-stream
// target forward (as in a round, where the verify has just streamed the target's weights), so every arm sees the host's
// same phase; medians and each arm's ratio to the first.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "bench_util.h"
#include "cpu_bench_floor.h"
#include "compute/cpu/matmul_amx.h"
#include "compute/cpu/draft_ops.h"
#include "draft/dspark/dspark_drafter.h"

namespace ls::bench {

struct DrafterAmxPlan {
  std::string drafter;
  std::vector<int> arms;           // LS_CPU_DRAFTER_AMX values: 1 the tiles, 0 the panels
  std::vector<int> bits = {0};     // --drafter-bits of each arm (crossed with `arms`)
  std::vector<int> int8_wide = {-1};  // --int8-wide-ab 0,1: set_int8_wide_tiles per arm (crossed; -1 as set)
  std::vector<int> streams = {1, 4, 16};
  int threads = 2, context = 192, repeats = 5;
  compute::NumericMode mode = compute::NumericMode::Bf16;
};

// `forward(streams)` runs one target forward of one row per stream (timed by the caller's clock, not here).
inline nlohmann::json drafter_amx_ab(const DrafterAmxPlan& plan, Target& target,
                                     const std::function<void(int streams)>& forward) {
  const int most = *std::max_element(plan.streams.begin(), plan.streams.end());
  std::vector<std::unique_ptr<dspark::DsparkDrafter>> drafters;
  std::vector<std::string> labels;
  for (int arm : plan.arms)
    for (int bits : plan.bits) {
    if (arm != 0 && !compute::cpu_amx_runnable()) {
      std::fprintf(stderr, "--drafter-amx %d: this process cannot run AMX\n", arm);
      std::exit(1);
    }
    DrafterOptions options;
    options.threads = plan.threads;
    options.mode = plan.mode;
    options.max_streams = most;
    options.bits = bits;
    const bool saved = compute::set_drafter_amx(arm != 0);
    auto loaded = dspark::DsparkDrafter::load(plan.drafter, target, options);
    compute::set_drafter_amx(saved);
    if (!loaded.ok()) {
      std::fprintf(stderr, "drafter load failed: %s\n", loaded.status().to_string().c_str());
      std::exit(1);
    }
    drafters.push_back(std::move(*loaded));
    labels.push_back("amx " + std::to_string(arm) + " bits " + std::to_string(bits));
    }
  // Each drafter once per wide-tile setting (the switch is global and changes no bits: set before every timed call).
  std::vector<size_t> drafter_of;
  std::vector<int> wide_of;
  std::vector<std::string> drafter_labels = labels;
  labels.clear();
  for (size_t index = 0; index < drafters.size(); ++index)
    for (int wide : plan.int8_wide) {
      drafter_of.push_back(index);
      wide_of.push_back(wide);
      labels.push_back(drafter_labels[index] + (wide < 0 ? "" : " wide " + std::to_string(wide)));
    }
  const bool saved_wide = compute::int8_wide_tiles();
  auto use = [&](size_t arm) -> dspark::DsparkDrafter& {
    if (wide_of[arm] >= 0) compute::set_int8_wide_tiles(wide_of[arm] != 0);
    return *drafters[drafter_of[arm]];
  };
  const dspark::DsparkConfig& config = drafters[0]->config();
  const int vocab = target.facts().vocab_size;
  const int64_t width = static_cast<int64_t>(config.tap_count()) * config.hidden_size;
  std::vector<float> taps(static_cast<size_t>(plan.context * width));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = static_cast<float>(uniform_open01(splitmix64(i)) * 4.0 - 2.0);
  const StreamId first = StreamId{1} << 20;
  for (auto& drafter : drafters)
    for (int s = 0; s < most; ++s)
      if (Status status = drafter->absorb(first + s, 0, plan.context, taps); !status.ok()) {
        std::fprintf(stderr, "absorb failed: %s\n", status.to_string().c_str());
        std::exit(1);
      }
  nlohmann::json result = nlohmann::json::object();
  // A short absorb (8 rows, as the lanes' calibration times it) opening a fresh stream, against the same absorb on a
  // stream already open (as in a round), each arm in turn.
  {
    std::vector<std::vector<double>> fresh(labels.size()), open(labels.size());
    const int short_rows = std::min(8, plan.context);
    const std::span<const float> short_taps(taps.data(), static_cast<size_t>(short_rows * width));
    for (int repeat = 0; repeat < plan.repeats * 4; ++repeat)
      for (size_t arm = 0; arm < labels.size(); ++arm) {
        const StreamId scratch = (StreamId{3} << 20) + static_cast<StreamId>(repeat);
        dspark::DsparkDrafter& drafter = use(arm);
        forward(1);
        auto start = Clock::now();
        Status status = drafter.absorb(scratch, 0, short_rows, short_taps);
        fresh[arm].push_back(ms_since(start));
        forward(1);
        start = Clock::now();
        const Status again = drafter.absorb(scratch, 0, short_rows, short_taps);
        if (status.ok()) status = again;
        open[arm].push_back(ms_since(start));
        drafter.release(scratch);
        if (!status.ok()) {
          std::fprintf(stderr, "absorb failed: %s\n", status.to_string().c_str());
          std::exit(1);
        }
      }
    for (size_t arm = 0; arm < labels.size(); ++arm)
      std::printf("  %s: absorb of %d rows after a 1-row forward, opening a stream %.3f ms, on an open one %.3f ms\n",
                  labels[arm].c_str(), short_rows, median(fresh[arm]), median(open[arm]));
  }
  std::printf("  drafter A/B (pass after a 1-row-per-stream forward, median ms; ratio to %s):\n", labels[0].c_str());
  for (int streams : plan.streams)
    for (int depth : {1, 3, config.block_size}) {
      std::vector<std::vector<double>> times(labels.size());
      std::vector<DraftRequest> requests(static_cast<size_t>(streams));
      for (int repeat = 0; repeat < plan.repeats * 4; ++repeat)
        for (size_t arm = 0; arm < labels.size(); ++arm) {
          dspark::DsparkDrafter& drafter = use(arm);
          for (int s = 0; s < streams; ++s) {
            requests[s].stream = first + s;
            requests[s].anchor_token = static_cast<int32_t>(splitmix64(repeat * 131 + s) % vocab);
            requests[s].anchor_position = plan.context;
            requests[s].depth = depth;
          }
          forward(streams);
          const auto start = Clock::now();
          const std::vector<Draft> drafts = drafter.draft(requests);
          times[arm].push_back(ms_since(start));
          for (const Draft& draft : drafts)
            if (!draft.status.ok()) {
              std::fprintf(stderr, "draft failed: %s\n", draft.status.to_string().c_str());
              std::exit(1);
            }
        }
      const std::string key = std::to_string(streams) + "x" + std::to_string(depth);
      std::printf("    %2d streams depth %d:", streams, depth);
      for (size_t arm = 0; arm < labels.size(); ++arm) {
        const double ms = median(times[arm]);
        result[key][labels[arm]] = ms;
        std::printf("  %s %.3f (%.2fx)", labels[arm].c_str(), ms, ms / median(times[0]));
      }
      std::printf("\n");
    }
  for (auto& drafter : drafters)
    for (int s = 0; s < most; ++s) drafter->release(first + s);
  compute::set_int8_wide_tiles(saved_wide);
  return result;
}

}  // namespace ls::bench
