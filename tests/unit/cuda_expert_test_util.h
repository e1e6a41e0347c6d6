// Helpers shared by the CUDA expert tests: seeded bf16 data, a MoE layer's expert weights on the device, and
// tokens routed to k distinct experts (token 3 hot on expert 0 first) with bf16-rounded combine weights.
#pragma once
#ifdef LS_HAVE_CUDA

#include <cstdint>
#include <functional>
#include <vector>

#include "base/bf16.h"
#include "base/hash.h"
#include "cuda_test_util.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu::testing {

// `count` values uniform in (-scale, scale), rounded to bf16, from `seed`.
inline std::vector<bf16> random_bf16(size_t count, uint64_t seed, float scale) {
  std::vector<bf16> out(count);
  for (size_t i = 0; i < count; ++i)
    out[i] = float_to_bf16(
        static_cast<float>((2.0 * uniform_open01(splitmix64(seed * 0x9E3779B97F4A7C15ull + i)) - 1.0) * scale));
  return out;
}

// A MoE layer's experts: E experts, top-k, hidden D, expert width I, weights on the device.
struct Layer {
  int experts, k;
  int64_t d, i;
  cuda::DeviceBuffer<bf16> gate_up, down;  // [E, 2I, D], [E, D, I]
};

inline Layer make_layer(int experts, int k, int64_t d, int64_t i, uint64_t seed) {
  return Layer{experts, k, d, i, cuda::testing::upload(random_bf16(experts * 2 * i * d, seed, 0.06f)),
               cuda::testing::upload(random_bf16(experts * d * i, seed + 1, 0.06f))};
}

// expert_ffn's arguments for `rows` tokens of x through `layer` under a plan (offsets, order), writing act and out;
// the caller adds the path's own buffers (gathered / gate_up, or weights / y / tickets for the combine in down).
inline ExpertFfn layer_ffn(const Layer& layer, const bf16* x, int64_t rows, const int32_t* offsets,
                           const int32_t* order, bf16* act, bf16* out) {
  ExpertFfn f;
  f.x = x;
  f.rows = rows;
  f.top_k = layer.k;
  f.offsets = offsets;
  f.order = order;
  f.experts = layer.experts;
  f.w_gate_up = layer.gate_up.data();
  f.w_down = layer.down.data();
  f.hidden = layer.d;
  f.inter = layer.i;
  f.act = act;
  f.out = out;
  return f;
}

// Each token's x row (seed 1000 + token), its k experts and combine weights; a slot `dropped(t, j)` says is -1.
struct RoutedTokens {
  std::vector<bf16> x;          // [rows, D]
  std::vector<int32_t> chosen;  // [rows, k]
  std::vector<float> weights;   // [rows, k]
};

inline RoutedTokens route_tokens(const Layer& layer, const std::vector<int>& tokens,
                                 const std::function<bool(int, int)>& dropped = nullptr) {
  RoutedTokens routed;
  for (int t : tokens) {
    const std::vector<bf16> row = random_bf16(layer.d, 1000 + t, 1.0f);
    routed.x.insert(routed.x.end(), row.begin(), row.end());
    std::vector<int32_t> left(layer.experts);
    for (int e = 0; e < layer.experts; ++e) left[e] = e;
    for (int j = 0; j < layer.k; ++j) {  // distinct experts, token 3 hot on expert 0 first
      const size_t at = t % 3 == 0 && j == 0 ? 0 : splitmix64(t * 131 + j) % left.size();
      routed.chosen.push_back(dropped && dropped(t, j) ? -1 : left[at]);
      left.erase(left.begin() + static_cast<int64_t>(at));
      const double u = uniform_open01(splitmix64(t * 17 + j));
      routed.weights.push_back(bf16_to_float(float_to_bf16(0.05f + 0.9f * static_cast<float>(u))));
    }
  }
  return routed;
}

}  // namespace ls::lfm2::gpu::testing

#endif  // LS_HAVE_CUDA
