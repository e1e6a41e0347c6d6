// Tests for attention over a KV cache: causal GQA against a double reference; rows equal one-row runs bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "compute/cpu/cpu_features.h"
#include "compute/cpu/simd_avx512.h"

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

// The LFM2 head size (64: four 16-lane vectors) over 77 keys (a partial 16-key chunk), with the AVX-512 path and with
// the scalar loop forced: both match the double reference, and rows alone equal rows in a window, bitwise.
TEST(OpsAttention, HeadDim64MatchesTheReferenceAndIsBatchInvariantOnEveryPath) {
  constexpr AttentionShape shape{4, 2, 64, 0.125f};
  ThreadPool pool(2);
  const int64_t positions = 77, rows = 8, first = positions - rows;
  const int kv_width = shape.kv_heads * shape.head_dim, q_width = shape.heads * shape.head_dim;
  const std::vector<float> keys = stored(random_values(positions * kv_width, 21, 2.0f), NumericMode::Bf16);
  const std::vector<float> values = stored(random_values(positions * kv_width, 22), NumericMode::Bf16);
  const std::vector<float> q = stored(random_values(rows * q_width, 23, 2.0f), NumericMode::Bf16);
  for (bool scalar : {false, true}) {
    std::optional<CpuFeaturesOverride> forced;
    if (scalar) forced.emplace(CpuFeatures{cpu_features().avx2_fma, false, false});
    for (NumericMode mode : kModes) {
      const OpContext ctx{&pool, mode};
      std::vector<float> window = poisoned(rows * q_width);
      attention(ctx, q.data(), rows, first, keys.data(), values.data(), shape, window.data());
      ASSERT_TRUE(all_finite(window));
      // the double reference, inline for this shape
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int h = 0; h < shape.heads; ++h) {
          const int g = h / (shape.heads / shape.kv_heads);
          const int64_t count = first + r + 1;
          std::vector<double> p(count);
          double max_score = -1e300, total = 0;
          for (int64_t j = 0; j < count; ++j) {
            double dot = 0;
            for (int d = 0; d < shape.head_dim; ++d)
              dot += double(q[(r * shape.heads + h) * shape.head_dim + d]) * keys[(j * shape.kv_heads + g) * shape.head_dim + d];
            max_score = std::max(max_score, p[j] = dot * shape.scale);
          }
          for (double& s : p) total += (s = std::exp(s - max_score));
          for (int d = 0; d < shape.head_dim; ++d) {
            double out = 0;
            for (int64_t j = 0; j < count; ++j) out += p[j] / total * values[(j * shape.kv_heads + g) * shape.head_dim + d];
            const double got = window[(r * shape.heads + h) * shape.head_dim + d];
            worst = std::max(worst, std::abs(got - out) / std::max(std::abs(out), 0.1));
          }
        }
      EXPECT_LE(worst, mode == NumericMode::Bf16 ? 0.05 : 1e-5) << mode_name(mode) << (scalar ? " scalar" : " avx512");
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> alone = poisoned(q_width);
        attention(ctx, q.data() + r * q_width, 1, first + r, keys.data(), values.data(), shape, alone.data());
        EXPECT_TRUE(bitwise_equal(alone.data(), window.data() + r * q_width, q_width))
            << mode_name(mode) << (scalar ? " scalar" : " avx512") << " row " << r;
      }
    }
  }
}

TEST(OpsAttention, ABlockRowAttendsOverEveryKeyWithTheBitsOfItsOneRowCallAtTheLastPosition) {
  constexpr AttentionShape shape{6, 2, 64, 0.125f};
  ThreadPool pool(2);
  const int64_t key_count = 41, rows = 7;
  const int kv_width = shape.kv_heads * shape.head_dim, q_width = shape.heads * shape.head_dim;
  for (bool scalar : {false, true}) {
    std::optional<CpuFeaturesOverride> forced;
    if (scalar) forced.emplace(CpuFeatures{cpu_features().avx2_fma, false, false});
    for (NumericMode mode : kModes) {
      const OpContext ctx{&pool, mode};
      const std::vector<float> keys = stored(random_values(key_count * kv_width, 31, 2.0f), mode);
      const std::vector<float> values = stored(random_values(key_count * kv_width, 32), mode);
      const std::vector<float> q = stored(random_values(rows * q_width, 33, 2.0f), mode);
      std::vector<float> block = poisoned(rows * q_width);
      attention_block(ctx, q.data(), rows, key_count, keys.data(), values.data(), shape, block.data());
      ASSERT_TRUE(all_finite(block));
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> alone = poisoned(q_width);
        attention(ctx, q.data() + r * q_width, 1, key_count - 1, keys.data(), values.data(), shape, alone.data());
        EXPECT_TRUE(bitwise_equal(alone.data(), block.data() + r * q_width, q_width))
            << mode_name(mode) << (scalar ? " scalar" : " avx512") << " row " << r;
      }
      // The first row differs from a causal window's first row (it sees keys after its own position).
      std::vector<float> causal = poisoned(rows * q_width);
      attention(ctx, q.data(), rows, key_count - rows, keys.data(), values.data(), shape, causal.data());
      EXPECT_FALSE(bitwise_equal(causal.data(), block.data(), q_width)) << mode_name(mode);
    }
  }
}

