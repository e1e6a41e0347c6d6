// The drafter's w8a8 GEMM on AVX-512 VNNI: rows of x quantized to int8 on their own, exact integer dot products
// (vpdpbusd on x + 128 as unsigned bytes against 16-column panels, minus 128 times each column's code sum), then one
// fp32 scaling per output. No horizontal sums: a panel step gives 16 columns' partial dots in one register.
// GCC 12's AVX-512 headers trip -Wuninitialized inside their own _mm512_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "compute/cpu/cpu_features.h"
#include "compute/cpu/draft_ops.h"
#include "compute/cpu/simd_avx512.h"

#define LS_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

namespace ls::compute {
namespace {

constexpr int64_t kPanelColumns = 16;  // columns per panel: one 16-lane int32 accumulator
constexpr int kPanelsPerTile = 2;      // a tile: up to 8 rows x 2 panels (32 columns), 16 accumulators at most
constexpr int kTileRows = 8;
// One or two rows: 8 panels (128 columns) a tile, so 8-16 accumulator chains hide vpdpbusd's latency instead of 2-4
// (set_int8_wide_tiles; the same integer sums, so the same bits).
constexpr int kWidePanels = 8;
constexpr int64_t kWideRows = 2;
constexpr int64_t kPrefetchTiles = 2;  // how many tiles ahead the weights are prefetched
// Below this many multiply-adds (about 10 us on one thread) a call runs on the calling thread: waking the pool costs
// more than it saves (a few-row absorb's k/v projections, the block's k/v at one stream).
constexpr int64_t kInlineMultiplyAdds = int64_t{1} << 20;

int64_t quads(int64_t K) { return (K + 3) / 4; }

// out [quads(K) * 4] = code + 128 of one row (128, i.e. code 0, past K), its scale into `scale` (0 for a zero row,
// NaN when the row holds a non-finite value).
LS_TARGET_VNNI void quantize_row(const float* x, int64_t K, int64_t padded, uint8_t* out, float& scale) {
  __m512 largest = _mm512_setzero_ps();
  bool finite = true;
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mask = simd::first_lanes(K - k);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + k);
    // |v| < inf is false for NaN and infinities
    finite = finite && _mm512_mask_cmp_ps_mask(mask, _mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_LT_OQ) == mask;
    largest = _mm512_max_ps(largest, _mm512_abs_ps(v));
  }
  scale = finite ? _mm512_reduce_max_ps(largest) / 127.0f : std::numeric_limits<float>::quiet_NaN();
  std::memset(out, 128, static_cast<size_t>(padded));
  if (!(scale > 0.0f) || !std::isfinite(scale)) return;
  const __m512 divisor = _mm512_set1_ps(scale), low = _mm512_set1_ps(-127.0f), high = _mm512_set1_ps(127.0f);
  const __m512i offset = _mm512_set1_epi32(128);
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mask = simd::first_lanes(K - k);
    const __m512 q = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + k), divisor),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i code = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(q, low), high)), offset);
    _mm_mask_storeu_epi8(out + k, mask, _mm512_cvtepi32_epi8(code));
  }
}

// acc [MR][P] = sum over k of (x code + 128) * weight code for MR rows of xq (stride `padded`) and P panels from
// `panels` (each quads(K) * 64 bytes).
template <int MR, int P>
LS_TARGET_VNNI void tile_vnni(const uint8_t* xq, int64_t padded, const int8_t* panels, int64_t K4, __m512i* out,
                              const int8_t* next, int64_t next_bytes) {
  __m512i acc[MR][P];
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[m][p] = _mm512_setzero_si512();
  // `next` (the weights a later tile reads) is prefetched one line per step, spread over this tile's steps, so the
  // stream from memory keeps going while this tile computes.
  const int64_t lines = next_bytes / 64, per_step = (lines + K4 - 1) / K4;
  for (int64_t j = 0; j < K4; ++j) {
    for (int64_t line = j * per_step; line < std::min(lines, (j + 1) * per_step); ++line)
      _mm_prefetch(reinterpret_cast<const char*>(next + line * 64), _MM_HINT_T0);
    __m512i w[P];
    #pragma GCC unroll 16
    for (int p = 0; p < P; ++p) w[p] = _mm512_loadu_si512(panels + (p * K4 + j) * 64);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      int32_t four;
      std::memcpy(&four, xq + m * padded + 4 * j, sizeof(four));
      const __m512i xv = _mm512_set1_epi32(four);
      #pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[m][p] = _mm512_dpbusd_epi32(acc[m][p], xv, w[p]);
    }
  }
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int p = 0; p < P; ++p) out[m * P + p] = acc[m][p];
}

