// CPU attention of one stream's rows over its KV cache: per (row, head), keys in absolute position order, fp32 softmax.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/ops.h"

namespace ls::compute {
namespace {

inline float value_of(float v) { return v; }
inline float value_of(bf16 v) { return bf16_to_float(v); }

template <typename Cached>
float dot(const float* a, const Cached* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * value_of(b[i]);
  return sum;
}

// One query row and head: eager attention as transformers computes it (scores, scale, softmax, p @ v).
template <typename Cached>
void attend_one(const OpContext& ctx, const float* query, int64_t key_count, const Cached* keys, const Cached* values,
                const AttentionShape& shape, int kv_head, std::vector<float>& scores, float* out) {
  const int hd = shape.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * hd;
  scores.resize(key_count);
  float max_score = -INFINITY;
  for (int64_t j = 0; j < key_count; ++j) {
    const float raw = ctx.store(dot(query, keys + j * kv_stride + kv_head * hd, hd));
    scores[j] = ctx.store(raw * shape.scale);
    max_score = std::max(max_score, scores[j]);
  }
  float total = 0.0f;
  for (int64_t j = 0; j < key_count; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    total += scores[j];
  }
  for (int64_t j = 0; j < key_count; ++j) scores[j] = ctx.store(scores[j] / total);
  for (int d = 0; d < hd; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < key_count; ++j) {
    const float p = scores[j];
    const Cached* v = values + j * kv_stride + kv_head * hd;
    for (int d = 0; d < hd; ++d) out[d] += p * value_of(v[d]);
  }
  for (int d = 0; d < hd; ++d) out[d] = ctx.store(out[d]);
}

template <typename Cached>
void attention_over(const OpContext& ctx, const float* q, int64_t rows, int64_t first_position, const Cached* keys,
                    const Cached* values, const AttentionShape& shape, float* out) {
  const int group = shape.heads / shape.kv_heads;
  const int64_t items = rows * shape.heads;
  auto run = [&](int, int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / shape.heads;
      const int head = static_cast<int>(item % shape.heads);
      const int64_t offset = (row * shape.heads + head) * shape.head_dim;
      attend_one(ctx, q + offset, first_position + row + 1, keys, values, shape, head / group, scores, out + offset);
    }
  };
  if (ctx.pool)
    ctx.pool->parallel_for(items, run);
  else
    run(0, 0, items);
}

}  // namespace

void attention(const OpContext& ctx, const float* q, int64_t rows, int64_t first_position, const float* keys,
               const float* values, const AttentionShape& shape, float* out) {
  attention_over(ctx, q, rows, first_position, keys, values, shape, out);
}

void attention(const OpContext& ctx, const float* q, int64_t rows, int64_t first_position, const bf16* keys,
               const bf16* values, const AttentionShape& shape, float* out) {
  attention_over(ctx, q, rows, first_position, keys, values, shape, out);
}

}  // namespace ls::compute
