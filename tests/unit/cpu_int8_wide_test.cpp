// matmul_int8_vnni's wide tiles (set_int8_wide_tiles: 8 panels a tile at one or two rows) give the narrow tiles' bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/draft_ops.h"

namespace ls::compute {
namespace {

TEST(CpuInt8Wide, WideTilesGiveTheNarrowTilesBitsForEveryShape) {
  if (!cpu_features().avx512_vnni) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  ThreadPool pool(2);
  const bool saved = int8_wide_tiles();
  std::mt19937 rng(4242);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  int compared = 0;
  // Columns: one partial panel, a partial wide tile, the nano's FFN and head; K with a tail past a multiple of 4.
  for (int64_t n : {16, 40, 130, 1152, 8192}) {
    for (int64_t k : {64, 383, 384}) {
      std::vector<int8_t> codes(static_cast<size_t>(n * k));
      std::vector<float> scales(static_cast<size_t>(n));
      for (int8_t& c : codes) c = static_cast<int8_t>(std::lround(uniform(rng) * 127));
      for (float& s : scales) s = 0.01f + 0.02f * std::fabs(uniform(rng));
      std::vector<int32_t> sums(static_cast<size_t>(n));
      sum_int8_codes(codes.data(), n, k, sums.data());
      const std::vector<int8_t> panels = pack_int8_panels(codes.data(), n, k);
      const Int8Matrix w{nullptr, scales.data(), n, k, sums.data(), panels.data()};
      for (int64_t rows : {1, 2, 3}) {
        std::vector<float> x(static_cast<size_t>(rows * k));
        for (float& v : x) v = uniform(rng) * 3.0f;
        for (const OpContext& ctx : {OpContext{}, OpContext{&pool, NumericMode::Bf16}}) {
          std::vector<float> narrow(static_cast<size_t>(rows * n), std::numeric_limits<float>::quiet_NaN());
          std::vector<float> wide(narrow.size(), -std::numeric_limits<float>::infinity());  // poisoned apart
          set_int8_wide_tiles(false);
          ASSERT_TRUE(matmul_int8_vnni(ctx, x.data(), rows, w, narrow.data()));
          set_int8_wide_tiles(true);
          ASSERT_TRUE(matmul_int8_vnni(ctx, x.data(), rows, w, wide.data()));
          set_int8_wide_tiles(saved);
          for (float v : narrow) ASSERT_TRUE(std::isfinite(v)) << "every output written";
          EXPECT_EQ(std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float)), 0)
              << "n " << n << " k " << k << " rows " << rows;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 3 * 3 * 2);
}

}  // namespace
}  // namespace ls::compute
