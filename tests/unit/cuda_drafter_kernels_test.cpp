// The CUDA drafter's kernels against their references on fresh random data, outputs poisoned first: the fused q/k/v
// heads step against norm + RoPE + scatter, residual + norm, the row norm's forms and the stacked SwiGLU against the
// unfused launches, the skinny GEMM against an fp64 reference (the attention kernels: cuda_drafter_attention_test).
#include <gtest/gtest.h>

#ifdef LS_HAVE_CUDA
#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/bf16.h"
#include "compute/cuda/cuda_util.h"
#include "cuda_drafter_kernel_util.h"
#include "cuda_drafter_skinny_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark {
namespace {

using testing::count_bitwise_equal;
using testing::random_floats;
using testing::random_values;

// The fused heads step against rms_norm + rope_rotate (q and k) + scatter_block_kv on fresh random data, both
// head layouts (interleaved and NeoX) and two head sizes: queries and every cache row bit for bit, and the cache
// rows outside the block untouched; with each lane's loads one at a time and batched (session 8).
TEST(CudaDrafter, TheQkvHeadsKernelGivesTheBitsOfNormRopeAndScatter) {
  LS_SKIP_WITHOUT_DEVICE();
  using ls::cuda::testing::download;
  using ls::cuda::testing::upload;
  std::mt19937 rng(4242);
  for (const int head_dim : {64, 128}) {
    for (const bool neox : {false, true}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + (neox ? " neox" : " interleaved"));
      const int gamma = 5, heads = 6, kv_heads = 2, layers = 2, layer = 1, count = 3;
      const int64_t rows = static_cast<int64_t>(count) * gamma, q = heads * head_dim, kv = kv_heads * head_dim;
      const int64_t lengths[] = {0, 17, 40}, capacity = 64;
      auto qkv = upload(random_values(rng, rows * (q + 2 * kv), 3.0f));
      auto q_norm = upload(random_floats(rng, head_dim, 0.5f, 1.5f));
      auto k_norm = upload(random_floats(rng, head_dim, 0.5f, 1.5f));
      std::vector<float> inv(head_dim / 2);
      for (int i = 0; i < head_dim / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / head_dim);
      auto inv_freq = upload(inv);
      std::vector<int32_t> position_values(rows);
      for (int64_t row = 0; row < rows; ++row) position_values[row] = static_cast<int32_t>(lengths[row / gamma] + row % gamma + 3);
      auto positions = upload(position_values);
      const std::vector<bf16> cache_start = random_values(rng, static_cast<size_t>(layers * capacity * kv), 1.0f);
      std::vector<ls::cuda::DeviceBuffer<bf16>> caches;
      for (int k = 0; k < 4 * count; ++k) caches.push_back(upload(cache_start));
      std::vector<cuda::DeviceBlockRequest> fused_requests, reference_requests;
      auto as_device = [](ls::cuda::DeviceBuffer<bf16>& buffer) { return reinterpret_cast<cuda::bf16_t*>(buffer.data()); };
      for (int i = 0; i < count; ++i) {
        fused_requests.push_back({as_device(caches[4 * i]), as_device(caches[4 * i + 1]), lengths[i], capacity});
        reference_requests.push_back({as_device(caches[4 * i + 2]), as_device(caches[4 * i + 3]), lengths[i], capacity});
      }
      auto fused_device = upload(fused_requests);
      auto reference_device = upload(reference_requests);
      // Reference: split the stacked rows on the host, then the unfused launches.
      const std::vector<bf16> stacked = download(qkv, static_cast<size_t>(rows * (q + 2 * kv)));
      std::vector<bf16> q_part, k_part, v_part;
      for (int64_t row = 0; row < rows; ++row) {
        const bf16* from = stacked.data() + row * (q + 2 * kv);
        q_part.insert(q_part.end(), from, from + q);
        k_part.insert(k_part.end(), from + q, from + q + kv);
        v_part.insert(v_part.end(), from + q + kv, from + q + 2 * kv);
      }
      auto ref_q = upload(q_part), ref_k = upload(k_part), ref_v = upload(v_part);
      auto* rq = reinterpret_cast<cuda::bf16_t*>(ref_q.data());
      auto* rk = reinterpret_cast<cuda::bf16_t*>(ref_k.data());
      ASSERT_TRUE(cuda::rms_norm(rq, rows * heads, head_dim, q_norm.data(), 1e-5f, rq, nullptr).ok());
      ASSERT_TRUE(cuda::rope_rotate(rq, rows, heads, head_dim, positions.data(), 0, inv_freq.data(), neox, nullptr).ok());
      ASSERT_TRUE(cuda::rms_norm(rk, rows * kv_heads, head_dim, k_norm.data(), 1e-5f, rk, nullptr).ok());
      ASSERT_TRUE(cuda::rope_rotate(rk, rows, kv_heads, head_dim, positions.data(), 0, inv_freq.data(), neox, nullptr).ok());
      ASSERT_TRUE(cuda::scatter_block_kv(rk, reinterpret_cast<cuda::bf16_t*>(ref_v.data()), reference_device.data(),
                                         count, gamma, static_cast<int>(kv), layer, nullptr)
                      .ok());
      for (const bool batched : {false, true}) {  // session 8: each lane's loads at once, the same bits
        SCOPED_TRACE(batched ? "batched loads" : "loads one at a time");
        for (int i = 0; i < count; ++i) {  // the fused caches back to their start
          for (int which = 0; which < 2; ++which) {
            cudaMemcpy(caches[4 * i + which].data(), cache_start.data(), cache_start.size() * 2,
                       cudaMemcpyHostToDevice);
          }
        }
        auto queries = ls::cuda::testing::poisoned<bf16>(static_cast<size_t>(rows * q));
        cuda::QkvHeads args;
        args.batched = batched;
        args.qkv = reinterpret_cast<const cuda::bf16_t*>(qkv.data());
        args.rows = rows;
        args.gamma = gamma;
        args.heads = heads;
        args.kv_heads = kv_heads;
        args.head_dim = head_dim;
        args.q_norm = q_norm.data();
        args.k_norm = k_norm.data();
        args.eps = 1e-5f;
        args.positions = positions.data();
        args.inv_freq = inv_freq.data();
        args.neox = neox;
        args.requests = fused_device.data();
        args.layer = layer;
        args.queries = reinterpret_cast<cuda::bf16_t*>(queries.data());
        ASSERT_TRUE(cuda::qkv_heads(args, nullptr).ok());
        const std::vector<bf16> fused_q = download(queries, static_cast<size_t>(rows * q));
        const std::vector<bf16> reference_q = download(ref_q, static_cast<size_t>(rows * q));
        EXPECT_EQ(count_bitwise_equal(fused_q, reference_q), static_cast<int>(rows * q)) << "queries";
        int differing_cache = 0, written = 0;
        for (int k = 0; k < 2 * count; ++k) {
          const std::vector<bf16> fused = download(caches[(k / 2) * 4 + k % 2], cache_start.size());
          const std::vector<bf16> reference = download(caches[(k / 2) * 4 + 2 + k % 2], cache_start.size());
          differing_cache += static_cast<int>(cache_start.size()) - count_bitwise_equal(fused, reference);
          written += static_cast<int>(cache_start.size()) - count_bitwise_equal(fused, cache_start);
        }
        EXPECT_EQ(differing_cache, 0) << "cache bits differ from the unfused scatter";
        EXPECT_GT(written, static_cast<int>(rows * kv)) << "the block K/V reached the caches";
      }
    }
  }
}

