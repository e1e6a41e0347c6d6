// The split draw (cuda::SamplerKernel::Split, session 10) against draw_token on fresh random rows: every filter mix
// (top-k inside and past the merged sets, top-p, min-p), NaN logits, ties at the top, all-NaN rows, vocabularies of
// one and of several chunks (and a last chunk not a multiple of four), several row counts on one scratch (each row's
// ticket must be left at zero), a scratch too small (the bounded kernel takes over); and the opt-in timing of the
// bounded and split kernels per setting and row count (DISABLED_, run with --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "base/hash.h"
#include "compute/sampling.h"

#ifdef LS_HAVE_CUDA
#include "compute/cuda/kernels.h"
#include "cuda_sampler_pin.h"
#include "cuda_test_util.h"

namespace ls {
namespace {

using cuda::DrawScratch;
using cuda::RowDraw;
using cuda::SamplerKernel;
using namespace cuda::testing;  // upload, poisoned, download, ScopedSamplerKernel

// Rows of one kind each: continuous wide logits (0..spread), flat ones (within 1e-3), or few distinct values (ties).
std::vector<float> random_rows(int rows, int vocab, uint64_t seed) {
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (int r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(splitmix64(seed + r) % 3);
    for (int i = 0; i < vocab; ++i) {
      const double u = uniform_open01(splitmix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(r) * vocab + i));
      logits[static_cast<size_t>(r) * vocab + i] = kind == 0   ? static_cast<float>(u * 14.0 - 4.0)
                                                   : kind == 1 ? static_cast<float>(0.01 + u * 1e-3)
                                                               : static_cast<float>(std::floor(u * 6.0));
    }
  }
  return logits;
}

// Settings by row: greedy, temperature only, top-k of 1 / 8 / 40 / 64 (merged) and 65 / 3000 (the whole row),
// top-p 0.5 / 0.9 / 0.98, min-p 0.05 / 0.3 / 1.5 (nothing survives), mixed.
std::vector<RowDraw> random_draws(int rows, uint64_t seed) {
  std::vector<RowDraw> draws(rows);
  for (int r = 0; r < rows; ++r) {
    const uint64_t h = splitmix64(seed * 7919 + r);
    RowDraw& d = draws[r];
    d.temperature = (h & 7) == 0 ? 0.0f : 0.4f + static_cast<float>((h >> 3) % 100) / 80.0f;
    d.top_k = std::vector<int>{0, 1, 8, 40, 64, 65, 3000, 0, 0}[(h >> 10) % 9];
    d.top_p = std::vector<float>{1.0f, 0.9f, 0.5f, 0.98f}[(h >> 14) % 4];
    d.min_p = std::vector<float>{0.0f, 0.0f, 0.05f, 0.3f, 0.0f, 1.5f}[(h >> 18) % 6];
    d.seed = splitmix64(h);
    d.position = static_cast<int64_t>((h >> 24) % 5000);
  }
  return draws;
}

std::vector<int32_t> cpu_draws(const std::vector<float>& logits, const std::vector<RowDraw>& draws, int vocab) {
  std::vector<int32_t> out;
  for (size_t r = 0; r < draws.size(); ++r) {
    const RowDraw& d = draws[r];
    const Sampling sampling{d.temperature, d.top_k, d.top_p, d.min_p, d.seed};
    out.push_back(draw_token(std::span<const float>(logits.data() + r * vocab, vocab), sampling, d.position));
  }
  return out;
}

std::string describe(const RowDraw& d) {
  return "T " + std::to_string(d.temperature) + " top_k " + std::to_string(d.top_k) + " top_p " +
         std::to_string(d.top_p) + " min_p " + std::to_string(d.min_p);
}

TEST(CudaSamplerSplit, RandomRowsDrawTheCpuTokenAtOneAndSeveralChunksAndRowCountsOnOneScratch) {
  LS_SKIP_WITHOUT_DEVICE();
  ScopedSamplerKernel pin(SamplerKernel::Split);
  for (const int vocab : {1000, 4099, 8195, 65536}) {
    const int rows = vocab == 65536 ? 40 : 72;
    std::vector<float> logits = random_rows(rows, vocab, 31 + vocab);
    std::vector<RowDraw> draws = random_draws(rows, 5 + vocab);
    for (int r = 0; r < rows; ++r) {
      const uint64_t h = splitmix64(r + 77);
      if (r % 11 == 3) logits[static_cast<size_t>(r) * vocab + h % vocab] = std::nanf("");  // a NaN never wins
      if (r % 13 == 4) logits[static_cast<size_t>(r) * vocab + 1] = logits[static_cast<size_t>(r) * vocab] = 40.0f;
      if (r % 17 == 5)  // a chunk of NaN
        std::fill_n(logits.begin() + static_cast<size_t>(r) * vocab, std::min(vocab, 4096), std::nanf(""));
    }
    const std::vector<int32_t> cpu = cpu_draws(logits, draws, vocab);
    auto dev_logits = upload(logits);
    auto dev_draws = upload(draws);
    DrawScratch scratch;
    ASSERT_TRUE(scratch.reserve(rows, vocab).ok());
    // The whole batch twice, then its tail alone, on one scratch: every row's ticket is back at zero after a draw.
    for (const int first : {0, 0, rows / 3}) {
      const int n = rows - first;
      auto out = poisoned<int32_t>(n);
      ASSERT_TRUE(cuda::draw_rows(dev_logits.data() + static_cast<size_t>(first) * vocab, n, vocab,
                                  dev_draws.data() + first, out.data(), scratch, nullptr).ok());
      const std::vector<int32_t> gpu = download(out, n);
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(gpu[r], cpu[first + r]) << "vocab " << vocab << " row " << first + r << " "
                                          << describe(draws[first + r]);
    }
  }
}

// The planted faults are for tests only: LS_SAMPLER names only the real kernels.
TEST(CudaSamplerSplit, TheEnvironmentNamesOnlyTheRealKernels) {
  EXPECT_EQ(cuda::sampler_kernel_named("legacy"), SamplerKernel::Legacy);
  EXPECT_EQ(cuda::sampler_kernel_named("bounded"), SamplerKernel::Bounded);
  EXPECT_EQ(cuda::sampler_kernel_named("split"), SamplerKernel::Split);
  const SamplerKernel fallback = cuda::sampler_kernel_named(nullptr);
  for (const char* name : {"bounded-band-planted-zero", "bounded-cut-planted-late", "split-band-planted-zero", "x"})
    EXPECT_EQ(cuda::sampler_kernel_named(name), fallback) << name;
}

TEST(CudaSamplerSplit, AllNanRowsAndAScratchTooSmallStillDrawTheCpuToken) {
  LS_SKIP_WITHOUT_DEVICE();
  ScopedSamplerKernel pin(SamplerKernel::Split);
  const int vocab = 9000;
  std::vector<float> logits = random_rows(6, vocab, 99);
  std::fill_n(logits.begin(), vocab, std::nanf(""));  // row 0 all NaN
  std::vector<RowDraw> draws = random_draws(6, 12);
  draws[0].temperature = 0.8f;
  draws[0].top_p = 0.9f;
  const std::vector<int32_t> cpu = cpu_draws(logits, draws, vocab);
  EXPECT_EQ(cpu[0], 0);
  auto dev_logits = upload(logits);
  auto dev_draws = upload(draws);
  for (const int reserved : {6, 2, 0}) {  // 2 and 0: too small for 6 rows, so the bounded kernel draws
    DrawScratch scratch;
    if (reserved > 0) {
      ASSERT_TRUE(scratch.reserve(reserved, vocab).ok());
    }
    auto out = poisoned<int32_t>(6);
    ASSERT_TRUE(cuda::draw_rows(dev_logits.data(), 6, vocab, dev_draws.data(), out.data(), scratch, nullptr).ok());
    EXPECT_EQ(download(out, 6), cpu) << "scratch for " << reserved << " rows";
  }
}

// Opt-in timing: 65536-id rows (flat: within 1e-3, the synth models; wide: 0..12) at 1 / 4 / 8 / 16 / 64 rows, per
// setting (greedy, temperature only, top-k 8, top-p 0.9, min-p 0.05, the lanes bench's sampled mix), the bounded and
// the split kernels alternately, three rounds; the tokens must agree with the CPU's.
TEST(CudaSamplerSplit, DISABLED_TimesTheDrawPerSettingAndRowCount) {
  LS_SKIP_WITHOUT_DEVICE();
  const int vocab = 65536;
  struct Setting {
    const char* name;
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  const Setting settings[] = {{"greedy", 0.0f, 0, 1.0f, 0.0f},       {"T 0.8", 0.8f, 0, 1.0f, 0.0f},
                              {"top-k 8", 0.8f, 8, 1.0f, 0.0f},       {"top-p 0.9", 0.8f, 0, 0.9f, 0.0f},
                              {"min-p 0.05", 0.8f, 0, 1.0f, 0.05f},   {"lanes mix", -1.0f, 0, 1.0f, 0.0f}};
  for (const bool flat : {true, false}) {
    std::vector<float> logits(static_cast<size_t>(64) * vocab);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double u = uniform_open01(splitmix64(i * 0x9e3779b97f4a7c15ull + 3));
      logits[i] = static_cast<float>(flat ? 0.01 + u * 1e-3 : u * 12.0);
    }
    auto dev_logits = upload(logits);
    for (const int rows : {1, 4, 8, 16, 64}) {
      for (const Setting& setting : settings) {
        std::vector<RowDraw> draws(rows);
        for (int r = 0; r < rows; ++r) {
          RowDraw& d = draws[r];
          if (setting.temperature < 0) {  // the lanes bench's mix (lanes/testing/harness.cpp make_fake_request)
            d.temperature = 0.6f + 0.1f * static_cast<float>(r % 6);
            d.top_k = r % 3 == 1 ? 8 : 0;
            d.top_p = r % 4 == 2 ? 0.9f : 1.0f;
            d.min_p = r % 5 == 3 ? 0.05f : 0.0f;
          } else {
            d.temperature = setting.temperature;
            d.top_k = setting.top_k;
            d.top_p = setting.top_p;
            d.min_p = setting.min_p;
          }
          d.seed = splitmix64(50 + r);
          d.position = 7 + r;
        }
        const std::vector<float> used(logits.begin(), logits.begin() + static_cast<size_t>(rows) * vocab);
        const std::vector<int32_t> cpu = cpu_draws(used, draws, vocab);
        std::vector<float> bounded_ms, split_ms;
        for (int round = 0; round < 3; ++round) {
          std::vector<int32_t> tokens;
          bounded_ms.push_back(median_draw_ms(dev_logits, draws, vocab, SamplerKernel::Bounded, tokens));
          EXPECT_EQ(tokens, cpu) << setting.name << " bounded";
          split_ms.push_back(median_draw_ms(dev_logits, draws, vocab, SamplerKernel::Split, tokens));
          EXPECT_EQ(tokens, cpu) << setting.name << " split";
        }
        std::sort(bounded_ms.begin(), bounded_ms.end());
        std::sort(split_ms.begin(), split_ms.end());
        std::printf("sampler_split_timing %s rows %d %s: bounded %.4f ms split %.4f ms\n", flat ? "flat" : "wide", rows,
                    setting.name, bounded_ms[1], split_ms[1]);
      }
    }
  }
}

// For a profiler (ncu -k regex:split_draw): 16 wide rows (uniform 0..12, T 0.8) under min-p 0.05 and top-p 0.9, the
// settings whose winner cuts cost the split draw most in batch s10A, three launches each, tokens checked.
TEST(CudaSamplerSplit, DISABLED_LaunchesWideCutRowsForAProfiler) {
  LS_SKIP_WITHOUT_DEVICE();
  const int vocab = 65536, rows = 16;
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(uniform_open01(splitmix64(i * 0x9e3779b97f4a7c15ull + 3)) * 12.0);
  auto dev_logits = upload(logits);
  for (const bool min_p : {true, false}) {
    std::vector<RowDraw> draws(rows);
    for (int r = 0; r < rows; ++r)
      draws[r] = RowDraw{0.8f, 0, min_p ? 1.0f : 0.9f, min_p ? 0.05f : 0.0f, splitmix64(50 + r), 7 + r};
    std::vector<int32_t> tokens;
    median_draw_ms(dev_logits, draws, vocab, SamplerKernel::Split, tokens);
    EXPECT_EQ(tokens, cpu_draws(logits, draws, vocab)) << (min_p ? "min-p" : "top-p");
  }
}

}  // namespace
}  // namespace ls

#endif  // LS_HAVE_CUDA
