// The stateless CUDA ops against the CPU ops in Bf16 mode, and their batch invariance (the GEMM: cuda_gemm_test.cpp).
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "compute/cuda/kernels.h"
#include "compute/ops.h"
#include "compute/sampling.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace ls::cuda {
namespace {

using compute::NumericMode;
using compute::OpContext;
using compute::testing::random_values;

using testing::bf16_exact;
using testing::download;
using testing::poisoned;
using testing::to_bf16;
using testing::to_float;
using testing::upload;

// Distance in bf16 ulps between two bf16 values of the same sign (NaN = far).
int ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return 1 << 20;
  const bf16 x = float_to_bf16(a), y = float_to_bf16(b);
  auto ordered = [](uint16_t bits) { return (bits & 0x8000) ? -static_cast<int>(bits & 0x7fff) : static_cast<int>(bits); };
  return std::abs(ordered(x.bits) - ordered(y.bits));
}

struct UlpCount {
  int worst = 0;
  size_t exact = 0, total = 0;
};
UlpCount compare(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  UlpCount count;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const int d = std::memcmp(&gpu[i], &cpu[i], sizeof(float)) == 0 ? 0 : ulps(gpu[i], cpu[i]);
    count.worst = std::max(count.worst, d);
    count.exact += d == 0;
    ++count.total;
  }
  return count;
}

const OpContext kBf16{nullptr, NumericMode::Bf16};

// ---------------------------------------------------------------- row-wise ops

TEST(CudaOps, RmsNormMatchesTheCpuBf16OpWithinOneUlpAndRowsDoNotDependOnTheLaunch) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const auto& [rows, width] : std::vector<std::pair<int64_t, int>>{{37, 2048}, {300, 64}, {5, 1000}}) {
    const auto x_host = bf16_exact(random_values(rows * width, 31 + width, 3.0f));
    const auto w_host = bf16_exact(random_values(width, 32 + width, 2.0f));
    std::vector<float> cpu(rows * width);
    compute::rms_norm(kBf16, x_host.data(), rows, width, w_host.data(), 1e-5f, cpu.data());
    auto x = upload(to_bf16(x_host));
    auto w = upload(to_bf16(w_host));
    auto y = poisoned<bf16>(rows * width);
    ASSERT_TRUE(rms_norm(x.data(), rows, width, w.data(), 1e-5f, y.data(), nullptr).ok());
    const auto gpu = to_float(download(y, rows * width));
    // The sum of squares is a double tree here and a double chain on the CPU; both round to the same float mean
    // except at a rounding boundary, so one bf16 ulp is allowed (and the count of exact values is printed).
    const UlpCount count = compare(gpu, cpu);
    EXPECT_LE(count.worst, 1) << rows << "x" << width;
    std::printf("rms_norm %lldx%d: %zu/%zu bitwise equal to the CPU\n", static_cast<long long>(rows), width,
                count.exact, count.total);
    // One row launched alone is bitwise its row in the batch.
    auto y1 = poisoned<bf16>(width);
    const int64_t pick = rows / 2;
    ASSERT_TRUE(rms_norm(x.data() + pick * width, 1, width, w.data(), 1e-5f, y1.data(), nullptr).ok());
    const auto alone = to_float(download(y1, width));
    EXPECT_EQ(std::memcmp(alone.data(), gpu.data() + pick * width, sizeof(float) * width), 0);
  }
}

