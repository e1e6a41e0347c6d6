// cpu_bench --int8-rate ROWS,... [--gemm-shape N,K,COUNT] [--threads 1,2] [--repeats R]: the drafter's w8a8 GEMM alone
// (matmul_int8_vnni) on COUNT random N x K int8 matrices (default 1 x 384 x 1536: the nano drafter's fc, a prompt
// absorb's largest GEMM; 384 x 1152 x 21 ~ its three layers' FFNs), each thread count's calls on its own pool, median
// GMAC/s over the repeats of a sweep. Part of cpu_bench.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/thread_pool.h"
#include "bench_util.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/draft_ops.h"

namespace ls::bench {

struct Int8RatePlan {
  std::vector<int> rows = {1, 7, 28, 64, 112, 192};
  std::vector<int> threads = {1, 2};
  int64_t N = 384, K = 1536;
  int count = 1, repeats = 20;
};

inline nlohmann::json int8_rate(const Int8RatePlan& plan) {
  using namespace ls::compute;
  nlohmann::json result;
  if (!cpu_features().avx512_vnni) {
    std::printf("int8 rate: this CPU has no AVX-512 VNNI\n");
    return result;
  }
  struct Held {
    std::vector<int8_t> panels;
    std::vector<float> scales;
    std::vector<int32_t> sums;
  };
  std::vector<Held> held(plan.count);
  std::vector<Int8Matrix> matrices;
  for (int i = 0; i < plan.count; ++i) {
    std::vector<int8_t> codes(static_cast<size_t>(plan.N * plan.K));
    for (size_t j = 0; j < codes.size(); ++j)
      codes[j] = static_cast<int8_t>(std::lround((uniform_open01(splitmix64(i * 1000003ull + j)) - 0.5) * 254));
    held[i].scales.assign(plan.N, 0.01f);
    held[i].sums.resize(plan.N);
    sum_int8_codes(codes.data(), plan.N, plan.K, held[i].sums.data());
    held[i].panels = pack_int8_panels(codes.data(), plan.N, plan.K);
    matrices.push_back(Int8Matrix{nullptr, held[i].scales.data(), plan.N, plan.K, held[i].sums.data(),
                                  held[i].panels.data()});
  }
  const int most = *std::max_element(plan.rows.begin(), plan.rows.end());
  std::vector<float> x(static_cast<size_t>(most * plan.K)), y(static_cast<size_t>(most * plan.N));
  for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(uniform_open01(splitmix64(j + 77)) * 4.0 - 2.0);
  std::printf("  int8 w8a8 GEMM, %d x %lld x %lld per sweep, GMAC/s (median of %d):\n", plan.count,
              static_cast<long long>(plan.N), static_cast<long long>(plan.K), plan.repeats);
  for (int threads : plan.threads) {
    ThreadPool pool(threads);
    const OpContext ctx{threads > 1 ? &pool : nullptr, NumericMode::Bf16};
    std::printf("    %d thread(s):", threads);
    for (int rows : plan.rows) {
      std::vector<double> rates;
      for (int repeat = 0; repeat < plan.repeats + 2; ++repeat) {
        const auto start = Clock::now();
        for (const Int8Matrix& w : matrices) matmul_int8_vnni(ctx, x.data(), rows, w, y.data());
        const double ms = ms_since(start);
        if (repeat >= 2) rates.push_back(double(rows) * plan.N * plan.K * plan.count / ms / 1e6);
      }
      const double rate = median(rates);
      result[std::to_string(threads)][std::to_string(rows)] = rate;
      std::printf("  %d rows %.1f", rows, rate);
    }
    std::printf("\n");
  }
  return result;
}

}  // namespace ls::bench
