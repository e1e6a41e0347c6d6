// CPU attention of one stream's rows over its KV cache: per (row, head), keys in absolute position order, fp32 softmax.
// AVX-512 when present (one fixed order per row: 16-lane dots with the fixed lane tree, sums over keys in 16-key
// chunks), the scalar loop otherwise; a bf16 cache is widened to fp32, so it gives the bits of an fp32 cache.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "base/check.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/simd_avx512.h"
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

constexpr int kMaxVectorHeadDim = 256;  // q of one head held in 16 registers at most

// The raw scores of a KV head's query heads together (default) or one head at a time (LS_CPU_ATTN_GROUPED=0 at start,
// for A/B timing; the same bits).
bool grouped_scores() {
  static const bool grouped = [] {
    const char* text = std::getenv("LS_CPU_ATTN_GROUPED");
    return !(text && text[0] == '0');
  }();
  return grouped;
}

// out [G, 16 * V] = store(sum over keys j in order of p[g][j] * value_j) for G heads sharing one KV head: G * V
// accumulators in registers (independent chains), each value vector loaded once for all G heads.
template <int V, int G, typename Cached>
LS_TARGET_AVX512 void weigh_values(bool round, const float* p, int64_t p_stride, int64_t key_count,
                                   const Cached* value, int64_t kv_stride, float* out) {
  using namespace simd;
  __m512 acc[G][V];
  #pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
    #pragma GCC unroll 16
    for (int i = 0; i < V; ++i) acc[g][i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < key_count; ++j, value += kv_stride) {
    __m512 weight[G];
    #pragma GCC unroll 16
    for (int g = 0; g < G; ++g) weight[g] = _mm512_set1_ps(p[g * p_stride + j]);
    #pragma GCC unroll 16
    for (int i = 0; i < V; ++i) {
      const __m512 v = load16(value + 16 * i, 0xffff);
      #pragma GCC unroll 16
      for (int g = 0; g < G; ++g) acc[g][i] = _mm512_fmadd_ps(weight[g], v, acc[g][i]);
    }
  }
  #pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
    #pragma GCC unroll 16
    for (int i = 0; i < V; ++i) _mm512_storeu_ps(out + g * 16 * V + 16 * i, store16(round, acc[g][i]));
}

// The same weighting for any head size (multiple of 16): one head, accumulators in memory.
template <typename Cached>
LS_TARGET_AVX512 void weigh_values_any(bool round, int vectors, const float* p, int64_t key_count, const Cached* value,
                                       int64_t kv_stride, float* out) {
  using namespace simd;
  __m512 acc[kMaxVectorHeadDim / 16];
  for (int i = 0; i < vectors; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < key_count; ++j, value += kv_stride) {
    const __m512 weight = _mm512_set1_ps(p[j]);
    for (int i = 0; i < vectors; ++i) acc[i] = _mm512_fmadd_ps(weight, load16(value + 16 * i, 0xffff), acc[i]);
  }
  for (int i = 0; i < vectors; ++i) _mm512_storeu_ps(out + 16 * i, store16(round, acc[i]));
}

// p [key_count] = one query head's raw scores q . k over the keys: eight keys at a time (eight independent chains, one
// shuffled lane tree for all eight: the bits of reduce_lanes of each), then the keys left one at a time.
template <typename Cached>
LS_TARGET_AVX512 void raw_scores_avx512(const float* query, int64_t key_count, const Cached* keys,
                                        const AttentionShape& shape, int kv_head, float* p) {
  using namespace simd;
  const int hd = shape.head_dim, vectors = hd / 16;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * hd;
  __m512 q[kMaxVectorHeadDim / 16];
  for (int i = 0; i < vectors; ++i) q[i] = _mm512_loadu_ps(query + 16 * i);
  const Cached* key = keys + kv_head * hd;
  int64_t j = 0;
  for (; j + 8 <= key_count; j += 8, key += 8 * kv_stride) {
    __m512 acc[8];
    #pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) acc[n] = _mm512_mul_ps(q[0], load16(key + n * kv_stride, 0xffff));
    for (int i = 1; i < vectors; ++i)
      #pragma GCC unroll 8
      for (int n = 0; n < 8; ++n) acc[n] = _mm512_fmadd_ps(q[i], load16(key + n * kv_stride + 16 * i, 0xffff), acc[n]);
    _mm256_storeu_ps(p + j, reduce_lanes8(acc));
  }
  for (; j < key_count; ++j, key += kv_stride) {
    __m512 acc = _mm512_mul_ps(q[0], load16(key, 0xffff));
    for (int i = 1; i < vectors; ++i) acc = _mm512_fmadd_ps(q[i], load16(key + 16 * i, 0xffff), acc);
    p[j] = reduce_lanes(acc);
  }
}

