// The CUDA drafter's int8 weights (int8_gemm.h): the device quantizer against the CPU drafter's rule, and the int8
// GEMM against an fp64 reference of the same int8 math (codes x bf16 x, times the row's scale) on fresh random data,
// outputs poisoned first, at 1..32 rows, every launch shape pinned and the automatic one, each epilogue.
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "compute/cpu/draft_ops.h"
#include "compute/cuda/cuda_util.h"
#include "cuda_drafter_kernel_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/int8_gemm.h"

namespace ls::dspark {
namespace {

using ls::cuda::testing::download;
using ls::cuda::testing::poisoned;
using ls::cuda::testing::upload;
using testing::random_values;

// W [n, k] bf16 whose rows have magnitudes from 0.05 to 2 (so neighbouring scales differ), one row all zero.
std::vector<bf16> random_weights(std::mt19937& rng, int64_t n, int64_t k) {
  std::vector<bf16> w = random_values(rng, static_cast<size_t>(n * k), 1.0f);
  std::uniform_real_distribution<float> magnitude(0.05f, 2.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float m = r == n / 2 ? 0.0f : magnitude(rng);
    for (int64_t c = 0; c < k; ++c) w[r * k + c] = float_to_bf16(bf16_to_float(w[r * k + c]) * m);
  }
  return w;
}

// A matrix quantized on the device: the codes (biased bytes) and scales, kept there and downloaded.
struct Quantized {
  ls::cuda::DeviceBuffer<uint8_t> codes;
  ls::cuda::DeviceBuffer<float> scales;
  std::vector<uint8_t> host_codes;
  std::vector<float> host_scales;
  cuda::Int8Weights view(int64_t n, int64_t k) const { return {codes.data(), scales.data(), n, k}; }
};

Quantized quantize(const std::vector<bf16>& w, int64_t n, int64_t k) {
  Quantized q;
  auto values = upload(w);
  EXPECT_TRUE(q.codes.allocate(static_cast<size_t>(n * k)).ok());
  EXPECT_TRUE(q.scales.allocate(static_cast<size_t>(n)).ok());
  EXPECT_TRUE(cuda::quantize_rows_int8(reinterpret_cast<const cuda::bf16_t*>(values.data()), n, k, q.codes.data(),
                                       q.scales.data(), nullptr)
                  .ok());
  q.host_codes = download(q.codes, static_cast<size_t>(n * k));
  q.host_scales = download(q.scales, static_cast<size_t>(n));
  return q;
}

// y = (x codes^T) * scale in fp64, and the bound of the kernel's fp32 accumulation and its final scaling.
struct Reference {
  std::vector<double> values;  // [rows, n]
  std::vector<double> bound;
};

Reference reference(const std::vector<bf16>& x, const Quantized& q, int rows, int64_t n, int64_t k) {
  Reference out{std::vector<double>(static_cast<size_t>(rows * n)), std::vector<double>(static_cast<size_t>(rows * n))};
  for (int r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, magnitude = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double product =
            static_cast<double>(bf16_to_float(x[r * k + j])) * (static_cast<int>(q.host_codes[c * k + j]) - 128);
        sum += product;
        magnitude += std::fabs(product);
      }
      const double scale = q.host_scales[c];
      out.values[r * n + c] = sum * scale;
      out.bound[r * n + c] = (magnitude * k * 0x1p-24 + std::fabs(sum) * 0x1p-23) * scale + 1e-30;
    }
  }
  return out;
}

// Cells of y [rows, ldy] (fp32) outside the reference's bound; NaN (unwritten) counts as outside.
int outside_bound(const std::vector<float>& y, const Reference& expected, int rows, int64_t n, int64_t ldy) {
  int outside = 0;
  for (int r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c)
      outside += !(std::fabs(y[r * ldy + c] - expected.values[r * n + c]) <= expected.bound[r * n + c]);
  return outside;
}

// Cells of two fp32 outputs with the same bits.
int equal_bits(const std::vector<float>& a, const std::vector<float>& b) {
  int equal = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    equal += std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i]);
  return equal;
}

