// CPU sigmoid top-k expert routing for lfm2_moe (reference/lfm2.md §2.7): bias selects, unbiased scores weigh.
#include <cmath>
#include <vector>

#include "compute/ops.h"

namespace ls::compute {

void route_experts(const OpContext& ctx, const float* router_logits, int64_t rows, const RouterOptions& options,
                   int32_t* chosen, float* weights) {
  const int experts = options.experts, k = options.experts_per_token;
  std::vector<float> scores(experts), biased(experts);
  std::vector<char> taken(experts);
  for (int64_t row = 0; row < rows; ++row) {
    for (int e = 0; e < experts; ++e) {
      const float logit = router_logits[row * experts + e];
      scores[e] = ctx.store(1.0f / (1.0f + std::exp(-logit)));
      biased[e] = options.expert_bias ? scores[e] + options.expert_bias[e] : scores[e];
      taken[e] = 0;
    }
    int32_t* row_chosen = chosen + row * k;
    float* row_weights = weights + row * k;
    // Slot order = descending biased score; a tie goes to the lower expert id (strict > keeps the first).
    for (int slot = 0; slot < k; ++slot) {
      int best = -1;
      for (int e = 0; e < experts; ++e)
        if (!taken[e] && (best < 0 || biased[e] > biased[best])) best = e;
      taken[best] = 1;
      row_chosen[slot] = best;
      row_weights[slot] = scores[best];
    }
    if (options.normalize) {
      float sum = 0.0f;
      for (int slot = 0; slot < k; ++slot) sum += row_weights[slot];
      const float denominator = ctx.store(ctx.store(sum) + 1e-6f);
      for (int slot = 0; slot < k; ++slot) row_weights[slot] = ctx.store(row_weights[slot] / denominator);
    }
    for (int slot = 0; slot < k; ++slot) row_weights[slot] = ctx.store(row_weights[slot] * options.routed_scaling);
  }
}

}  // namespace ls::compute
