// GEMM kernel experiment on the LFM2-350M matrix shapes: time matmul() for 1..512 rows at 1 and 2 threads and
// report weight-streaming GB/s and GFLOP/s (a program, not a test).
//
//   matmul_shapes [--rows 1,8,128] [--threads 1,2] [--repeats 7] [--mode bf16|fp32] [--cpu-time 1]
//   matmul_shapes --decode-sequence 1 [--threads 1,2] [--repeats 7] [--cpu-time 1]
//   matmul_shapes --nano 1 [--rows 1,2,4,8,16] [--threads 2] [--arms 0,1] [--prefetch 0,62] [--repeats 31]
//                 [--cpu-time 1] [--json PATH]
//
// --decode-sequence: every layer matrix of one LFM2-350M decode token (distinct, packed as the model packs them,
// 0.7 GB: nothing stays in L3) run as 1-row GEMVs in the forward's order, against a streaming read loop over 1 GiB
// in the same run: how close the GEMVs alone come to the memory floor.
// --nano: the nano pair's verify and drafter-pass GEMMs by rows, each small-M kernel arm in turn (kernels/nano_gemm.h).
// GCC 12's AVX-512 headers trip -Wuninitialized inside their own _mm512_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <sys/mman.h>

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
#include "../cpu_bench_floor.h"
#include "nano_gemm.h"

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

using bench::sum_stream;
using bench::thread_cpu_ms;

double now_ms(bool cpu_time) {
  return cpu_time ? thread_cpu_ms()
                  : std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best read GB/s of `pool`'s threads each summing its part of a 1 GiB huge-page buffer.
double read_bandwidth(ThreadPool& pool, int repeats, bool cpu_time) {
  const int64_t count = (int64_t{1} << 30) / sizeof(float);
  const size_t huge = size_t{2} << 20, length = count * sizeof(float) + huge;
  void* mapped = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return 0;
  float* data = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(mapped) + huge - 1) / huge * huge);
  madvise(data, count * sizeof(float), MADV_HUGEPAGE);
  const int threads = pool.size();
  const int64_t part = count / threads / 128 * 128;
  pool.parallel_for(threads, [&](int, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) std::fill(data + t * part, data + (t + 1) * part, 1.0f);
  });
  std::vector<float> sums(threads);
  double best = 0;
  for (int repeat = 0; repeat < repeats + 1; ++repeat) {
    const double start = now_ms(cpu_time);
    pool.parallel_for(threads, [&](int, int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) sums[t] = sum_stream(data + t * part, part);
    });
    const double ms = now_ms(cpu_time) - start;
    if (repeat > 0) best = std::max(best, static_cast<double>(part * threads) * sizeof(float) / ms / 1e6);
  }
  munmap(mapped, length);
  return best;
}

// The layer matrices of one LFM2-350M decode token in forward order (10 conv, 6 attention layers), then the head.
std::vector<Shape> decode_sequence() {
  const char* kinds = "ccaccaccacacacac";
  std::vector<Shape> order;
  for (const char* kind = kinds; *kind; ++kind) {
    if (*kind == 'c') {
      order.push_back({"conv.in_proj", 3072, 1024, 1});
      order.push_back({"conv.out_proj", 1024, 1024, 1});
    } else {
      for (int64_t n : {1024, 512, 512}) order.push_back({"attn.qkv", n, 1024, 1});
      order.push_back({"attn.o", 1024, 1024, 1});
    }
    order.push_back({"ffn.w1", 4608, 1024, 1});
    order.push_back({"ffn.w3", 4608, 1024, 1});
    order.push_back({"ffn.w2", 1024, 4608, 1});
  }
  order.push_back({"head", 65536, 1024, 1});
  return order;
}