const cuda::Int8GemmShape kShapes[] = {{0, 0},          {1, 4},          {1, 8},           {1, 16},
                                        {2, 4},          {2, 8},          {2, 16},          {4, 4},
                                        {4, 8},          {4, 16},         {1, 8, true},     {2, 8, true},
                                        {4, 8, true},    {1, 8, false, 3}, {4, 8, false, 4}, {4, 4, true, 2},
                                        {2, 16, false, 5}};

std::string shape_name(const cuda::Int8GemmShape& shape) {
  return "m_tiles " + std::to_string(shape.m_tiles) + " warps " + std::to_string(shape.warps) +
         (shape.x_l1 ? " x in L1" : "") + (shape.k_slices > 1 ? " K slices " + std::to_string(shape.k_slices) : "");
}

// A split launch's scratch (slice sums and zeroed tickets) sized for `args` with its pin; attached to the pin.
struct SplitScratch {
  ls::cuda::DeviceBuffer<float> sums;
  ls::cuda::DeviceBuffer<unsigned int> tickets;
  void attach(cuda::Int8Gemm& args) {
    if (args.shape.k_slices <= 1) return;
    const cuda::Int8GemmShape shape = cuda::int8_gemm_shape(args);
    const size_t floats = static_cast<size_t>(cuda::int8_gemm_slice_floats(args, shape));
    const size_t tiles = static_cast<size_t>(cuda::int8_gemm_tiles(args, shape));
    if (sums.size() < floats) {
      EXPECT_TRUE(sums.allocate(floats).ok());
    }
    if (tickets.size() < tiles) {
      EXPECT_TRUE(tickets.allocate(tiles).ok());
      EXPECT_EQ(cudaMemset(tickets.data(), 0, tiles * sizeof(unsigned int)), cudaSuccess);
    }
    args.shape.slice_sums = sums.data();
    args.shape.tickets = tickets.data();
  }
};

// The device's codes and scales are the CPU drafter's (compute::quantize_row_int8 of the same bf16 values), the bias
// included; an all-zero row has scale 0 and codes 0.
TEST(CudaDrafterInt8, TheDeviceQuantizerGivesTheCpuDraftersCodesAndScales) {
  LS_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(std::random_device{}());
  const int64_t n = 67, k = 2064;
  const std::vector<bf16> w = random_weights(rng, n, k);
  const Quantized q = quantize(w, n, k);
  int differing = 0;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) row[c] = bf16_to_float(w[r * k + c]);
    std::vector<int8_t> codes(static_cast<size_t>(k));
    float scale = 0;
    compute::quantize_row_int8(row, codes, scale);
    EXPECT_EQ(std::bit_cast<uint32_t>(scale), std::bit_cast<uint32_t>(q.host_scales[r])) << "row " << r;
    for (int64_t c = 0; c < k; ++c) differing += static_cast<int>(q.host_codes[r * k + c]) - 128 != codes[c];
  }
  EXPECT_EQ(differing, 0);
  EXPECT_EQ(q.host_scales[n / 2], 0.0f);
  for (int64_t c = 0; c < k; ++c) ASSERT_EQ(q.host_codes[(n / 2) * k + c], 128);
  EXPECT_FALSE(cuda::quantize_rows_int8(nullptr, 2, 24, nullptr, nullptr, nullptr).ok());  // K not a multiple of 16
}

