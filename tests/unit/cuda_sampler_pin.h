// What the CUDA sampler tests share: pinning the device sampler's kernel (cuda::SamplerKernel) for a scope, and the
// median time of a draw.
#pragma once
#ifdef LS_HAVE_CUDA

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compute/cuda/kernels.h"
#include "cuda_test_util.h"

namespace ls::cuda::testing {

class ScopedSamplerKernel {
 public:
  explicit ScopedSamplerKernel(SamplerKernel kernel) : before_(sampler_kernel()) { set_sampler_kernel(kernel); }
  ~ScopedSamplerKernel() { set_sampler_kernel(before_); }
  ScopedSamplerKernel(const ScopedSamplerKernel&) = delete;
  ScopedSamplerKernel& operator=(const ScopedSamplerKernel&) = delete;

 private:
  SamplerKernel before_;
};

// Median ms of draw_rows over `draws` (a row each of `logits`) under `kernel`: 15 launches after a warm-up, each
// timed alone; `tokens` gets the last launch's draws.
inline float median_draw_ms(const DeviceBuffer<float>& logits, const std::vector<RowDraw>& draws, int vocab,
                            SamplerKernel kernel, std::vector<int32_t>& tokens) {
  ScopedSamplerKernel pin(kernel);
  const int64_t rows = static_cast<int64_t>(draws.size());
  auto dev_draws = upload(draws);
  auto out = poisoned<int32_t>(rows);
  DrawScratch scratch;
  EXPECT_TRUE(scratch.reserve(rows, vocab).ok());
  std::vector<float> ms;
  for (int it = 0; it < 16; ++it) {
    const float t = device_ms_per_call(1, [&] {
      EXPECT_TRUE(draw_rows(logits.data(), rows, vocab, dev_draws.data(), out.data(), scratch, nullptr).ok());
    });
    if (it > 0) ms.push_back(t);  // the first launch warms up
  }
  tokens = download(out, rows);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace ls::cuda::testing

#endif  // LS_HAVE_CUDA