TEST(CudaOps, ResidualAddSumSlotsAndConversionsAreBitwiseTheCpuBf16Ops) {
  LS_SKIP_WITHOUT_DEVICE();
  const int64_t rows = 9, k = 4, width = 1030;
  const auto h_host = bf16_exact(random_values(rows * width, 41, 4.0f));
  const auto d_host = bf16_exact(random_values(rows * width, 42, 4.0f));
  std::vector<float> cpu = h_host;
  compute::add_residual(kBf16, cpu.data(), d_host.data(), rows * width);
  auto h = upload(to_bf16(h_host));
  auto d = upload(to_bf16(d_host));
  ASSERT_TRUE(add_residual(h.data(), d.data(), rows * width, nullptr).ok());
  EXPECT_EQ(compare(to_float(download(h, rows * width)), cpu).worst, 0);

  const auto slots_host = bf16_exact(random_values(rows * k * width, 43, 2.0f));
  std::vector<float> cpu_sum(rows * width);
  compute::sum_slots(kBf16, slots_host.data(), rows, k, width, cpu_sum.data());
  auto slots = upload(to_bf16(slots_host));
  auto out = poisoned<bf16>(rows * width);
  ASSERT_TRUE(sum_slots(slots.data(), rows, k, width, out.data(), nullptr).ok());
  EXPECT_EQ(compare(to_float(download(out, rows * width)), cpu_sum).worst, 0);

  const auto wide = random_values(5000, 44, 100.0f);  // not bf16-exact: rounding to nearest even is checked
  auto wide_dev = upload(wide);
  auto narrow = poisoned<bf16>(5000);
  auto back = poisoned<float>(5000);
  ASSERT_TRUE(f32_to_bf16(wide_dev.data(), 5000, narrow.data(), nullptr).ok());
  ASSERT_TRUE(bf16_to_f32(narrow.data(), 5000, back.data(), nullptr).ok());
  const auto gpu_back = download(back, 5000);
  for (size_t i = 0; i < wide.size(); ++i) ASSERT_EQ(gpu_back[i], round_to_bf16(wide[i])) << i;
}

TEST(CudaOps, SwigluOverStridedHalvesMatchesTheCpuBf16OpWithinOneUlp) {
  LS_SKIP_WITHOUT_DEVICE();
  const int64_t rows = 23;
  const int width = 1536;
  const auto both = bf16_exact(random_values(rows * 2 * width, 51, 6.0f));  // [rows, gate | up]
  std::vector<float> gate(rows * width), up(rows * width), cpu(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < width; ++i) {
      gate[r * width + i] = both[r * 2 * width + i];
      up[r * width + i] = both[r * 2 * width + width + i];
    }
  compute::swiglu(kBf16, gate.data(), up.data(), rows * width, cpu.data());
  auto in = upload(to_bf16(both));
  auto out = poisoned<bf16>(rows * width);
  ASSERT_TRUE(swiglu(in.data(), in.data() + width, rows, width, 2 * width, out.data(), nullptr).ok());
  // exp goes through double here (correctly rounded), glibc's expf is within 0.502 ulp: one bf16 ulp allowed.
  const UlpCount count = compare(to_float(download(out, rows * width)), cpu);
  EXPECT_LE(count.worst, 1);
  std::printf("swiglu: %zu/%zu bitwise equal to the CPU\n", count.exact, count.total);
}

TEST(CudaOps, EmbedRowsCopiesTableRowsAndWritesNanRowsForIdsOutOfRange) {
  LS_SKIP_WITHOUT_DEVICE();
  const int64_t vocab = 300;
  const int hidden = 96;
  const auto table_host = to_bf16(random_values(vocab * hidden, 61));
  const std::vector<int32_t> tokens = {5, 299, -1, 0, 300, 77};
  auto table = upload(table_host);
  auto ids = upload(tokens);
  auto out = poisoned<bf16>(tokens.size() * hidden);
  ASSERT_TRUE(embed_rows(table.data(), vocab, hidden, ids.data(), tokens.size(), out.data(), nullptr).ok());
  const auto gpu = download(out, tokens.size() * hidden);
  for (size_t r = 0; r < tokens.size(); ++r)
    for (int i = 0; i < hidden; ++i) {
      const bool valid = tokens[r] >= 0 && tokens[r] < vocab;
      if (valid)
        ASSERT_EQ(gpu[r * hidden + i].bits, table_host[tokens[r] * hidden + i].bits) << r;
      else
        ASSERT_TRUE(std::isnan(bf16_to_float(gpu[r * hidden + i]))) << r;
    }
}