// fp32 outputs within the fp32 accumulation's bound of the fp64 reference at 1..32 rows on shapes with tails (n not
// a multiple of the 16- or 32-row tile, K not of the 128-wide piece) and the drafter's long K; every shape pinned
// gives its own bits again on a second launch and with or without the overlapping launch; padding columns (ldy > n)
// and the rows past `rows` stay poisoned; bf16 outputs are one rounding of the fp32 ones and the SwiGLU epilogue the
// bits of the bf16 GEMM then swiglu_stacked. Planted: every column on its neighbour's scale must leave the bound.
TEST(CudaDrafterInt8, TheInt8GemmMatchesAnFp64ReferenceOfTheSameInt8Math) {
  LS_SKIP_WITHOUT_DEVICE();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Case {
    std::vector<int> rows;
    int64_t n, k;
  };
  std::vector<int> every_row;
  for (int r = 1; r <= cuda::kInt8GemmMaxRows; ++r) every_row.push_back(r);
  // (8200 columns at K 128: more column tiles than CTAs stay resident, so CTAs take several tiles each.)
  const Case cases[] = {{every_row, 80, 1040},     {{1, 9, 16}, 48, 208},  {{5, 17, 32}, 130, 16},
                        {{9, 16, 24}, 544, 2048}, {{9, 3}, 34, 6144},     {{9, 1, 20}, 8200, 128}};
  for (const Case& shape : cases) {
    const std::vector<bf16> w = random_weights(rng, shape.n, shape.k);
    const Quantized q = quantize(w, shape.n, shape.k);
    for (const int rows : shape.rows) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(shape.n) + " k " + std::to_string(shape.k));
      const std::vector<bf16> x_values = random_values(rng, static_cast<size_t>(rows * shape.k), 2.0f);
      auto x = upload(x_values);
      const auto* xd = reinterpret_cast<const cuda::bf16_t*>(x.data());
      const Reference expected = reference(x_values, q, rows, shape.n, shape.k);
      const int64_t ldy = shape.n + 3;
      const size_t cells = static_cast<size_t>((rows + 1) * ldy);  // one row more than written
      SplitScratch scratch;  // reused by every split launch below (its tickets must come back to zero)
      for (const cuda::Int8GemmShape& pin : kShapes) {
        SCOPED_TRACE(shape_name(pin));
        std::vector<std::vector<float>> runs;
        for (const bool programmatic : {true, false, true}) {
          auto y = poisoned<float>(cells);
          cuda::Int8Gemm args{xd, rows, q.view(shape.n, shape.k), y.data(), ldy, cuda::Int8Epilogue::F32, pin, false};
          scratch.attach(args);
          ASSERT_TRUE(cuda::int8_gemm(args, programmatic, nullptr).ok());
          runs.push_back(download(y, cells));
        }
        for (size_t cell = 0; cell < cells; ++cell) {
          const int64_t r = static_cast<int64_t>(cell) / ldy, c = static_cast<int64_t>(cell) % ldy;
          const uint32_t bits = std::bit_cast<uint32_t>(runs[0][cell]);
          ASSERT_EQ(bits, std::bit_cast<uint32_t>(runs[1][cell])) << r << ", " << c;
          ASSERT_EQ(bits, std::bit_cast<uint32_t>(runs[2][cell])) << r << ", " << c;
          if (r >= rows || c >= shape.n) {
            ASSERT_EQ(bits, 0xffffffffu) << "cell " << r << ", " << c << " written";
          }
        }
        EXPECT_EQ(outside_bound(runs[0], expected, rows, shape.n, ldy), 0);
        // bf16 out: one rounding of the fp32 output.
        auto y16 = poisoned<bf16>(static_cast<size_t>(rows * shape.n));
        cuda::Int8Gemm bf16_args{xd, rows, q.view(shape.n, shape.k), y16.data(), shape.n, cuda::Int8Epilogue::Bf16,
                                 pin, false};
        scratch.attach(bf16_args);
        ASSERT_TRUE(cuda::int8_gemm(bf16_args, true, nullptr).ok());
        const std::vector<bf16> out16 = download(y16, static_cast<size_t>(rows * shape.n));
        int differing = 0;
        for (int r = 0; r < rows; ++r)
          for (int64_t c = 0; c < shape.n; ++c)
            differing += out16[r * shape.n + c].bits != float_to_bf16(runs[0][r * ldy + c]).bits;
        EXPECT_EQ(differing, 0);
        // SwiGLU of the codes as a stacked gate/up [2 F, k]: the bf16 GEMM then swiglu_stacked, bit for bit.
        if (shape.n % 2 == 0) {
          const int64_t ff = shape.n / 2;
          auto fused = poisoned<bf16>(static_cast<size_t>(rows * ff)), unfused = poisoned<bf16>(rows * ff);
          cuda::Int8Gemm swiglu{xd, rows, q.view(shape.n, shape.k), fused.data(), ff, cuda::Int8Epilogue::Swiglu,
                                pin, false};
          scratch.attach(swiglu);
          ASSERT_TRUE(cuda::int8_gemm(swiglu, true, nullptr).ok());
          ASSERT_TRUE(cuda::swiglu_stacked(reinterpret_cast<const cuda::bf16_t*>(y16.data()), rows, ff,
                                           reinterpret_cast<cuda::bf16_t*>(unfused.data()), nullptr)
                          .ok());
          EXPECT_EQ(testing::count_bitwise_equal(download(fused, rows * ff), download(unfused, rows * ff)),
                    static_cast<int>(rows * ff));
        }
      }
      // Planted: each column scaled by its neighbour's scale.
      auto y = poisoned<float>(cells);
      cuda::Int8Gemm planted{xd, rows, q.view(shape.n, shape.k), y.data(), ldy, cuda::Int8Epilogue::F32, {}, false};
      planted.planted_scale = true;
      ASSERT_TRUE(cuda::int8_gemm(planted, true, nullptr).ok());
      EXPECT_GT(outside_bound(download(y, cells), expected, rows, shape.n, ldy), 0) << "the planted scale went unseen";
      // Planted: a K split's fold without its first slice (K of two pieces or more).
      if (shape.k >= 256) {
        auto dropped = poisoned<float>(cells);
        cuda::Int8Gemm split{xd, rows, q.view(shape.n, shape.k), dropped.data(), ldy, cuda::Int8Epilogue::F32,
                             {1, 8, false, 2}, false};
        split.shape.planted_drop_slice = true;
        scratch.attach(split);
        ASSERT_TRUE(cuda::int8_gemm(split, true, nullptr).ok());
        EXPECT_GT(outside_bound(download(dropped, cells), expected, rows, shape.n, ldy), 0)
            << "the planted slice went unseen";
      }
    }
  }
}

