// cpu_bench's memory floor: a streaming read loop over 1 GiB with the run's thread count, GB/s per pass, and the
// clocks every timing of cpu_bench reads. Part of cpu_bench (not a test).
#pragma once

// GCC 12's AVX-512 headers trip -Wuninitialized inside their own _mm512_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "base/thread_pool.h"

namespace ls::bench {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// CPU time of the calling thread in ms.
inline double thread_cpu_ms() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

// Sums `count` floats with eight independent 16-lane accumulators (512 bytes per step, plain loads: no
// non-temporal hints), so the loop is bound by memory and not by the add latency.
__attribute__((target("avx512f"))) inline double sum_stream(const float* data, int64_t count) {
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i + 128 <= count; i += 128) {
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(data + i + 16 * j));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_reduce_add_ps(acc[0]);
}

// The streaming read loop of the floor: `threads` threads (a pool of its own) each summing its contiguous part of a
// 1 GiB buffer (>> the 32 MiB L3). 2 MiB-aligned with transparent huge pages asked for, as the packed weights are
// (fewer TLB misses: the best read rate the VM gives, so the floor is not flattered by a slower buffer).
class ReadLoop {
 public:
  ReadLoop(int threads, bool cpu_time) : pool_(threads), threads_(threads), cpu_time_(cpu_time), sums_(threads) {
    const int64_t count = (int64_t{1} << 30) / sizeof(float);
    const size_t huge = size_t{2} << 20;
    length_ = count * sizeof(float) + huge;
    mapped_ = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped_ == MAP_FAILED) {
      std::fprintf(stderr, "cannot map the 1 GiB bandwidth buffer\n");
      std::exit(1);
    }
    data_ = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(mapped_) + huge - 1) / huge * huge);
    madvise(data_, count * sizeof(float), MADV_HUGEPAGE);
    part_ = count / threads / 128 * 128;
    // Each thread first touches (and so maps) its own part.
    pool_.parallel_for(threads, [&](int, int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) std::fill(data_ + t * part_, data_ + (t + 1) * part_, 1.0f);
    });
    pass_gb_s();  // the first pass warms the TLB and the pool
  }
  ~ReadLoop() { munmap(mapped_, length_); }
  ReadLoop(const ReadLoop&) = delete;
  ReadLoop& operator=(const ReadLoop&) = delete;

  // GB/s of one pass over the whole buffer (by the calling thread's CPU time with `cpu_time`: --cpu-time 1 at one
  // thread).
  double pass_gb_s() {
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_ms();
    pool_.parallel_for(threads_, [&](int, int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) sums_[t] = sum_stream(data_ + t * part_, part_);
    });
    const double ms = cpu_time_ ? thread_cpu_ms() - cpu_start : ms_since(start);
    volatile double sink = sums_[0];
    (void)sink;
    return static_cast<double>(part_ * threads_) * sizeof(float) / ms / 1e6;
  }

 private:
  ThreadPool pool_;
  int threads_;
  bool cpu_time_;
  std::vector<double> sums_;
  void* mapped_ = nullptr;
  size_t length_ = 0;
  float* data_ = nullptr;
  int64_t part_ = 0;
};

}  // namespace ls::bench
