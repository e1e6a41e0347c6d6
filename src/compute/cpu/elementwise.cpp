// CPU row-wise ops: bf16 storing, RMSNorm, residual add, SwiGLU, embedding gather, MoE slot sum.
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "compute/ops.h"

namespace ls::compute {

void store_activations(const OpContext& ctx, std::span<float> values) {
  if (!ctx.rounds_to_bf16()) return;
  for (float& value : values) value = round_to_bf16(value);
}

void rms_norm(const OpContext& ctx, const float* x, int64_t rows, int64_t width, const float* weight, float eps,
              float* y) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* in = x + row * width;
    float* out = y + row * width;
    // Sum of squares in double, in index order: one fixed order for every row.
    double sum_squares = 0;
    for (int64_t i = 0; i < width; ++i) sum_squares += static_cast<double>(in[i]) * in[i];
    const float mean = static_cast<float>(sum_squares / static_cast<double>(width));
    const float inverse_rms = 1.0f / std::sqrt(mean + eps);
    if (ctx.rounds_to_bf16()) {
      for (int64_t i = 0; i < width; ++i) out[i] = round_to_bf16(weight[i] * round_to_bf16(in[i] * inverse_rms));
    } else {
      for (int64_t i = 0; i < width; ++i) out[i] = weight[i] * (in[i] * inverse_rms);
    }
  }
}

void add_residual(const OpContext& ctx, float* h, const float* delta, int64_t count) {
  for (int64_t i = 0; i < count; ++i) h[i] = ctx.store(h[i] + delta[i]);
}

void swiglu(const OpContext& ctx, const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float silu = ctx.store(gate[i] / (1.0f + std::exp(-gate[i])));
    out[i] = ctx.store(silu * up[i]);
  }
}

void embed_rows(const OpContext& ctx, const Matrix& table, std::span<const int32_t> tokens, float* out) {
  const int64_t width = table.cols;
  for (size_t row = 0; row < tokens.size(); ++row) {
    const int64_t token = tokens[row];
    LS_CHECK(token >= 0 && token < table.rows, "embedding token out of range (callers validate ids)");
    float* dst = out + static_cast<int64_t>(row) * width;
    if (table.b16) {
      for (int64_t i = 0; i < width; ++i) dst[i] = bf16_to_float(table.b16[token * width + i]);
    } else {
      std::memcpy(dst, table.f32 + token * width, sizeof(float) * width);
    }
    for (int64_t i = 0; i < width; ++i) dst[i] = ctx.store(dst[i]);
  }
}

void sum_slots(const OpContext& ctx, const float* slots, int64_t rows, int k, int64_t width, float* out) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = 0; i < width; ++i) {
      float sum = 0.0f;
      for (int slot = 0; slot < k; ++slot) sum += slots[(row * k + slot) * width + i];
      out[row * width + i] = ctx.store(sum);
    }
}

}  // namespace ls::compute