TEST(CudaOps, RopeOnStridedRowsMatchesTheCpuBf16OpAndLeavesTheGapAlone) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const auto& [head_dim, theta] : std::vector<std::pair<int, double>>{{64, 1e6}, {128, 10000.0}}) {
    const int64_t rows = 41;
    const int heads = 6;
    const int64_t stride = heads * head_dim + 40;
    const compute::RopeTable table = compute::make_rope_table(head_dim, theta);
    std::vector<int64_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int64_t>(splitmix64(r + 71) % 130000);
    const auto buffer_host = bf16_exact(random_values(rows * stride, 72 + head_dim, 3.0f));
    std::vector<float> cpu(rows * heads * head_dim);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(cpu.data() + r * heads * head_dim, buffer_host.data() + r * stride, sizeof(float) * heads * head_dim);
    compute::rope_neox(kBf16, cpu.data(), rows, heads, positions.data(), table);
    auto x = upload(to_bf16(buffer_host));
    auto pos = upload(positions);
    auto freq = upload(table.inv_freq);
    ASSERT_TRUE(rope_neox(x.data(), rows, heads, head_dim, stride, pos.data(), freq.data(), nullptr).ok());
    const auto gpu = to_float(download(x, rows * stride));
    std::vector<float> rotated(rows * heads * head_dim);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(rotated.data() + r * heads * head_dim, gpu.data() + r * stride, sizeof(float) * heads * head_dim);
      for (int64_t i = heads * head_dim; i < stride; ++i) ASSERT_EQ(gpu[r * stride + i], buffer_host[r * stride + i]);
    }
    // cos/sin through double are the correctly rounded floats; the bf16-rounded tables match the CPU's.
    const UlpCount count = compare(rotated, cpu);
    EXPECT_EQ(count.worst, 0) << "head_dim " << head_dim << ": " << count.exact << "/" << count.total;
  }
}

TEST(CudaOps, RoutingMatchesTheCpuBf16OpIncludingTiesToTheLowerExpert) {
  LS_SKIP_WITHOUT_DEVICE();
  const int64_t rows = 70;
  for (const auto& [experts, k] : std::vector<std::pair<int, int>>{{32, 4}, {64, 8}, {200, 3}}) {
    auto logits_host = bf16_exact(random_values(rows * experts, 81 + experts, 4.0f));
    for (int64_t r = 0; r < rows; r += 3) logits_host[r * experts + 7] = logits_host[r * experts + 2];  // ties
    const auto bias_host = random_values(experts, 82, 0.1f);
    compute::RouterOptions options;
    options.experts = experts;
    options.experts_per_token = k;
    options.normalize = true;
    options.routed_scaling = 2.5f;
    options.expert_bias = bias_host.data();
    std::vector<int32_t> cpu_chosen(rows * k);
    std::vector<float> cpu_weights(rows * k);
    compute::route_experts(kBf16, logits_host.data(), rows, options, cpu_chosen.data(), cpu_weights.data());
    auto logits = upload(to_bf16(logits_host));
    auto bias = upload(bias_host);
    auto chosen = poisoned<int32_t>(rows * k);
    auto weights = poisoned<float>(rows * k);
    ASSERT_TRUE(route_experts(logits.data(), rows, experts, k, true, 2.5f, bias.data(), chosen.data(), weights.data(),
                              nullptr).ok());
    EXPECT_EQ(download(chosen, rows * k), cpu_chosen) << experts;
    const UlpCount count = compare(download(weights, rows * k), cpu_weights);
    EXPECT_LE(count.worst, 1) << experts;  // sigmoid's exp: as for swiglu
    // One row alone gives the same choice and weights bits.
    auto chosen1 = poisoned<int32_t>(k);
    auto weights1 = poisoned<float>(k);
    ASSERT_TRUE(route_experts(logits.data() + 5 * experts, 1, experts, k, true, 2.5f, bias.data(), chosen1.data(),
                              weights1.data(), nullptr).ok());
    const auto all_weights = download(weights, rows * k);
    EXPECT_EQ(std::memcmp(download(weights1, k).data(), all_weights.data() + 5 * k, sizeof(float) * k), 0);
  }
  EXPECT_EQ(route_experts(nullptr, 1, 4, 5, true, 1.0f, nullptr, nullptr, nullptr, nullptr).code(),
            ErrorCode::InvalidArgument);
}

