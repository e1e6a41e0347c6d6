// matmul_shapes --nano: the nano pair's small-M GEMMs (a target verify of M rows, the drafter's block pass) timed for
// each kernel arm of set_small_m_kernel in turn, repeat by repeat (A/B in one run); a table and JSON. Included once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/thread_pool.h"
#include "compute/cpu/matmul_avx512.h"
#include "compute/ops.h"
#include "../bench_util.h"

namespace ls::bench::nano {

using compute::Matrix;
using compute::NumericMode;
using compute::OpContext;
using compute::OwnedMatrix;

struct Options {
  std::vector<int> rows = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16};
  std::vector<int> threads = {2};
  std::vector<int> arms = {0, 3};  // set_small_m_kernel masks, timed in turn
  std::vector<int> prefetch = {0};  // set_verify_prefetch settings ROWS * 10 + GROUPS crossed with them (0 = default)
  int repeats = 31;
  bool cpu_time = false;  // 1-thread runs by thread CPU time
  std::string json_path;
};

// One GEMM call of a forward: 1..3 matrices sharing the input (a matmul_group), in bf16 or fp32 (the heads) mode.
struct Call {
  std::vector<int> matrices;  // indices into the arena's matrices
  bool fp32 = false;
};

// The matrices of the nano target's layers (8: conv conv attn conv conv attn conv attn; hidden 384, FFN 576), of the
// nano drafter's pass (3 layers: q/k/v, o, gate/up 1152, down) and the tied head (vocab 8192, read by both), in
// forward order, packed in one arena. A target verify is t-layers + head; a drafter pass d-layers + head.
struct Sequences {
  std::vector<OwnedMatrix> matrices;
  std::vector<Call> target, drafter, head;  // the target's layers, the drafter's layers, the tied head (fp32 mode)
  double target_macs = 0, drafter_macs = 0, head_macs = 0;  // per row
};

inline Sequences make_sequences() {
  Sequences s;
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (N, K)
  auto add = [&](std::vector<Call>& calls, double& macs, std::vector<std::pair<int64_t, int64_t>> group,
                 bool fp32 = false) {
    Call call;
    call.fp32 = fp32;
    for (auto [n, k] : group) {
      call.matrices.push_back(static_cast<int>(shapes.size()));
      shapes.push_back({n, k});
      macs += static_cast<double>(n) * k;
    }
    calls.push_back(call);
  };
  for (const char* kind = "ccaccaca"; *kind; ++kind) {
    if (*kind == 'c') {
      add(s.target, s.target_macs, {{1152, 384}});
      add(s.target, s.target_macs, {{384, 384}});
    } else {
      add(s.target, s.target_macs, {{384, 384}, {128, 384}, {128, 384}});
      add(s.target, s.target_macs, {{384, 384}});
    }
    add(s.target, s.target_macs, {{576, 384}, {576, 384}});
    add(s.target, s.target_macs, {{384, 576}});
  }
  for (int layer = 0; layer < 3; ++layer) {
    add(s.drafter, s.drafter_macs, {{384, 384}, {128, 384}, {128, 384}});
    add(s.drafter, s.drafter_macs, {{384, 384}});
    add(s.drafter, s.drafter_macs, {{1152, 384}, {1152, 384}});
    add(s.drafter, s.drafter_macs, {{384, 1152}});
  }
  add(s.head, s.head_macs, {{8192, 384}}, true);  // last in the arena, as the target packs it
  s.matrices.resize(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    OwnedMatrix& w = s.matrices[i];
    w.rows = shapes[i].first;
    w.cols = shapes[i].second;
    w.b16.resize(w.rows * w.cols);
    for (size_t j = 0; j < w.b16.size(); ++j)
      w.b16[j] = float_to_bf16(static_cast<float>(uniform_open01(splitmix64(i * 1000003 + j)) - 0.5) * 0.1f);
  }
  std::vector<OwnedMatrix*> order;
  for (OwnedMatrix& w : s.matrices) order.push_back(&w);
  compute::pack_for_cpu(order);
  return s;
}

// Runs `calls` over `rows` rows of x (bf16-exact inputs [rows, max K]) into out (one buffer per matrix).
inline void run_calls(const Sequences& s, const std::vector<Call>& calls, ThreadPool& pool, const float* x,
                      int64_t rows, std::vector<std::vector<float>>& out) {
  for (const Call& call : calls) {
    const OpContext ctx{&pool, call.fp32 ? NumericMode::Fp32 : NumericMode::Bf16};
    Matrix views[3];
    float* ys[3];
    for (size_t i = 0; i < call.matrices.size(); ++i) {
      views[i] = s.matrices[call.matrices[i]].view();
      ys[i] = out[call.matrices[i]].data();
    }
    if (call.matrices.size() == 1)
      compute::matmul(ctx, x, rows, views[0], ys[0]);
    else
      compute::matmul_group(ctx, x, rows, std::span<const Matrix>(views, call.matrices.size()),
                            std::span<float* const>(ys, call.matrices.size()));
  }
}

