// ThreadPool experiment: wall time of one parallel_for with an empty task, back to back (as the ~100 GEMM calls of
// one decode step), and after an idle gap (the first call of a step). A program, not a test.
//
//   pool_overhead [--threads 2] [--calls 20000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

int main(int argc, char** argv) {
  int threads = 2, calls = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--calls") calls = std::atoi(argv[i + 1]);
  }
  ls::ThreadPool pool(threads);
  auto empty = [](int, int64_t, int64_t) {};
  using Clock = std::chrono::steady_clock;
  for (int round = 0; round < 3; ++round) {
    const auto start = Clock::now();
    for (int call = 0; call < calls; ++call) pool.parallel_for(threads * 16, empty);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls;
    std::vector<double> after_gap;
    for (int call = 0; call < 200; ++call) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto gap_start = Clock::now();
      pool.parallel_for(threads * 16, empty);
      after_gap.push_back(std::chrono::duration<double, std::micro>(Clock::now() - gap_start).count());
    }
    std::sort(after_gap.begin(), after_gap.end());
    std::printf("threads %d: back-to-back %.2f us/call, after a 1 ms gap median %.2f us/call\n", threads, us,
                after_gap[after_gap.size() / 2]);
  }
  return 0;
}
