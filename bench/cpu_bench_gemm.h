// cpu_bench --gemm-ab ROWS: the GEMM kernels alone, AVX-512 bf16 panels against the AMX B-tile layout, on the same
// bf16 matrices (both packings in one process: set_cpu_amx around pack_for_cpu), a sweep over COUNT matrices of N x K
// (default 27 x 1152 x 384: ~24 MB, the nano target's size, L3-warm after the first sweep) per timed call, the two
// arms alternating sweep by sweep so they share the host's phase; AMX once per tile schedule asked for
// (set_amx_schedule masks, the same bits). Medians over the repeats. Part of cpu_bench.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/thread_pool.h"
#include "bench_util.h"
#include "compute/cpu/matmul_amx.h"
#include "compute/ops.h"

namespace ls::bench {

struct GemmPlan {
  std::vector<int> rows = {1, 2, 4, 8, 16};
  int threads = 2, repeats = 20;
  int64_t N = 1152, K = 384;
  int count = 27;
  std::vector<int> schedules = {0};  // AMX arms: set_amx_schedule masks
  bool license = false;  // also the clock probe: AVX-512 sweeps before AMX ran, right after, and after a rest
};

// The calling core's clock in GHz from a chain of dependent adds (one a cycle), ~2 million of them.
inline double core_ghz() {
  constexpr int kAdds = 2'000'000;
  const auto start = Clock::now();
  uint64_t value = 0;
  for (int i = 0; i < kAdds; ++i) asm volatile("add $1, %0" : "+r"(value));
  return kAdds / ms_since(start) / 1e6;
}

inline nlohmann::json gemm_ab(const GemmPlan& plan) {
  using namespace ls::compute;
  nlohmann::json result;
  if (!cpu_amx_available()) {
    std::printf("gemm A/B: this CPU has no AMX-BF16\n");
    return result;
  }
  std::vector<OwnedMatrix> panels(plan.count), tiles(plan.count);
  std::vector<OwnedMatrix*> panel_list, tile_list;
  for (int i = 0; i < plan.count; ++i) {
    for (OwnedMatrix* m : {&panels[i], &tiles[i]}) {
      m->rows = plan.N;
      m->cols = plan.K;
      m->b16.resize(plan.N * plan.K);
      for (int64_t j = 0; j < plan.N * plan.K; ++j)
        m->b16[j] = float_to_bf16(static_cast<float>(uniform_open01(splitmix64(i * 1000003ull + j)) - 0.5));
    }
    panel_list.push_back(&panels[i]);
    tile_list.push_back(&tiles[i]);
  }
  const bool saved = set_cpu_amx(false);
  pack_for_cpu(panel_list);
  set_cpu_amx(true);
  pack_for_cpu(tile_list);
  set_cpu_amx(saved);
  const int max_rows = *std::max_element(plan.rows.begin(), plan.rows.end());
  std::vector<float> x(max_rows * plan.K), y_panels(max_rows * plan.N), y_tiles(max_rows * plan.N);
  for (size_t j = 0; j < x.size(); ++j) x[j] = round_to_bf16(static_cast<float>(uniform_open01(splitmix64(7 + j)) - 0.5));
  ThreadPool pool(plan.threads);
  const OpContext ctx{&pool, NumericMode::Bf16};
  auto sweep = [&](const std::vector<OwnedMatrix>& set, int rows, std::vector<float>& y) {
    const auto start = Clock::now();
    for (const OwnedMatrix& m : set) matmul(ctx, x.data(), rows, m.view(), y.data());
    return ms_since(start);
  };
  std::printf("gemm A/B: %d x [%lld x %lld] bf16 (%.1f MB), %d threads, %d repeats, medians (best) ms a sweep\n",
              plan.count, static_cast<long long>(plan.N), static_cast<long long>(plan.K),
              plan.count * plan.N * plan.K * 2 / 1e6, plan.threads, plan.repeats);
  if (plan.license) {
    // Whether AMX slows the AVX-512 code after it (a power license / clock drop): 1-row sweeps of the panels before
    // any tile op of this process, right after AMX sweeps, and after a 50 ms rest, with the core's clock around them.
    auto block = [&](const std::vector<OwnedMatrix>& set, std::vector<float>& y) {
      std::vector<double> times;
      for (int repeat = 0; repeat < plan.repeats; ++repeat) times.push_back(sweep(set, 1, y));
      return median(times);
    };
    const double ghz_fresh = core_ghz();
    const double before = block(panels, y_panels);
    const double ghz_avx512 = core_ghz();
    const double amx_ms = block(tiles, y_tiles);
    const double ghz_amx = core_ghz();
    const double after = block(panels, y_panels);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double ghz_rested = core_ghz();
    const double rested = block(panels, y_panels);
    std::printf("  clock probe (1 row): GHz fresh %.2f, after AVX-512 %.2f, after AMX %.2f, after 50 ms rest %.2f; "
                "AVX-512 sweep before AMX %.3f ms, AMX %.3f, AVX-512 right after AMX %.3f, after the rest %.3f\n",
                ghz_fresh, ghz_avx512, ghz_amx, ghz_rested, before, amx_ms, after, rested);
    result["license"] = {{"ghz", {ghz_fresh, ghz_avx512, ghz_amx, ghz_rested}},
                         {"avx512_before_ms", before}, {"amx_ms", amx_ms}, {"avx512_after_ms", after},
                         {"avx512_rested_ms", rested}};
  }
  const size_t arms = 1 + plan.schedules.size();  // arm 0: AVX-512 panels; arm 1 + i: AMX, schedule i
  const int saved_schedule = set_amx_schedule(0);
  auto run_arm = [&](size_t arm, int rows) {
    if (arm == 0) return sweep(panels, rows, y_panels);
    set_amx_schedule(plan.schedules[arm - 1]);
    return sweep(tiles, rows, y_tiles);
  };
  for (int rows : plan.rows) {
    std::vector<std::vector<double>> times(arms);
    for (size_t arm = 0; arm < arms; ++arm) run_arm(arm, rows);
    for (int repeat = 0; repeat < plan.repeats; ++repeat)
      for (size_t arm = 0; arm < arms; ++arm) times[arm].push_back(run_arm(arm, rows));
    double worst = 0;  // the last matrix's outputs: the two summation orders agree to bf16 rounding
    for (int64_t j = 0; j < rows * plan.N; ++j)
      worst = std::max(worst, std::abs(double(y_panels[j]) - y_tiles[j]) / std::max(1e-2, std::abs(double(y_panels[j]))));
    const double macs = double(rows) * plan.N * plan.K * plan.count;
    const double base = median(times[0]);
    std::printf("  rows %2d  avx512-bf16 %.3f (%.3f) %.0f GMAC/s", rows, base,
                *std::min_element(times[0].begin(), times[0].end()), macs / base / 1e6);
    nlohmann::json row = {{"avx512_ms", base}, {"max_rel_diff", worst}};
    for (size_t arm = 1; arm < arms; ++arm) {
      const double ms = median(times[arm]);
      const std::string name = "amx s" + std::to_string(plan.schedules[arm - 1]);
      std::printf(" | %s %.3f (%.3f) %.2fx %.0f GMAC/s", name.c_str(), ms,
                  *std::min_element(times[arm].begin(), times[arm].end()), ms / base, macs / ms / 1e6);
      row[name + "_ms"] = ms;
    }
    std::printf("  max rel diff %.1e\n", worst);
    result[std::to_string(rows)] = row;
  }
  set_amx_schedule(saved_schedule);
  return result;
}

}  // namespace ls::bench