// The raw scores of G query heads (query, query + hd, ...) sharing KV head kv_head, into p + g * p_stride: each key
// vector loaded (and widened) once for all G heads, each (head, key) the same products in the same order as
// raw_scores_avx512's, so the same bits.
template <int G, typename Cached>
LS_TARGET_AVX512 void grouped_raw_scores_avx512(const float* query, int64_t key_count, const Cached* keys,
                                                const AttentionShape& shape, int kv_head, float* p, int64_t p_stride) {
  using namespace simd;
  const int hd = shape.head_dim, vectors = hd / 16;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * hd;
  const Cached* key = keys + kv_head * hd;
  int64_t j = 0;
  for (; j + 8 <= key_count; j += 8, key += 8 * kv_stride) {
    __m512 acc[G][8];
    #pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) {
      const __m512 k = load16(key + n * kv_stride, 0xffff);
      #pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[g][n] = _mm512_mul_ps(_mm512_loadu_ps(query + g * hd), k);
    }
    for (int i = 1; i < vectors; ++i)
      #pragma GCC unroll 8
      for (int n = 0; n < 8; ++n) {
        const __m512 k = load16(key + n * kv_stride + 16 * i, 0xffff);
        #pragma GCC unroll 4
        for (int g = 0; g < G; ++g) acc[g][n] = _mm512_fmadd_ps(_mm512_loadu_ps(query + g * hd + 16 * i), k, acc[g][n]);
      }
    #pragma GCC unroll 4
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(p + g * p_stride + j, reduce_lanes8(acc[g]));
  }
  for (; j < key_count; ++j, key += kv_stride)
    for (int g = 0; g < G; ++g) {
      const float* qg = query + g * hd;
      __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qg), load16(key, 0xffff));
      for (int i = 1; i < vectors; ++i)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * i), load16(key + 16 * i, 0xffff), acc);
      p[g * p_stride + j] = reduce_lanes(acc);
    }
}

// p [key_count] (raw scores in, padded to a multiple of 16) = their softmax as eager attention computes it: scores =
// store(store(raw) * scale); max; exp(s - max) summed in 16 lanes over 16-key chunks; p = store(e / total).
LS_TARGET_AVX512 void softmax_scores_avx512(bool round, int64_t key_count, const AttentionShape& shape, float* p) {
  using namespace simd;
  const __m512 scale = _mm512_set1_ps(shape.scale);
  __m512 max16 = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < key_count; j += 16) {
    const __mmask16 mask = first_lanes(key_count - j);
    const __m512 s = store16(round, _mm512_mul_ps(store16(round, load16(p + j, mask)), scale));
    _mm512_storeu_ps(p + j, s);
    max16 = _mm512_mask_max_ps(max16, mask, max16, s);
  }
  const __m512 max_score = _mm512_set1_ps(_mm512_reduce_max_ps(max16));
  __m512 total16 = _mm512_setzero_ps();
  for (int64_t j = 0; j < key_count; j += 16) {
    const __mmask16 mask = first_lanes(key_count - j);
    const __m512 e = _mm512_maskz_mov_ps(mask, exp16(_mm512_sub_ps(_mm512_loadu_ps(p + j), max_score)));
    _mm512_storeu_ps(p + j, e);
    total16 = _mm512_add_ps(total16, e);
  }
  const __m512 total = _mm512_set1_ps(reduce_lanes(total16));
  for (int64_t j = 0; j < key_count; j += 16)
    _mm512_storeu_ps(p + j, store16(round, _mm512_div_ps(_mm512_loadu_ps(p + j), total)));
}