template <int P>
void tile_rows(int64_t rows, const uint8_t* xq, int64_t padded, const int8_t* panels, int64_t K4, __m512i* out,
               const int8_t* next, int64_t next_bytes) {
  switch (rows) {
    case 1: return tile_vnni<1, P>(xq, padded, panels, K4, out, next, next_bytes);
    case 2: return tile_vnni<2, P>(xq, padded, panels, K4, out, next, next_bytes);
    case 3: return tile_vnni<3, P>(xq, padded, panels, K4, out, next, next_bytes);
    case 4: return tile_vnni<4, P>(xq, padded, panels, K4, out, next, next_bytes);
    case 5: return tile_vnni<5, P>(xq, padded, panels, K4, out, next, next_bytes);
    case 6: return tile_vnni<6, P>(xq, padded, panels, K4, out, next, next_bytes);
    case 7: return tile_vnni<7, P>(xq, padded, panels, K4, out, next, next_bytes);
    default: return tile_vnni<8, P>(xq, padded, panels, K4, out, next, next_bytes);
  }
}

// A wide tile (3..kWidePanels panels) of one or two rows.
template <int P>
void tile_few_rows(int64_t rows, const uint8_t* xq, int64_t padded, const int8_t* panels, int64_t K4, __m512i* out,
                   const int8_t* next, int64_t next_bytes) {
  if (rows == 1) return tile_vnni<1, P>(xq, padded, panels, K4, out, next, next_bytes);
  return tile_vnni<2, P>(xq, padded, panels, K4, out, next, next_bytes);
}

// `rows` rows (up to kTileRows; up to kWideRows past 2 panels) by `panels` panels; dots [rows][panels].
void tile_any(int64_t rows, int64_t panels_wide, const uint8_t* xq, int64_t padded, const int8_t* panels, int64_t K4,
              __m512i* out, const int8_t* next, int64_t next_bytes) {
  switch (panels_wide) {
    case 1: return tile_rows<1>(rows, xq, padded, panels, K4, out, next, next_bytes);
    case 2: return tile_rows<2>(rows, xq, padded, panels, K4, out, next, next_bytes);
    case 3: return tile_few_rows<3>(rows, xq, padded, panels, K4, out, next, next_bytes);
    case 4: return tile_few_rows<4>(rows, xq, padded, panels, K4, out, next, next_bytes);
    case 5: return tile_few_rows<5>(rows, xq, padded, panels, K4, out, next, next_bytes);
    case 6: return tile_few_rows<6>(rows, xq, padded, panels, K4, out, next, next_bytes);
    case 7: return tile_few_rows<7>(rows, xq, padded, panels, K4, out, next, next_bytes);
    default: return tile_few_rows<8>(rows, xq, padded, panels, K4, out, next, next_bytes);
  }
}

std::atomic<bool>& wide_switch() {
  static std::atomic<bool> on{[] {
    const char* text = std::getenv("LS_CPU_INT8_WIDE");
    return text != nullptr && std::atoi(text) != 0;
  }()};
  return on;
}

// y [16 columns from col] of one row = store(float(dot - 128 * code_sum) * row scale * column scale).
LS_TARGET_VNNI void finish_panel(const __m512i* dots, const int32_t* code_sums, const float* scales, float row_scale,
                                 bool round, int64_t col, int64_t N, float* y) {
  const __mmask16 mask = simd::first_lanes(N - col);
  if (!std::isfinite(row_scale)) {
    _mm512_mask_storeu_ps(y + col, mask, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
    return;
  }
  const __m512i offset = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(mask, code_sums + col), 7);
  const __m512 value = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(*dots, offset)),
                                                   _mm512_set1_ps(row_scale)),
                                     _mm512_maskz_loadu_ps(mask, scales + col));
  _mm512_mask_storeu_ps(y + col, mask, simd::store16(round, value));
}

}  // namespace

bool int8_wide_tiles() { return wide_switch().load(std::memory_order_relaxed); }
void set_int8_wide_tiles(bool on) { wide_switch().store(on, std::memory_order_relaxed); }

void sum_int8_codes(const int8_t* codes, int64_t rows, int64_t cols, int32_t* code_sums) {
  for (int64_t row = 0; row < rows; ++row) {
    int32_t sum = 0;
    for (int64_t k = 0; k < cols; ++k) sum += codes[row * cols + k];
    code_sums[row] = sum;
  }
}