// ---------------------------------------------------------------- sampler

TEST(CudaSampler, DrawsTheSameTokenAsTheCpuSamplerForRandomRowsAndSettings) {
  LS_SKIP_WITHOUT_DEVICE();
  for (const int vocab : {1000, 4099, 65536}) {
    const int64_t rows = vocab == 65536 ? 48 : 96;
    std::vector<float> logits = random_values(rows * vocab, 91 + vocab, 6.0f);
    std::vector<RowDraw> draws(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const uint64_t h = splitmix64(r * 7919 + vocab);
      RowDraw& d = draws[r];
      d.temperature = (h & 7) == 0 ? 0.0f : 0.4f + static_cast<float>((h >> 3) % 100) / 80.0f;
      d.top_k = std::vector<int>{0, 1, 40, 3000, 0, 0}[(h >> 10) % 6];
      d.top_p = std::vector<float>{1.0f, 0.9f, 0.5f, 0.98f}[(h >> 14) % 4];
      d.min_p = std::vector<float>{0.0f, 0.0f, 0.05f, 0.3f}[(h >> 18) % 4];
      d.seed = splitmix64(h);
      d.position = static_cast<int64_t>((h >> 24) % 5000);
      if (r % 11 == 3) logits[r * vocab + (h % vocab)] = std::nanf("");  // a NaN never wins
      if (r % 13 == 4) logits[r * vocab + 1] = logits[r * vocab] = 40.0f;  // a tie at the top
    }
    auto dev_logits = upload(logits);
    auto dev_draws = upload(draws);
    auto out = poisoned<int32_t>(rows);
    DrawScratch scratch;
    ASSERT_TRUE(scratch.reserve(rows, vocab).ok());
    ASSERT_TRUE(draw_rows(dev_logits.data(), rows, vocab, dev_draws.data(), out.data(), scratch, nullptr).ok());
    const auto gpu = download(out, rows);
    for (int64_t r = 0; r < rows; ++r) {
      const RowDraw& d = draws[r];
      const Sampling sampling{d.temperature, d.top_k, d.top_p, d.min_p, d.seed};
      const int32_t cpu = draw_token(std::span<const float>(logits.data() + r * vocab, vocab), sampling, d.position);
      EXPECT_EQ(gpu[r], cpu) << "vocab " << vocab << " row " << r << " T " << d.temperature << " top_k " << d.top_k
                             << " top_p " << d.top_p << " min_p " << d.min_p;
    }
  }
}

TEST(CudaSampler, AllNanRowsDrawTokenZeroLikeTheCpu) {
  LS_SKIP_WITHOUT_DEVICE();
  const int vocab = 777;
  std::vector<float> logits(2 * vocab, std::nanf(""));
  std::vector<RowDraw> draws(2);
  draws[1].temperature = 0.8f;
  draws[1].top_p = 0.9f;
  auto dev_logits = upload(logits);
  auto dev_draws = upload(draws);
  auto out = poisoned<int32_t>(2);
  DrawScratch scratch;
  ASSERT_TRUE(draw_rows(dev_logits.data(), 2, vocab, dev_draws.data(), out.data(), scratch, nullptr).ok());
  EXPECT_EQ(download(out, 2), (std::vector<int32_t>{0, 0}));
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