inline double now_ms(bool cpu_time) {
  if (cpu_time) {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline int run(const Options& options) {
  const Sequences s = make_sequences();
  const int64_t max_rows = *std::max_element(options.rows.begin(), options.rows.end());
  std::vector<float> x(max_rows * 1152);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = round_to_bf16(static_cast<float>(uniform_open01(splitmix64(i + 7)) - 0.5));
  nlohmann::json report = nlohmann::json::array();
  std::printf("nano GEMMs per row: target layers %.2fM MAC (%zu calls), drafter layers %.2fM (%zu calls), head %.2fM;"
              " arms/prefetch: set_small_m_kernel mask (1 finer window chunks, 2 whole panels per call)"
              " / set_verify_prefetch\n",
              s.target_macs / 1e6, s.target.size(), s.drafter_macs / 1e6, s.drafter.size(), s.head_macs / 1e6);
  std::printf("%-8s %4s %4s %5s %10s %10s %9s %12s %9s\n", "part", "thr", "rows", "arm", "median ms", "best ms",
              "GMAC/s", "x 1-row arm", "bitwise");
  // One round's GEMMs in order, each part timed: the verify (target layers, head), then the pass (drafter layers,
  // head), so every part sees the cache a round leaves (36 MB of weights in all against the 32 MiB L3).
  const char* names[] = {"t-layers", "t-head", "d-layers", "d-head"};
  const std::vector<Call>* parts[] = {&s.target, &s.head, &s.drafter, &s.head};
  const double macs[] = {s.target_macs, s.head_macs, s.drafter_macs, s.head_macs};
  struct Arm {
    int chunks, prefetch;
  };
  std::vector<Arm> arm_list;
  for (int chunks : options.arms)
    for (int prefetch : options.prefetch) arm_list.push_back({chunks, prefetch});
  auto apply = [](const Arm& arm) {
    compute::set_small_m_kernel(arm.chunks);
    if (arm.prefetch > 0)
      compute::set_verify_prefetch(arm.prefetch / 10, arm.prefetch % 10);
    else
      compute::set_verify_prefetch(-1, 0);
  };
  for (int threads : options.threads) {
    ThreadPool pool(threads);
    const bool cpu = options.cpu_time && threads == 1;
    std::vector<std::vector<double>> one_row(arm_list.size(), std::vector<double>(4, 0));
    for (int rows : options.rows) {
      const size_t arms = arm_list.size();
      std::vector<std::vector<std::vector<double>>> times(arms, std::vector<std::vector<double>>(5));
      std::vector<std::vector<std::vector<float>>> outs(arms);
      for (size_t a = 0; a < arms; ++a) {
        outs[a].resize(s.matrices.size());
        for (size_t i = 0; i < s.matrices.size(); ++i) outs[a][i].assign(rows * s.matrices[i].rows, NAN);
      }
      for (int repeat = 0; repeat < options.repeats + 1; ++repeat)
        for (size_t a = 0; a < arms; ++a) {
          apply(arm_list[a]);
          double total = 0;
          for (int part = 0; part < 4; ++part) {
            const double start = now_ms(cpu);
            run_calls(s, *parts[part], pool, x.data(), rows, outs[a]);
            const double ms = now_ms(cpu) - start;
            total += ms;
            if (repeat > 0) times[a][part].push_back(ms);
          }
          if (repeat > 0) times[a][4].push_back(total);
        }
      apply(Arm{-1, 0});
      for (size_t a = 0; a < arms; ++a) {
        bool same = true;
        for (size_t m = 0; m < s.matrices.size(); ++m)
          same = same && std::memcmp(outs[a][m].data(), outs[0][m].data(), outs[0][m].size() * 4) == 0;
        for (int part = 0; part < 5; ++part) {
          const double ms = median(times[a][part]);
          const double best = *std::min_element(times[a][part].begin(), times[a][part].end());
          const double part_macs = part < 4 ? macs[part] : macs[0] + macs[1] + macs[2] + macs[3];
          if (part < 4 && rows == 1) one_row[a][part] = ms;
          const double base =
              part < 4 ? one_row[a][part] : one_row[a][0] + one_row[a][1] + one_row[a][2] + one_row[a][3];
          const double ratio = base > 0 ? ms / base : 0;
          const char* name = part < 4 ? names[part] : "round";
          std::printf("%-8s %4d %4d %2d/%02d %10.4f %10.4f %9.1f %12.2f %9s\n", name, threads, rows,
                      arm_list[a].chunks, arm_list[a].prefetch, ms, best, part_macs * rows / ms / 1e6, ratio,
                      same ? "same" : "DIFFER");
          report.push_back({{"part", name}, {"threads", threads}, {"rows", rows}, {"arm", arm_list[a].chunks},
                            {"prefetch", arm_list[a].prefetch},
                            {"median_ms", ms}, {"best_ms", best}, {"gmacs", part_macs * rows / ms / 1e6},
                            {"of_one_row", ratio}, {"same_bits_as_first_arm", same}, {"cpu_time", cpu}});
        }
      }
    }
  }
  if (!options.json_path.empty()) std::ofstream(options.json_path) << report.dump(1) << "\n";
  return 0;
}

}  // namespace ls::bench::nano