std::vector<int8_t> pack_int8_panels(const int8_t* codes, int64_t rows, int64_t cols) {
  const int64_t K4 = quads(cols), panels = (rows + kPanelColumns - 1) / kPanelColumns;
  std::vector<int8_t> out(static_cast<size_t>(panels * K4 * 64), 0);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t k = 0; k < cols; ++k)
      out[static_cast<size_t>(((row / kPanelColumns) * K4 + k / 4) * 64 + (row % kPanelColumns) * 4 + k % 4)] =
          codes[row * cols + k];
  return out;
}

int8_t int8_panel_code(const int8_t* panels, int64_t cols, int64_t row, int64_t col) {
  return panels[((row / kPanelColumns) * quads(cols) + col / 4) * 64 + (row % kPanelColumns) * 4 + col % 4];
}

bool matmul_int8_vnni(const OpContext& ctx, const float* x, int64_t rows, const Int8Matrix& w, float* y) {
  if (!cpu_features().avx512_vnni) return false;
  if (rows <= 0 || w.rows <= 0) return true;
  const int64_t K = w.cols, N = w.rows, K4 = quads(K), padded = K4 * 4;
  thread_local std::vector<uint8_t> xq;      // [rows, padded]
  thread_local std::vector<float> x_scales;  // [rows]
  thread_local std::vector<int32_t> sums;    // [N] when the matrix carries none
  thread_local std::vector<int8_t> packed;   // the panels when the matrix carries none
  xq.resize(static_cast<size_t>(rows * padded));
  x_scales.resize(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) quantize_row(x + row * K, K, padded, xq.data() + row * padded, x_scales[row]);
  const int32_t* code_sums = w.code_sums;
  if (!code_sums) {
    sums.resize(static_cast<size_t>(N));
    sum_int8_codes(w.codes, N, K, sums.data());
    code_sums = sums.data();
  }
  const int8_t* panels = w.panels;
  if (!panels) {
    packed = pack_int8_panels(w.codes, N, K);
    panels = packed.data();
  }
  const uint8_t* q = xq.data();
  const float* row_scales = x_scales.data();
  const bool round = ctx.rounds_to_bf16();
  const int64_t panel_count = (N + kPanelColumns - 1) / kPanelColumns;
  const int64_t per_tile = rows <= kWideRows && int8_wide_tiles() ? kWidePanels : kPanelsPerTile;
  const int64_t tiles = (panel_count + per_tile - 1) / per_tile;
  auto run = [&](int, int64_t tile_begin, int64_t tile_end) {
    __m512i dots[kTileRows * kPanelsPerTile > kWideRows * kWidePanels ? kTileRows * kPanelsPerTile
                                                                      : kWideRows * kWidePanels];
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int64_t first_panel = tile * per_tile;
      const int64_t width = std::min<int64_t>(per_tile, panel_count - first_panel);
      const int8_t* tile_panels = panels + first_panel * K4 * 64;
      // The tile kPrefetchTiles ahead (the panels are one contiguous run), while the first row group computes.
      const int64_t ahead_panel = first_panel + kPrefetchTiles * per_tile;
      const int64_t ahead_panels = std::max<int64_t>(0, std::min<int64_t>(per_tile, panel_count - ahead_panel));
      const int64_t ahead_bytes = ahead_panels * K4 * 64;
      for (int64_t row = 0; row < rows; row += kTileRows) {
        const int64_t count = std::min<int64_t>(kTileRows, rows - row);
        const int8_t* next = panels + ahead_panel * K4 * 64;
        const int64_t next_bytes = row == 0 ? ahead_bytes : 0;
        tile_any(count, width, q + row * padded, padded, tile_panels, K4, dots, next, next_bytes);
        for (int64_t m = 0; m < count; ++m)
          for (int64_t p = 0; p < width; ++p)
            finish_panel(&dots[m * width + p], code_sums, w.scales, row_scales[row + m], round,
                         (first_panel + p) * kPanelColumns, N, y + (row + m) * N);
      }
    }
  };
  // Few rows: tiles claimed one by one (a late or preempted worker costs its share, not a wait); many rows: one
  // contiguous part per thread.
  if (!ctx.pool || rows * N * K < kInlineMultiplyAdds)
    run(0, 0, tiles);
  else if (rows <= 16)
    ctx.pool->parallel_chunks(tiles, run);
  else
    ctx.pool->parallel_for(tiles, run);
  return true;
}

}  // namespace ls::compute