// 1-row GEMVs over the whole decode sequence at each thread count, against the read loop of the same run.
void run_decode_sequence(const std::vector<int>& thread_counts, int repeats, bool cpu_time) {
  const std::vector<Shape> order = decode_sequence();
  std::vector<OwnedMatrix> matrices(order.size());
  std::vector<std::vector<float>> inputs(order.size());
  double bytes = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    OwnedMatrix& w = matrices[i];
    w.rows = order[i].n;
    w.cols = order[i].k;
    w.b16.resize(w.rows * w.cols);
    for (size_t j = 0; j < w.b16.size(); ++j)
      w.b16[j] = float_to_bf16(static_cast<float>(static_cast<int>(splitmix64(i * 1000003 + j / 4) >> (16 * (j % 4)) & 0xffff) - 32768) * 6e-7f);
    inputs[i].resize(w.cols);
    for (int64_t k = 0; k < w.cols; ++k) inputs[i][k] = round_to_bf16(static_cast<float>(uniform_open01(splitmix64(i + 77 * k)) - 0.5));
    bytes += 2.0 * w.rows * w.cols;
  }
  std::vector<OwnedMatrix*> arena_order;
  for (OwnedMatrix& w : matrices) arena_order.push_back(&w);
  pack_for_cpu(arena_order);  // one arena in forward order, as the model packs its weights
  std::vector<float> y(65536);
  std::printf("decode sequence: %zu matrices, %.3f GB, 1 row each\n", order.size(), bytes / 1e9);
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const bool cpu = cpu_time && threads == 1;
    const OpContext ctx{&pool, NumericMode::Bf16};
    std::vector<double> times;
    for (int repeat = 0; repeat < repeats + 1; ++repeat) {
      const double start = now_ms(cpu);
      for (size_t i = 0; i < order.size(); ++i) matmul(ctx, inputs[i].data(), 1, matrices[i].view(), y.data());
      if (repeat > 0) times.push_back(now_ms(cpu) - start);
    }
    const double ms = median(times), best = *std::min_element(times.begin(), times.end());
    const double read = read_bandwidth(pool, repeats, cpu);
    std::printf("threads %d (%s): GEMVs %.2f ms median (%.1f GB/s), best %.2f ms (%.1f GB/s); read loop %.1f GB/s "
                "-> GEMVs at %.0f%% (median) / %.0f%% (best) of it\n",
                threads, cpu ? "thread cpu time" : "wall", ms, bytes / ms / 1e6, best, bytes / best / 1e6, read,
                100.0 * bytes / ms / 1e6 / read, 100.0 * bytes / best / 1e6 / read);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> row_counts = {1, 8, 128}, thread_counts = {1, 2};
  int repeats = 7;
  bool cpu_time = false;
  NumericMode mode = NumericMode::Bf16;
  bool sequence = false, nano = false;
  bench::nano::Options nano_options;
  std::string json_path;
  bool rows_given = false, threads_given = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rows") row_counts = parse_list(value), rows_given = true;
    else if (flag == "--threads") thread_counts = parse_list(value), threads_given = true;
    else if (flag == "--repeats") repeats = std::atoi(value.c_str()), nano_options.repeats = repeats;
    else if (flag == "--nano") nano = value == "1";
    else if (flag == "--arms") nano_options.arms = parse_list(value);
    else if (flag == "--prefetch") nano_options.prefetch = parse_list(value);
    else if (flag == "--json") json_path = value;
    else if (flag == "--cpu-time") cpu_time = value == "1";
    else if (flag == "--decode-sequence") sequence = value == "1";
    else if (flag == "--mode") mode = value == "fp32" ? NumericMode::Fp32 : NumericMode::Bf16;
    else { std::fprintf(stderr, "unknown flag %s\n", flag.c_str()); return 2; }
  }
  std::printf("kernel %s (cpu: %s), mode %s\n", matmul_kernel_name(), cpu_features_text().c_str(),
              mode == NumericMode::Bf16 ? "bf16" : "fp32");
  if (nano) {
    if (rows_given) nano_options.rows = row_counts;
    if (threads_given) nano_options.threads = thread_counts;
    nano_options.cpu_time = cpu_time;
    nano_options.json_path = json_path;
    return bench::nano::run(nano_options);
  }
  if (sequence) {
    run_decode_sequence(thread_counts, repeats, cpu_time);
    return 0;
  }
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
      pack_for_cpu(w);  // as the model packs its weights
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
