// Helpers shared by the CUDA tests: skipping without a device, uploads, poisoned outputs, downloads.
#pragma once
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "base/bf16.h"
#include "compute/cuda/cuda_util.h"

// Skips the test where no CUDA device is visible (this machine, CI).
#define LS_SKIP_WITHOUT_DEVICE()                                         \
  do {                                                                   \
    if (ls::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace ls::cuda::testing {

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> buffer;
  EXPECT_TRUE(buffer.allocate(host.size()).ok());
  EXPECT_EQ(cudaMemcpy(buffer.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return buffer;
}

// A device buffer of `count` elements filled with 0xFF bytes (NaN for bf16 and fp32).
template <typename T>
DeviceBuffer<T> poisoned(size_t count) {
  DeviceBuffer<T> buffer;
  EXPECT_TRUE(buffer.allocate(count).ok());
  EXPECT_EQ(cudaMemset(buffer.data(), 0xFF, count * sizeof(T)), cudaSuccess);
  return buffer;
}

// The first `count` elements, after every queued launch finished.
template <typename T>
std::vector<T> download(const DeviceBuffer<T>& buffer, size_t count) {
  std::vector<T> host(count);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), buffer.data(), count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& values) {
  std::vector<bf16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = float_to_bf16(values[i]);
  return out;
}

// bf16 values widened to fp32.
inline std::vector<float> to_float(const std::vector<bf16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = bf16_to_float(values[i]);
  return out;
}

// fp32 values rounded to the nearest bf16 (kept as fp32), as a bf16 activation holds them.
inline std::vector<float> bf16_exact(std::vector<float> values) {
  for (float& v : values) v = round_to_bf16(v);
  return values;
}

// How many of the bf16 values differ from the other's in their bits (the two have the same size).
inline int differing_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i].bits != b[i].bits;
  return differ;
}

// Device ms per call of `launch` (repeats calls back to back between two events on the default stream).
inline float device_ms_per_call(int repeats, const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int r = 0; r < repeats; ++r) launch();
  cudaEventRecord(stop);
  EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  float elapsed = 0;
  cudaEventElapsedTime(&elapsed, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return elapsed / static_cast<float>(repeats);
}

}  // namespace ls::cuda::testing

#endif  // LS_HAVE_CUDA
