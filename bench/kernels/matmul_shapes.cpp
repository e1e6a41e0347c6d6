// GEMM kernel experiment on the LFM2-350M matrix shapes: time matmul() for 1..512 rows at 1 and 2 threads and
// report weight-streaming GB/s and GFLOP/s (a program, not a test).
//
//   matmul_shapes [--rows 1,8,128] [--threads 1,2] [--repeats 7] [--mode bf16|fp32] [--cpu-time 1]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/hash.h"
#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "compute/ops.h"
#include "../bench_util.h"

using ls::bench::median;
using ls::bench::parse_list;

namespace {

using namespace ls;
using namespace ls::compute;

struct Shape {
  const char* name;
  int64_t n, k, count;  // out features, in features, matrices of this shape per token
};
// LFM2-350M: hidden 1024, FFN 4608, 10 conv + 6 attention layers, vocab 65536 tied head.
const Shape kShapes[] = {{"conv.in_proj", 3072, 1024, 10}, {"conv.out_proj", 1024, 1024, 10},
                         {"attn.q/o", 1024, 1024, 12},     {"attn.k/v", 512, 1024, 12},
                         {"ffn.w1/w3", 4608, 1024, 32},    {"ffn.w2", 1024, 4608, 16},
                         {"head", 65536, 1024, 1}};

// CPU time of the calling thread in ms (with --cpu-time: robust to other processes sharing the cores, 1 thread only).
double thread_cpu_ms() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> row_counts = {1, 8, 128}, thread_counts = {1, 2};
  int repeats = 7;
  bool cpu_time = false;
  NumericMode mode = NumericMode::Bf16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rows") row_counts = parse_list(value);
    else if (flag == "--threads") thread_counts = parse_list(value);
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--cpu-time") cpu_time = value == "1";
    else if (flag == "--mode") mode = value == "fp32" ? NumericMode::Fp32 : NumericMode::Bf16;
    else { std::fprintf(stderr, "unknown flag %s\n", flag.c_str()); return 2; }
  }
  std::printf("kernel %s (cpu: %s), mode %s\n", matmul_kernel_name(), cpu_features_text().c_str(),
              mode == NumericMode::Bf16 ? "bf16" : "fp32");
  std::printf("%-14s %6s %4s %10s %9s %9s %12s\n", "shape", "rows", "thr", "ms", "GB/s", "GFLOP/s", "ms/token-all");
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const OpContext ctx{&pool, mode};
    for (const Shape& shape : kShapes) {
      OwnedMatrix w;
      w.rows = shape.n;
      w.cols = shape.k;
      if (mode == NumericMode::Bf16) {
        w.b16.resize(shape.n * shape.k);
        for (size_t i = 0; i < w.b16.size(); ++i)
          w.b16[i] = float_to_bf16(static_cast<float>(uniform_open01(splitmix64(i)) - 0.5) * 0.04f);
      } else {
        w.f32.resize(shape.n * shape.k);
        for (size_t i = 0; i < w.f32.size(); ++i) w.f32[i] = static_cast<float>(uniform_open01(splitmix64(i)) - 0.5);
      }
      const double weight_bytes = static_cast<double>(shape.n * shape.k) * (mode == NumericMode::Bf16 ? 2 : 4);
      for (int rows : row_counts) {
        std::vector<float> x(rows * shape.k), y(rows * shape.n);
        for (size_t i = 0; i < x.size(); ++i) x[i] = ctx.store(static_cast<float>(uniform_open01(splitmix64(i + 7)) - 0.5));
        std::vector<double> times;
        for (int repeat = 0; repeat < repeats + 1; ++repeat) {
          const auto start = std::chrono::steady_clock::now();
          const double cpu_start = thread_cpu_ms();
          matmul(ctx, x.data(), rows, w.view(), y.data());
          const double ms = cpu_time ? thread_cpu_ms() - cpu_start
                                     : std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
          if (repeat > 0) times.push_back(ms);  // the first call warms caches and the pool
        }
        const double ms = median(times);
        std::printf("%-14s %6d %4d %10.3f %9.1f %9.1f %12.2f\n", shape.name, rows, threads, ms, weight_bytes / ms / 1e6,
                    2.0 * rows * shape.n * shape.k / ms / 1e6, ms * shape.count);
      }
    }
  }
  return 0;
}
