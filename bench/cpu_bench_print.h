// cpu_bench's summary lines: one run's (one thread count's) result as tables on stdout. Part of cpu_bench (not a
// test).
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ls::bench {

// `result` is bench_threads()'s JSON at `threads` threads; `verify` the window widths timed, `fused` the fusion arms.
inline void print_run(const nlohmann::json& result, int threads, const std::vector<int>& verify,
                      const std::vector<int>& fused) {
  using json = nlohmann::json;
  if (result.contains("drafter_amx") || result.contains("spec")) return;  // printed as they ran
  if (result.contains("rounds")) {
    const json& rounds = result["rounds"];
    std::printf("\nthreads %d: 1-stream rounds (verify %d rows, commit 2, absorb 2, pass depth %d), medians (best):\n",
                threads, rounds["rows"].get<int>(), rounds["depth"].get<int>());
    for (const json& arm : rounds["arms"]) {
      const json& a = rounds[arm.get<std::string>()];
      std::printf("  %-16s verify %.3f (%.3f)  absorb %.3f  pass %.3f (%.3f)  round %.3f (%.3f) ms\n",
                  arm.get<std::string>().c_str(),
                  a["verify_ms"].get<double>(), a["best_verify_ms"].get<double>(), a["absorb_ms"].get<double>(),
                  a["pass_ms"].get<double>(), a["best_pass_ms"].get<double>(), a["round_ms"].get<double>(),
                  a["best_round_ms"].get<double>());
    }
    return;
  }
  std::printf("\nthreads %d (%s): read %.1f GB/s -> floor %.1f tok/s\n", threads,
              result["timing"].get<std::string>().c_str(), result["read_gb_s"].get<double>(),
              result["floor_tok_s"].get<double>());
  std::printf("  decode          %8.1f tok/s  (%.0f%% of floor; %.0f%% paired with the read passes around each "
              "repeat)\n",
              result["decode_tok_s"].get<double>(), 100.0 * result["decode_fraction_of_floor"].get<double>(),
              100.0 * result["decode_fraction_of_floor_paired"].get<double>());
  const std::vector<double> passes = result["read_passes_gb_s"].get<std::vector<double>>();
  std::printf("  read passes     %.1f .. %.1f GB/s over the run\n", *std::min_element(passes.begin(), passes.end()),
              *std::max_element(passes.begin(), passes.end()));
  for (auto& [tokens, rate] : result["prefill_tok_s"].items())
    std::printf("  prefill %-6s  %8.1f tok/s\n", tokens.c_str(), rate.get<double>());
  for (int rows : verify) {
    const json& entry = result["verify"][std::to_string(rows)];
    std::printf("  verify %2d rows  %8.3f ms  (%.2fx one row)", rows, entry["ms"].get<double>(),
                entry["relative"].get<double>());
    if (fused.size() > 1)
      for (int arm : fused)
        std::printf("  fused %d: %.3f ms (best %.3f)", arm, entry["fused_" + std::to_string(arm) + "_ms"].get<double>(),
                    entry["fused_" + std::to_string(arm) + "_best_ms"].get<double>());
    std::printf("\n");
  }
  if (!result.contains("drafter")) return;
  const json& drafter = result["drafter"];
  std::printf("  drafter (bits %d): absorb of %d rows %.2f ms (wall); 1 stream, by depth (block and scan by wall "
              "clock):\n",
              drafter["bits"].get<int>(), drafter["context"].get<int>(), drafter["absorb_ms"].get<double>());
  if (drafter.contains("pass_profile")) bench::print_pass_profile(drafter["pass_profile"]);
  // One line a depth: the medians (`key` "") or the best repeats ("best_").
  auto depth_lines = [&drafter](const std::string& key) {
    for (auto& [depth, entry] : drafter["depths"].items()) {
      const double pass = entry[key + "pass_ms"].get<double>(), one_row = entry[key + "verify_1_ms"].get<double>();
      std::printf("    depth %s  pass %6.3f ms (block %6.3f, scan %6.3f)  verify 1 row %6.3f, %s+1 rows %6.3f ms  "
                  "pass / verify(1) %.2f\n",
                  depth.c_str(), pass, entry[key + "block_ms"].get<double>(), entry[key + "scan_ms"].get<double>(),
                  one_row, depth.c_str(), entry[key + "verify_window_ms"].get<double>(), pass / one_row);
    }
  };
  depth_lines("");
  if (fused.size() > 1)
    for (auto& [depth, entry] : drafter["depths"].items()) {
      std::printf("    depth %s arms:", depth.c_str());
      for (int arm : fused)
        std::printf("  fused %d: pass %.3f (best %.3f) ms, %s+1 rows %.3f (best %.3f) ms", arm,
                    entry["fused_" + std::to_string(arm) + "_pass_ms"].get<double>(),
                    entry["fused_" + std::to_string(arm) + "_best_pass_ms"].get<double>(), depth.c_str(),
                    entry["fused_" + std::to_string(arm) + "_verify_window_ms"].get<double>(),
                    entry["fused_" + std::to_string(arm) + "_best_verify_window_ms"].get<double>());
      std::printf("\n");
    }
  std::printf("  the same, best of the repeats (the least disturbed by other processes):\n");
  depth_lines("best_");
}

}  // namespace ls::bench