// The vector path runs the query heads of one KV head together (their value sums side by side) and scores keys eight
// at a time. Each head must still get the bits of a one-head call: shapes with 1..5 heads per KV head, head sizes 64
// and 128 (the register paths) and 48 (the general one), key counts 1..19 (every remainder of the 8-key groups).
TEST(OpsAttention, EveryHeadGetsTheBitsOfItsOwnOneHeadCallWhateverItsGroupSize) {
  for (int head_dim : {48, 64, 128})
    for (int group = 1; group <= 5; ++group) {
      const AttentionShape shape{2 * group, 2, head_dim, 0.125f};
      const AttentionShape one{1, 1, head_dim, 0.125f};
      for (int64_t key_count : {1, 7, 8, 9, 16, 19}) {
        const int kv_width = shape.kv_heads * head_dim, q_width = shape.heads * head_dim;
        const std::vector<float> keys = stored(random_values(key_count * kv_width, 41 + key_count, 2.0f), NumericMode::Bf16);
        const std::vector<float> values = stored(random_values(key_count * kv_width, 42 + key_count), NumericMode::Bf16);
        const std::vector<float> q = stored(random_values(q_width, 43 + group, 2.0f), NumericMode::Bf16);
        std::vector<float> all = poisoned(q_width);
        attention_block(OpContext{}, q.data(), 1, key_count, keys.data(), values.data(), shape, all.data());
        ASSERT_TRUE(all_finite(all));
        for (int h = 0; h < shape.heads; ++h) {
          const int kv = h / group;
          std::vector<float> head_keys, head_values;  // [key_count, head_dim] of KV head kv
          for (int64_t j = 0; j < key_count; ++j) {
            head_keys.insert(head_keys.end(), keys.begin() + j * kv_width + kv * head_dim,
                             keys.begin() + j * kv_width + (kv + 1) * head_dim);
            head_values.insert(head_values.end(), values.begin() + j * kv_width + kv * head_dim,
                               values.begin() + j * kv_width + (kv + 1) * head_dim);
          }
          std::vector<float> alone = poisoned(head_dim);
          attention_block(OpContext{}, q.data() + h * head_dim, 1, key_count, head_keys.data(), head_values.data(),
                          one, alone.data());
          EXPECT_TRUE(bitwise_equal(alone.data(), all.data() + h * head_dim, head_dim))
              << "head_dim " << head_dim << " group " << group << " keys " << key_count << " head " << h;
        }
      }
    }
}

LS_TARGET_AVX512 void reduce_both_ways(const float* values, float* one_by_one, float* eight_at_once) {
  __m512 v[8];
  for (int j = 0; j < 8; ++j) {
    v[j] = _mm512_loadu_ps(values + 16 * j);
    one_by_one[j] = simd::reduce_lanes(v[j]);
  }
  _mm256_storeu_ps(eight_at_once, simd::reduce_lanes8(v));
}

TEST(OpsAttention, TheEightVectorLaneTreeGivesTheBitsOfTheOneVectorTree) {
  if (!cpu_features().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (uint64_t seed = 0; seed < 50; ++seed) {
    // values of mixed magnitudes, so that a different order of additions rounds differently
    std::vector<float> values = random_values(128, 51 + seed);
    for (size_t i = 0; i < values.size(); i += 3) values[i] *= 1e4f;
    std::vector<float> one(8, 0.0f), eight = poisoned(8);
    reduce_both_ways(values.data(), one.data(), eight.data());
    EXPECT_TRUE(bitwise_equal(one.data(), eight.data(), 8)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace ls::compute
