// cpu_bench --amx-order 1: which summation order TDPBF16PS follows, measured: AMX outputs of random bf16 rows (spread
// exponents) against scalar models of the accumulation, counted bitwise. A vector kernel gives AMX's bits only if it
// follows a model that matches every output. s14B (SPR Xeon): none does (K = 384: the documented fma chain 90 of 1024,
// a 32-product tile rounded then added 338), so the AVX-512 kernel in the documented order (once
// LS_CPU_AMX_VECTOR_ROWS, 4f66596) gave other bits and was removed. Needs AMX. Part of cpu_bench.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "compute/cpu/matmul_amx.h"
#include "compute/ops.h"

namespace ls::bench {

inline nlohmann::json amx_order_probe() {
  using namespace ls::compute;
  nlohmann::json result;
  if (!cpu_amx_available()) {
    std::printf("amx order: this CPU has no AMX-BF16\n");
    return result;
  }
  // The models: per output, c from 0 over the K pairs (k, k + 1) in increasing k.
  const char* names[] = {"fma even then odd", "fma odd then even", "pair sum rounded, then added",
                         "pair and c in one rounding", "tile of 32 in one rounding", "tile of 32 rounded, then added"};
  constexpr int kModels = 6;
  auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  for (int64_t K : {32, 64, 384, 864}) {
    const int64_t rows = 16, N = 64;
    auto value = [](uint64_t seed) {  // bf16-exact, exponents spread over 2^-6 .. 2^6
      const uint64_t h = splitmix64(seed);
      const double u = uniform_open01(h) * 2 - 1;
      const int e = static_cast<int>((h >> 40) % 13) - 6;
      return round_to_bf16(static_cast<float>(std::ldexp(u, e)));
    };
    std::vector<float> x(rows * K), wf(N * K);
    for (int64_t i = 0; i < rows * K; ++i) x[i] = value(1000 + K * 7 + i);
    OwnedMatrix w;
    w.rows = N;
    w.cols = K;
    for (int64_t i = 0; i < N * K; ++i) {
      wf[i] = value(900000 + K * 13 + i);
      w.b16.push_back(float_to_bf16(wf[i]));
    }
    const bool saved = set_cpu_amx(true);
    pack_for_cpu(w);
    set_cpu_amx(saved);
    std::vector<float> y(rows * N);
    matmul(OpContext{nullptr, NumericMode::Fp32}, x.data(), rows, w.view(), y.data());
    int matches[kModels] = {};
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float* a = x.data() + m * K;
        const float* b = wf.data() + n * K;
        float c[kModels] = {};
        for (int64_t t = 0; t < K; t += 32) {
          double tile = 0;
          for (int64_t k = t; k < t + 32 && k < K; k += 2) {
            const double p0 = double(a[k]) * b[k], p1 = k + 1 < K ? double(a[k + 1]) * b[k + 1] : 0.0;
            c[0] = std::fma(a[k], b[k], c[0]);
            if (k + 1 < K) c[0] = std::fma(a[k + 1], b[k + 1], c[0]);
            if (k + 1 < K) c[1] = std::fma(a[k + 1], b[k + 1], c[1]);
            c[1] = std::fma(a[k], b[k], c[1]);
            c[2] = c[2] + static_cast<float>(p0 + p1);
            c[3] = static_cast<float>(double(c[3]) + p0 + p1);
            tile += p0 + p1;
          }
          c[4] = static_cast<float>(double(c[4]) + tile);
          c[5] = c[5] + static_cast<float>(tile);
        }
        for (int model = 0; model < kModels; ++model) matches[model] += bits(c[model]) == bits(y[m * N + n]);
      }
    std::printf("amx order K=%lld (%lld outputs):", static_cast<long long>(K), static_cast<long long>(rows * N));
    for (int model = 0; model < kModels; ++model) {
      std::printf(" [%s] %d", names[model], matches[model]);
      result[std::to_string(K)][names[model]] = matches[model];
    }
    std::printf("\n");
  }
  return result;
}

}  // namespace ls::bench