// Launched programmatically right after the kernel that writes its x (residual_norm, which lets its dependents start
// at once), x rewritten in place between two GEMMs that read it (so an L1 line of the old x would be stale): the bits
// of the same product on a finished x, with x through L2 only and through L1 too (x_l1), at 9 rows.
TEST(CudaDrafterInt8, AProgrammaticLaunchReadsTheXItsPredecessorWrote) {
  LS_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(2020);
  const int rows = 9;
  const int64_t n = 16384, k = 2048;
  const Quantized q = quantize(random_weights(rng, n, k), n, k);
  const std::vector<bf16> start = random_values(rng, rows * k, 3.0f), delta = random_values(rng, rows * k, 1.0f);
  auto weight = upload(testing::random_floats(rng, k, 0.5f, 1.5f));
  auto delta_d = upload(delta);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto* weights = weight.data();
  const auto* dd = reinterpret_cast<const cuda::bf16_t*>(delta_d.data());
  for (const cuda::Int8GemmShape pin : {cuda::Int8GemmShape{2, 8, false}, cuda::Int8GemmShape{2, 8, true}}) {
    SCOPED_TRACE(shape_name(pin));
    // Reference: x after the first norm and after the second, each finished before its GEMM.
    std::vector<std::vector<float>> expected;
    {
      auto hidden = upload(start);
      auto x = poisoned<bf16>(rows * k);
      auto* xd = reinterpret_cast<cuda::bf16_t*>(x.data());
      auto* hd = reinterpret_cast<cuda::bf16_t*>(hidden.data());
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE(cuda::residual_norm(hd, step == 0 ? nullptr : dd, rows, k, weights, 1e-5f, xd, stream).ok());
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        auto y = poisoned<float>(rows * n);
        const cuda::Int8GemmShape through_l2{pin.m_tiles, pin.warps, false};  // the same sums, x never from L1
        cuda::Int8Gemm args{xd, rows, q.view(n, k), y.data(), n, cuda::Int8Epilogue::F32, through_l2, false};
        ASSERT_TRUE(cuda::int8_gemm(args, false, stream).ok());
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        expected.push_back(download(y, rows * n));
      }
    }
    for (int run = 0; run < 3; ++run) {
      auto hidden = upload(start);
      auto x = poisoned<bf16>(rows * k);
      auto y0 = poisoned<float>(rows * n), y1 = poisoned<float>(rows * n);
      auto* xd = reinterpret_cast<cuda::bf16_t*>(x.data());
      auto* hd = reinterpret_cast<cuda::bf16_t*>(hidden.data());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      float* outs[2] = {y0.data(), y1.data()};
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE(cuda::residual_norm(hd, step == 0 ? nullptr : dd, rows, k, weights, 1e-5f, xd, stream).ok());
        cuda::Int8Gemm args{xd, rows, q.view(n, k), outs[step], n, cuda::Int8Epilogue::F32, pin, false};
        ASSERT_TRUE(cuda::int8_gemm(args, true, stream).ok());
      }
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(equal_bits(download(y0, rows * n), expected[0]), static_cast<int>(rows * n))
          << "run " << run << ", first GEMM";
      EXPECT_EQ(equal_bits(download(y1, rows * n), expected[1]), static_cast<int>(rows * n))
          << "run " << run << ", second GEMM (x rewritten)";
    }
  }
  cudaStreamDestroy(stream);
}

