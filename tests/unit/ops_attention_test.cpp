// Tests for attention over a KV cache: causal GQA against a double reference; rows equal one-row runs bitwise.
#include <gtest/gtest.h>

#include <cmath>

#include "base/thread_pool.h"
#include "ops_test_util.h"

namespace ls::compute {
namespace {
using namespace testing;

constexpr AttentionShape kShape{4, 2, 16, 0.25f};

std::vector<double> reference_attention(const std::vector<float>& q, int64_t rows, int64_t first_position,
                                        const std::vector<float>& keys, const std::vector<float>& values) {
  const int H = kShape.heads, KV = kShape.kv_heads, hd = kShape.head_dim;
  std::vector<double> out(rows * H * hd, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / KV);
      const int64_t count = first_position + r + 1;
      std::vector<double> scores(count);
      double max_score = -1e300, total = 0;
      for (int64_t j = 0; j < count; ++j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += double(q[(r * H + h) * hd + d]) * keys[(j * KV + g) * hd + d];
        scores[j] = dot * kShape.scale;
        max_score = std::max(max_score, scores[j]);
      }
      for (double& s : scores) total += (s = std::exp(s - max_score));
      for (int64_t j = 0; j < count; ++j)
        for (int d = 0; d < hd; ++d) out[(r * H + h) * hd + d] += scores[j] / total * values[(j * KV + g) * hd + d];
    }
  return out;
}

TEST(OpsAttention, CausalGqaMatchesADoubleReferenceInBothModes) {
  ThreadPool pool(2);
  for (NumericMode mode : kModes) {
    const int64_t positions = 40, rows = 6, first = positions - rows;
    const int kv_width = kShape.kv_heads * kShape.head_dim, q_width = kShape.heads * kShape.head_dim;
    const std::vector<float> keys = stored(random_values(positions * kv_width, 1, 2.0f), mode);
    const std::vector<float> values = stored(random_values(positions * kv_width, 2), mode);
    const std::vector<float> q = stored(random_values(rows * q_width, 3, 2.0f), mode);
    std::vector<float> out = poisoned(rows * q_width);
    attention(OpContext{&pool, mode}, q.data(), rows, first, keys.data(), values.data(), kShape, out.data());
    ASSERT_TRUE(all_finite(out));
    EXPECT_LE(max_relative_error(out, reference_attention(q, rows, first, keys, values), 0.1),
              mode == NumericMode::Bf16 ? 0.05 : 1e-5)
        << mode_name(mode);
  }
}

TEST(OpsAttention, ARowAttendsOnlyToKeysAtOrBeforeItsPosition) {
  const int64_t positions = 10;
  const int kv_width = kShape.kv_heads * kShape.head_dim, q_width = kShape.heads * kShape.head_dim;
  std::vector<float> keys = random_values(positions * kv_width, 4), values = random_values(positions * kv_width, 5);
  const std::vector<float> q = random_values(q_width, 6);
  std::vector<float> before = poisoned(q_width), after = poisoned(q_width);
  attention(OpContext{}, q.data(), 1, 4, keys.data(), values.data(), kShape, before.data());
  for (int64_t i = 5 * kv_width; i < positions * kv_width; ++i) keys[i] = values[i] = 1e6f;  // future positions
  attention(OpContext{}, q.data(), 1, 4, keys.data(), values.data(), kShape, after.data());
  EXPECT_TRUE(bitwise_equal(before.data(), after.data(), q_width));
}

TEST(OpsAttention, RowsAreBitIdenticalAloneInWindowsAndInA64RowBatch) {
  ThreadPool pool(2);
  for (NumericMode mode : kModes) {
    const int64_t positions = 80, base = 16;  // the 64 query rows sit at positions 16 .. 79
    const int kv_width = kShape.kv_heads * kShape.head_dim, q_width = kShape.heads * kShape.head_dim;
    const std::vector<float> keys = stored(random_values(positions * kv_width, 7), mode);
    const std::vector<float> values = stored(random_values(positions * kv_width, 8), mode);
    const std::vector<float> q = stored(random_values(64 * q_width, 9), mode);
    EXPECT_EQ(rows_differing_from_one_row_runs(q, q_width, q_width,
                                               [&](const float* in, int64_t rows, float* out) {
                                                 const int64_t first = base + (in - q.data()) / q_width;
                                                 attention(OpContext{&pool, mode}, in, rows, first, keys.data(),
                                                           values.data(), kShape, out);
                                               }),
              0)
        << mode_name(mode);
  }
}

}  // namespace
}  // namespace ls::compute

namespace ls::compute {
namespace {
using namespace testing;

TEST(OpsAttention, ABf16CacheGivesTheBitsOfAnFp32CacheHoldingTheSameValues) {
  ThreadPool pool(2);
  const int64_t positions = 30, rows = 5, first = positions - rows;
  const int kv_width = kShape.kv_heads * kShape.head_dim, q_width = kShape.heads * kShape.head_dim;
  const std::vector<float> keys = stored(random_values(positions * kv_width, 11), NumericMode::Bf16);
  const std::vector<float> values = stored(random_values(positions * kv_width, 12), NumericMode::Bf16);
  std::vector<bf16> keys_b16, values_b16;
  for (float v : keys) keys_b16.push_back(float_to_bf16(v));
  for (float v : values) values_b16.push_back(float_to_bf16(v));
  const std::vector<float> q = stored(random_values(rows * q_width, 13), NumericMode::Bf16);
  std::vector<float> from_f32 = poisoned(rows * q_width), from_b16 = poisoned(rows * q_width);
  const OpContext ctx{&pool, NumericMode::Bf16};
  attention(ctx, q.data(), rows, first, keys.data(), values.data(), kShape, from_f32.data());
  attention(ctx, q.data(), rows, first, keys_b16.data(), values_b16.data(), kShape, from_b16.data());
  EXPECT_TRUE(all_finite(from_b16));
  EXPECT_TRUE(bitwise_equal(from_f32.data(), from_b16.data(), from_f32.size()));
}

}  // namespace
}  // namespace ls::compute