// residual_norm against add_residual + rms_norm, and swiglu_stacked against swiglu, on fresh random rows with the
// outputs poisoned: the residual and SwiGLU bit for bit; the norm within one bf16 rounding (its double sum of
// squares is a CTA tree here, a warp's there) and nearly always bitwise; residual_norm and rms_norm with their
// loads batched give their one-at-a-time bits (rms_norm also in place).
TEST(CudaDrafter, TheResidualNormAndStackedSwigluKernelsGiveTheUnfusedBits) {
  LS_SKIP_WITHOUT_DEVICE();
  using ls::cuda::testing::download;
  using ls::cuda::testing::upload;
  std::mt19937 rng(77);
  const int64_t rows = 13, width = 2048;
  const std::vector<bf16> x_start = random_values(rng, rows * width, 4.0f);
  auto delta = upload(random_values(rng, rows * width, 1.0f));
  auto weight = upload(random_floats(rng, width, 0.5f, 1.5f));
  auto fused_x = upload(x_start), reference_x = upload(x_start);
  auto fused_y = ls::cuda::testing::poisoned<bf16>(rows * width);
  auto reference_y = ls::cuda::testing::poisoned<bf16>(rows * width);
  auto* d = reinterpret_cast<const cuda::bf16_t*>(delta.data());
  ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(fused_x.data()), d, rows, width, weight.data(), 1e-5f,
                                  reinterpret_cast<cuda::bf16_t*>(fused_y.data()), nullptr)
                  .ok());
  auto* rx = reinterpret_cast<cuda::bf16_t*>(reference_x.data());
  ASSERT_TRUE(cuda::add_residual(rx, d, rows * width, nullptr).ok());
  ASSERT_TRUE(cuda::rms_norm(rx, rows, width, weight.data(), 1e-5f, reinterpret_cast<cuda::bf16_t*>(reference_y.data()),
                             nullptr)
                  .ok());
  const std::vector<bf16> fx = download(fused_x, rows * width), rxs = download(reference_x, rows * width);
  EXPECT_EQ(count_bitwise_equal(fx, rxs), static_cast<int>(rows * width)) << "residual";
  const std::vector<bf16> fy = download(fused_y, rows * width), ry = download(reference_y, rows * width);
  double worst = 0;
  for (size_t i = 0; i < fy.size(); ++i) {
    const float a = bf16_to_float(fy[i]), b = bf16_to_float(ry[i]);
    ASSERT_TRUE(std::isfinite(a)) << "norm output " << i << " unwritten";
    worst = std::max(worst, std::fabs(static_cast<double>(a) - b) / std::max(std::fabs(static_cast<double>(b)), 1e-3));
  }
  EXPECT_LE(worst, 1.0 / 128) << "more than one bf16 rounding apart";
  EXPECT_GE(count_bitwise_equal(fy, ry) * 100, static_cast<int>(rows * width) * 99);
  // A null delta normalises x as it is.
  auto plain_y = ls::cuda::testing::poisoned<bf16>(rows * width);
  ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(reference_x.data()), nullptr, rows, width,
                                  weight.data(), 1e-5f, reinterpret_cast<cuda::bf16_t*>(plain_y.data()), nullptr)
                  .ok());
  EXPECT_GE(count_bitwise_equal(download(plain_y, rows * width), ry) * 100, static_cast<int>(rows * width) * 99);
  EXPECT_EQ(count_bitwise_equal(download(reference_x, rows * width), rxs), static_cast<int>(rows * width));
  // Batched loads (session 8) give the one-at-a-time bits of x and y, with and without delta, at the drafter's
  // width, ragged ones (a row in one batch of 16; held) and one past the batched rows' limit (4096: it falls back to
  // the loop).
  for (const int64_t w : {int64_t{2048}, int64_t{1000}, int64_t{300}, int64_t{5000}}) {
    for (const bool with_delta : {true, false}) {
      SCOPED_TRACE("width " + std::to_string(w) + (with_delta ? ", delta" : ", no delta"));
      const std::vector<bf16> start = random_values(rng, rows * w, 4.0f);
      auto adds = upload(random_values(rng, rows * w, 1.0f));
      auto scale = upload(random_floats(rng, w, 0.5f, 1.5f));
      auto one_x = upload(start), batched_x = upload(start);
      auto one_y = ls::cuda::testing::poisoned<bf16>(rows * w), batched_y = ls::cuda::testing::poisoned<bf16>(rows * w);
      const auto* add = with_delta ? reinterpret_cast<const cuda::bf16_t*>(adds.data()) : nullptr;
      ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(one_x.data()), add, rows, w, scale.data(), 1e-5f,
                                      reinterpret_cast<cuda::bf16_t*>(one_y.data()), nullptr, false, false)
                      .ok());
      ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(batched_x.data()), add, rows, w, scale.data(),
                                      1e-5f, reinterpret_cast<cuda::bf16_t*>(batched_y.data()), nullptr, false, true)
                      .ok());
      EXPECT_EQ(count_bitwise_equal(download(batched_x, rows * w), download(one_x, rows * w)),
                static_cast<int>(rows * w));
      EXPECT_EQ(count_bitwise_equal(download(batched_y, rows * w), download(one_y, rows * w)),
                static_cast<int>(rows * w));
      // rms_norm (a warp per row) batched against one at a time, into y and in place (as the absorb's key heads):
      // rows of up to 512 in one batch of 16, up to 2048 held in one of 64, 5000 in batches of 16. A planted eps of
      // 1e-2 must differ somewhere (s10B: 1e-4 flipped no bf16 output at 5000; 1e-2 moves inverse_rms ~1e-3).
      auto* source = reinterpret_cast<cuda::bf16_t*>(one_x.data());
      auto norm_one = ls::cuda::testing::poisoned<bf16>(rows * w);
      auto norm_batched = ls::cuda::testing::poisoned<bf16>(rows * w);
      ASSERT_TRUE(cuda::rms_norm(source, rows, w, scale.data(), 1e-5f,
                                 reinterpret_cast<cuda::bf16_t*>(norm_one.data()), nullptr, false)
                      .ok());
      ASSERT_TRUE(cuda::rms_norm(source, rows, w, scale.data(), 1e-5f,
                                 reinterpret_cast<cuda::bf16_t*>(norm_batched.data()), nullptr, true)
                      .ok());
      const std::vector<bf16> expected_norm = download(norm_one, rows * w);
      EXPECT_EQ(count_bitwise_equal(download(norm_batched, rows * w), expected_norm), static_cast<int>(rows * w));
      ASSERT_TRUE(cuda::rms_norm(source, rows, w, scale.data(), 1e-2f,
                                 reinterpret_cast<cuda::bf16_t*>(norm_batched.data()), nullptr, true)
                      .ok());
      EXPECT_LT(count_bitwise_equal(download(norm_batched, rows * w), expected_norm), static_cast<int>(rows * w))
          << "a planted eps gave every bit of the reference";
      ASSERT_TRUE(cuda::rms_norm(source, rows, w, scale.data(), 1e-5f, source, nullptr, true).ok());
      EXPECT_EQ(count_bitwise_equal(download(one_x, rows * w), expected_norm), static_cast<int>(rows * w))
          << "in place";
    }
  }

  const int64_t ff = 384;
  const std::vector<bf16> gate_up_values = random_values(rng, rows * 2 * ff, 6.0f);
  std::vector<bf16> gate_values, up_values;
  for (int64_t row = 0; row < rows; ++row) {
    gate_values.insert(gate_values.end(), gate_up_values.begin() + row * 2 * ff, gate_up_values.begin() + row * 2 * ff + ff);
    up_values.insert(up_values.end(), gate_up_values.begin() + row * 2 * ff + ff, gate_up_values.begin() + (row + 1) * 2 * ff);
  }
  auto gate_up = upload(gate_up_values), gate = upload(gate_values), up = upload(up_values);
  auto stacked_out = ls::cuda::testing::poisoned<bf16>(rows * ff), plain_out = ls::cuda::testing::poisoned<bf16>(rows * ff);
  ASSERT_TRUE(cuda::swiglu_stacked(reinterpret_cast<const cuda::bf16_t*>(gate_up.data()), rows, ff,
                                   reinterpret_cast<cuda::bf16_t*>(stacked_out.data()), nullptr)
                  .ok());
  ASSERT_TRUE(cuda::swiglu(reinterpret_cast<const cuda::bf16_t*>(gate.data()),
                           reinterpret_cast<const cuda::bf16_t*>(up.data()), rows * ff,
                           reinterpret_cast<cuda::bf16_t*>(plain_out.data()), nullptr)
                  .ok());
  EXPECT_EQ(count_bitwise_equal(download(stacked_out, rows * ff), download(plain_out, rows * ff)),
            static_cast<int>(rows * ff));
}