// The automatic shape for the drafter's matrices, and the refusals by name.
TEST(CudaDrafterInt8, TheInt8GemmPicksItsShapeAndRefusesWhatItCannotTake) {
  cuda::Int8Gemm args;
  args.rows = 9;
  args.w = {nullptr, nullptr, 65536, 2048};  // the head
  EXPECT_EQ(cuda::int8_gemm_shape(args).m_tiles, 2);
  EXPECT_EQ(cuda::int8_gemm_shape(args).warps, 8);  // 2048 CTAs: many waves
  args.w = {nullptr, nullptr, 2048, 6144};  // down: 128 CTAs, one an SM
  EXPECT_EQ(cuda::int8_gemm_shape(args).m_tiles, 1);
  EXPECT_EQ(cuda::int8_gemm_shape(args).warps, 16);
  if (ls::cuda::device_count() > 0 && ls::cuda::device_count() < 1000) {
    int sms = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    if (sms >= 96) {  // (the H200's 132)
      args.epilogue = cuda::Int8Epilogue::Swiglu;
      args.w = {nullptr, nullptr, 12288, 2048};  // gate/up: 384 CTAs of two tiles, four an SM
      EXPECT_EQ(cuda::int8_gemm_shape(args).m_tiles, 2);
      EXPECT_EQ(cuda::int8_gemm_shape(args).warps, 4);
      args.epilogue = cuda::Int8Epilogue::Bf16;
    }
  }
  args.rows = 32;
  args.w = {nullptr, nullptr, 65536, 2048};
  EXPECT_NE(cuda::int8_gemm_shape(args).warps, 16);  // two W tiles at 32 rows: 8 warps at most
  args.shape = {4, 16};
  EXPECT_EQ(cuda::int8_gemm_shape(args).m_tiles, 2);  // four W tiles at 32 rows: two (the partials)
  EXPECT_EQ(cuda::int8_gemm_shape(args).warps, 4);   // two buffers of partials fit 4 warps only
  args.rows = 9;
  EXPECT_EQ(cuda::int8_gemm_shape(args).m_tiles, 4);
  EXPECT_EQ(cuda::int8_gemm_shape(args).warps, 4);
  args.shape = {};
  EXPECT_TRUE(cuda::int8_gemm_supported(1, 16));
  EXPECT_FALSE(cuda::int8_gemm_supported(cuda::kInt8GemmMaxRows + 1, 2048));
  EXPECT_FALSE(cuda::int8_gemm_supported(9, 2056));
  LS_SKIP_WITHOUT_DEVICE();
  args.rows = 33;
  const Status refused = cuda::int8_gemm(args, true, nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message().find("int8_gemm takes"), std::string::npos) << refused.message();
  args.rows = 4;
  args.w = {nullptr, nullptr, 33, 2048};
  args.epilogue = cuda::Int8Epilogue::Swiglu;
  EXPECT_EQ(cuda::int8_gemm(args, true, nullptr).code(), ErrorCode::InvalidArgument);  // odd stacked rows
  args.epilogue = cuda::Int8Epilogue::Bf16;
  args.shape.k_slices = 2;
  const Status no_scratch = cuda::int8_gemm(args, true, nullptr);  // a K split without its scratch
  EXPECT_EQ(no_scratch.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(no_scratch.message().find("slice sums"), std::string::npos) << no_scratch.message();
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
