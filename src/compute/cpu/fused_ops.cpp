// Few-row fused CPU steps: matmul_columns_then_avx512 with the row-wise op of each step as the columns' epilogue.
#include "compute/cpu/fused_ops.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "compute/cpu/matmul_avx512.h"

namespace ls::compute {
namespace {

std::atomic<unsigned>& fusion_mask() {
  static std::atomic<unsigned> mask{[] {
    const char* text = std::getenv("LS_CPU_FUSED");
    return text ? static_cast<unsigned>(std::atoi(text)) & kFuseAll : kFuseDefault;
  }()};
  return mask;
}

bool fuses(unsigned step) { return (fusion_mask().load(std::memory_order_relaxed) & step) != 0; }

}  // namespace

bool fuses_markov_scan() { return fuses(kFuseScan); }
unsigned cpu_fusion_steps() { return fusion_mask().load(std::memory_order_relaxed); }
bool cpu_fusion() { return fusion_mask().load(std::memory_order_relaxed) != 0; }
void set_cpu_fusion(bool on) { fusion_mask().store(on ? kFuseAll : 0u, std::memory_order_relaxed); }
void set_cpu_fusion_steps(unsigned steps) { fusion_mask().store(steps & kFuseAll, std::memory_order_relaxed); }

bool matmul_swiglu(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w1, const Matrix& w3,
                   float* gate, float* up, float* act) {
  if (!fuses(kFuseSwiglu)) return false;
  const int64_t F = w1.rows;
  const OpContext here{nullptr, ctx.mode};  // each thread finishes its own columns
  const Matrix ws[] = {w1, w3};
  float* const ys[] = {gate, up};
  return matmul_columns_then_avx512(ctx, x, rows, ws, ys, 0, [&](int64_t begin, int64_t end) {
    for (int64_t row = 0; row < rows; ++row)
      swiglu(here, gate + row * F + begin, up + row * F + begin, end - begin, act + row * F + begin);
  });
}

bool matmul_add_residual(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, float* y, float* h) {
  if (!fuses(kFuseResidual)) return false;
  const int64_t N = w.rows;
  const OpContext here{nullptr, ctx.mode};
  float* const ys[] = {y};
  return matmul_columns_then_avx512(ctx, x, rows, std::span<const Matrix>(&w, 1), ys, 0,
                                    [&](int64_t begin, int64_t end) {
    for (int64_t row = 0; row < rows; ++row) add_residual(here, h + row * N + begin, y + row * N + begin, end - begin);
  });
}

bool matmul_conv_in(const OpContext& ctx, const float* u, int64_t rows, const Matrix& in_proj, float* bcx,
                    const std::function<void(int64_t begin, int64_t end)>& channels) {
  const int64_t width = in_proj.rows / 3;
  if (!fuses(kFuseConv) || in_proj.rows != 3 * width || width % kPackedColumns != 0) return false;
  // B, C and x as three matrices of `width` outputs each, written into one [rows, 3 * width] buffer.
  const Matrix ws[] = {column_slice(in_proj, 0, width), column_slice(in_proj, width, 2 * width),
                       column_slice(in_proj, 2 * width, 3 * width)};
  float* const ys[] = {bcx, bcx + width, bcx + 2 * width};
  return matmul_columns_then_avx512(ctx, u, rows, ws, ys, 3 * width, channels);
}

}  // namespace ls::compute