// The eager attention of `heads` consecutive query heads of one row that share KV head `kv_head`: each head's
// weights, then their values (the heads together where their accumulators fit in registers). Every head gets the
// bits it gets alone.
template <typename Cached>
LS_TARGET_AVX512 void attend_heads_avx512(const OpContext& ctx, const float* query, int heads, int64_t key_count,
                                          const Cached* keys, const Cached* values, const AttentionShape& shape,
                                          int kv_head, std::vector<float>& scores, float* out) {
  const int hd = shape.head_dim, vectors = hd / 16;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * hd;
  const bool round = ctx.rounds_to_bf16();
  const int64_t padded = (key_count + 15) / 16 * 16;
  scores.resize(heads * padded);
  // Raw scores: the group's heads together where their 8 x G accumulators fit in registers (G <= 3), else one by one.
  if (heads == 3 && grouped_scores())
    grouped_raw_scores_avx512<3>(query, key_count, keys, shape, kv_head, scores.data(), padded);
  else if (heads == 2 && grouped_scores())
    grouped_raw_scores_avx512<2>(query, key_count, keys, shape, kv_head, scores.data(), padded);
  else
    for (int g = 0; g < heads; ++g)
      raw_scores_avx512(query + g * hd, key_count, keys, shape, kv_head, scores.data() + g * padded);
  for (int g = 0; g < heads; ++g) softmax_scores_avx512(round, key_count, shape, scores.data() + g * padded);
  const Cached* value = values + kv_head * hd;
  const float* p = scores.data();
  if (vectors == 4) {
    int g = 0;
    for (; g + 4 <= heads; g += 4) weigh_values<4, 4>(round, p + g * padded, padded, key_count, value, kv_stride, out + g * hd);
    switch (heads - g) {
      case 3: return weigh_values<4, 3>(round, p + g * padded, padded, key_count, value, kv_stride, out + g * hd);
      case 2: return weigh_values<4, 2>(round, p + g * padded, padded, key_count, value, kv_stride, out + g * hd);
      case 1: return weigh_values<4, 1>(round, p + g * padded, padded, key_count, value, kv_stride, out + g * hd);
      default: return;
    }
  }
  if (vectors == 8) {
    int g = 0;
    for (; g + 2 <= heads; g += 2) weigh_values<8, 2>(round, p + g * padded, padded, key_count, value, kv_stride, out + g * hd);
    if (g < heads) weigh_values<8, 1>(round, p + g * padded, padded, key_count, value, kv_stride, out + g * hd);
    return;
  }
  for (int g = 0; g < heads; ++g)
    weigh_values_any(round, vectors, p + g * padded, key_count, value, kv_stride, out + g * hd);
}

// Row r attends over keys 0 .. first_position + r (causal), or over keys 0 .. key_count - 1 for every row when
// key_count > 0 (a bidirectional block): each (row, head) is the same attend_one call either way.
template <typename Cached>
void attention_over(const OpContext& ctx, const float* q, int64_t rows, int64_t first_position, const Cached* keys,
                    const Cached* values, const AttentionShape& shape, float* out, int64_t key_count = 0) {
  const int group = shape.heads / shape.kv_heads;
  const bool vector = cpu_features().avx512 && shape.head_dim % 16 == 0 && shape.head_dim <= kMaxVectorHeadDim;
  // Work items: (row, head), or (row, KV head) with its query heads together on the vector path.
  const int per_item = vector ? group : 1;
  const int64_t items = rows * (shape.heads / per_item);
  auto run = [&](int, int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / (shape.heads / per_item);
      const int head = static_cast<int>(item % (shape.heads / per_item)) * per_item;
      const int64_t offset = (row * shape.heads + head) * shape.head_dim;
      const int64_t keys_seen = key_count > 0 ? key_count : first_position + row + 1;
      if (vector)
        attend_heads_avx512(ctx, q + offset, group, keys_seen, keys, values, shape, head / group, scores,
                            out + offset);
      else
        attend_one(ctx, q + offset, keys_seen, keys, values, shape, head / group, scores, out + offset);
    }
  };
  // Items are claimed one at a time (parallel_chunks): a worker that is late (or preempted on a busy host) costs
  // its items' time, not a wait for it at the end; each item's bits do not depend on who runs it.
  if (ctx.pool)
    ctx.pool->parallel_chunks(items, run);
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

void attention_block(const OpContext& ctx, const float* q, int64_t rows, int64_t key_count, const float* keys,
                     const float* values, const AttentionShape& shape, float* out) {
  if (rows <= 0) return;
  LS_CHECK(key_count > 0, "a block attends over at least one key");
  attention_over(ctx, q, rows, 0, keys, values, shape, out, key_count);
}

}  // namespace ls::compute