// The skinny GEMM (rows <= 16, tensor cores, K order permuted within each step) against an fp64 reference of the
// same bf16 values, outputs poisoned first, for 1..16 rows, K and n with tails (K not a multiple of the 128-wide
// piece, n not of the 16-wide tile) and one long K: fp32 outputs within fp32 accumulation error, bf16 outputs within
// one rounding, the padding columns of y (ldy > n) untouched, the same bits with and without the overlapping launch
// (planted: with several pieces a warp, later pieces reusing the first piece's loads must leave the bound),
// and the SwiGLU epilogue giving the bits of the bf16 GEMM followed by swiglu_stacked.
TEST(CudaDrafter, TheSkinnyGemmMatchesAnFp64ReferenceInEveryEpilogue) {
  LS_SKIP_WITHOUT_DEVICE();
  using ls::cuda::testing::download;
  using ls::cuda::testing::poisoned;
  using ls::cuda::testing::upload;
  std::mt19937 rng(515);
  const struct {
    int rows;
    int64_t n, k;
  } cases[] = {{1, 48, 200}, {5, 130, 1032}, {8, 64, 256}, {9, 272, 2048}, {16, 40, 96}, {9, 32, 6144}};
  for (const auto& shape : cases) {
    SCOPED_TRACE("rows " + std::to_string(shape.rows) + " n " + std::to_string(shape.n) + " k " +
                 std::to_string(shape.k));
    const std::vector<bf16> x_values = random_values(rng, shape.rows * shape.k, 2.0f);
    const std::vector<bf16> w_values = random_values(rng, shape.n * shape.k, 0.5f);
    auto x = upload(x_values), w = upload(w_values);
    const testing::SkinnyReference expected =
        testing::skinny_reference(x_values, w_values, shape.rows, shape.n, shape.k);
    const auto* xd = reinterpret_cast<const cuda::bf16_t*>(x.data());
    const auto* wd = reinterpret_cast<const cuda::bf16_t*>(w.data());
    const int64_t ldy = shape.n + 3;
    std::vector<std::vector<float>> f32_runs;
    for (const bool programmatic : {true, false}) {
      auto y = poisoned<float>(shape.rows * ldy);
      const cuda::SkinnyGemm args{xd, shape.rows, shape.k, wd, shape.n, y.data(), ldy, cuda::SkinnyEpilogue::F32};
      ASSERT_TRUE(cuda::skinny_gemm(args, programmatic, nullptr).ok());
      f32_runs.push_back(download(y, shape.rows * ldy));
    }
    for (int r = 0; r < shape.rows; ++r) {
      for (int64_t c = 0; c < ldy; ++c) {
        const float value = f32_runs[0][r * ldy + c];
        EXPECT_EQ(std::bit_cast<uint32_t>(value), std::bit_cast<uint32_t>(f32_runs[1][r * ldy + c]));
        if (c >= shape.n) {
          ASSERT_EQ(std::bit_cast<uint32_t>(value), 0xffffffffu) << "padding column " << c << " written";
          continue;
        }
        ASSERT_TRUE(std::isfinite(value)) << "row " << r << " column " << c << " unwritten";
        ASSERT_LE(std::fabs(value - expected.sums[r * shape.n + c]), expected.bound[r * shape.n + c])
            << r << ", " << c;
      }
    }
    // Planted: each warp's later pieces on its first piece's W (the pipelined loop's hand-over dropped).
    if ((shape.k + 127) / 128 > 16) {
      auto y = poisoned<float>(shape.rows * ldy);
      cuda::SkinnyGemm planted{xd, shape.rows, shape.k, wd, shape.n, y.data(), ldy, cuda::SkinnyEpilogue::F32};
      planted.planted_stale_piece = true;
      ASSERT_TRUE(cuda::skinny_gemm(planted, true, nullptr).ok());
      const std::vector<float> stale = download(y, shape.rows * ldy);
      int outside = 0;
      for (int r = 0; r < shape.rows; ++r) {
        for (int64_t c = 0; c < shape.n; ++c) {
          const size_t cell = static_cast<size_t>(r * shape.n + c);
          outside += !(std::fabs(stale[r * ldy + c] - expected.sums[cell]) <= expected.bound[cell]);
        }
      }
      EXPECT_GT(outside, 0) << "the planted stale pieces went unseen";
    }
    // bf16 out: one rounding of the fp32 sum.
    auto y16 = poisoned<bf16>(shape.rows * shape.n);
    const cuda::SkinnyGemm bf16_args{xd, shape.rows, shape.k, wd, shape.n, y16.data(), shape.n,
                                     cuda::SkinnyEpilogue::Bf16};
    ASSERT_TRUE(cuda::skinny_gemm(bf16_args, true, nullptr).ok());
    const std::vector<bf16> out16 = download(y16, shape.rows * shape.n);
    for (int r = 0; r < shape.rows; ++r) {
      for (int64_t c = 0; c < shape.n; ++c) {
        EXPECT_EQ(out16[r * shape.n + c].bits, float_to_bf16(f32_runs[0][r * ldy + c]).bits) << r << ", " << c;
      }
    }
    // SwiGLU of W as a stacked gate/up [2 F, k]: the bf16 GEMM then swiglu_stacked, bit for bit.
    const int64_t ff = shape.n / 2;
    auto fused = poisoned<bf16>(shape.rows * ff), unfused = poisoned<bf16>(shape.rows * ff);
    const cuda::SkinnyGemm swiglu_args{xd, shape.rows, shape.k, wd, 2 * ff, fused.data(), ff,
                                       cuda::SkinnyEpilogue::Swiglu};
    ASSERT_TRUE(cuda::skinny_gemm(swiglu_args, true, nullptr).ok());
    ASSERT_TRUE(cuda::swiglu_stacked(reinterpret_cast<const cuda::bf16_t*>(y16.data()), shape.rows, ff,
                                     reinterpret_cast<cuda::bf16_t*>(unfused.data()), nullptr)
                    .ok());
    EXPECT_EQ(count_bitwise_equal(download(fused, shape.rows * ff), download(unfused, shape.rows * ff)),
              static_cast<int>(shape.rows * ff));
  }
  // On a stream of its own, launched programmatically right after the kernel that writes its x (residual_norm,
  // which lets its dependents start at once): the bits of the same product on a finished x (an x load scheduled
  // above the programmatic wait reads x before it is written: batch A's race).
  {
    const int rows = 9;
    const int64_t n = 2048, k = 2048;
    const std::vector<bf16> start = random_values(rng, rows * k, 3.0f);
    auto w = upload(random_values(rng, n * k, 0.5f));
    auto weight = upload(random_floats(rng, k, 0.5f, 1.5f));
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 3; ++run) {
      auto hidden = upload(start);
      auto x = poisoned<bf16>(rows * k);
      auto y = poisoned<float>(rows * n);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_TRUE(cuda::residual_norm(reinterpret_cast<cuda::bf16_t*>(hidden.data()), nullptr, rows, k, weight.data(),
                                      1e-5f, reinterpret_cast<cuda::bf16_t*>(x.data()), stream)
                      .ok());
      const cuda::SkinnyGemm args{reinterpret_cast<const cuda::bf16_t*>(x.data()), rows, k,
                                  reinterpret_cast<const cuda::bf16_t*>(w.data()), n, y.data(), n,
                                  cuda::SkinnyEpilogue::F32};
      ASSERT_TRUE(cuda::skinny_gemm(args, run > 0, stream).ok());
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      runs.push_back(download(y, rows * n));
    }
    cudaStreamDestroy(stream);
    for (int run = 1; run < 3; ++run) {
      int equal = 0;
      for (size_t i = 0; i < runs[0].size(); ++i)
        equal += std::bit_cast<uint32_t>(runs[run][i]) == std::bit_cast<uint32_t>(runs[0][i]);
      EXPECT_EQ(equal, static_cast<int>(runs[0].size())) << "programmatic run " << run;
    }
  }
  // Refusals: 17 rows, K not a multiple of 8, SwiGLU of an odd n.
  const cuda::SkinnyGemm tall{nullptr, 17, 64, nullptr, 16, nullptr, 16, cuda::SkinnyEpilogue::Bf16};
  EXPECT_EQ(cuda::skinny_gemm(tall, true, nullptr).code(), ErrorCode::InvalidArgument);
  const cuda::SkinnyGemm odd{nullptr, 4, 60, nullptr, 16, nullptr, 16, cuda::SkinnyEpilogue::Bf16};
  EXPECT_EQ(cuda::skinny_gemm(odd, true, nullptr).code(), ErrorCode::InvalidArgument);
  const cuda::SkinnyGemm odd_swiglu{nullptr, 4, 64, nullptr, 15, nullptr, 8, cuda::SkinnyEpilogue::Swiglu};
  EXPECT_EQ(cuda::skinny_gemm(odd_swiglu, true, nullptr).code(), ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace ls::dspark
#endif  // LS_HAVE_CUDA
