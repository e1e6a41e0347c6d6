// AVX-512 GEMM y = x @ W^T. Every (row, column) is one 16-lane accumulator over K in order, then one fixed lane tree,
// so a row's result never depends on how many rows share the call, its tile, or the thread count (threads split
// columns). Rows whose values are all bf16-exact take vdpbf16ps against bf16 weights (converting them is lossless);
// other rows, and fp32 weights, take fp32 FMA. The choice is made per row from that row's values alone.
#include "compute/cpu/matmul_avx512.h"

// Register tiles must be fully unrolled (-O2 does not) so that the accumulators live in registers.
// GCC 12's AVX-512 headers trip -Wuninitialized inside their own _mm512_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/check.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/simd_avx512.h"

#define LS_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

namespace ls::compute {
namespace {

using simd::reduce_lanes;
using simd::reduce_lanes8;

constexpr int64_t kRowTile = 128;     // rows kept hot in L2 while a column block of weights is swept
constexpr int64_t kColumnChunk = 16;  // columns per unit of thread work
constexpr int kTileRows = 4;          // register tile: rows x columns of 16-lane accumulators
constexpr int kTileColumns = 6;
constexpr int kFewRowsColumns = 8;    // register tile width when fewer than kTileRows rows are left
constexpr int64_t kVerifyRows = 16;   // up to this many rows, 2-row x 8-column tiles walk the columns once
// Rows per verify tile: 2 x 8 accumulators + 8 weight vectors fit the 32 registers; 3 x 8 spilled (on this Zen 4
// host a 2-row group ran 16-25% faster per row at 4..16 rows, thread CPU time; see docs/benchmarks.md).
constexpr int64_t kVerifyGroupRows = 2;
constexpr int64_t kPrefetchGroups = 2;  // how many 8-column groups ahead the verify path prefetches
// Up to this many rows a verify window takes no software prefetch: the hardware prefetcher keeps up with its compute,
// and a prefetch per line cost 30-40% of the tiles' rate with the weights in cache (this host, cpu7: 4 rows 55 -> 87
// GMAC/s hot; a nano verify of 4 / 5 rows 1.45 / 1.74 -> 1.36 / 1.58 ms, one thread). From 7 rows (the drafter's
// block) the prefetch pays: without it a cold pass ran 10-50% slower.
constexpr int64_t kUnprefetchedVerifyRows = 6;
constexpr int64_t kColumnBlockBytes = 256 * 1024;  // weights of one column block, swept by every row quad
constexpr size_t kMaxGroup = 4;                   // matrices in one matmul_group call
constexpr int64_t kStreamChunkBytes = 128 * 1024;  // weights per chunk the threads claim when streaming (few rows)
constexpr int64_t kRunLeadBytes = 2048;  // a fused chunk's later weight runs: bytes fetched ahead at the chunk's start

// kStreamChunkBytes, or LS_CPU_CHUNK_KB KiB when set at start (A/B timing of the chunk size; any size gives the same
// bits: chunks split columns).
std::atomic<int64_t>& chunk_bytes_setting() {
  static std::atomic<int64_t> bytes{[] {
    const char* text = std::getenv("LS_CPU_CHUNK_KB");
    const int64_t kib = text ? std::atoll(text) : 0;
    return kib > 0 ? kib * 1024 : kStreamChunkBytes;
  }()};
  return bytes;
}
int64_t stream_chunk_bytes() { return chunk_bytes_setting().load(std::memory_order_relaxed); }

// The verify path's prefetch: windows of more than `unprefetched` rows prefetch `groups` 8-column groups ahead
// (kUnprefetchedVerifyRows, kPrefetchGroups; set_verify_prefetch for A/B timing: the bits never depend on it).
std::atomic<int64_t> g_unprefetched_rows{kUnprefetchedVerifyRows};
std::atomic<int64_t> g_prefetch_groups{kPrefetchGroups};

// Many-row calls split each matrix's 16-column chunks statically (as before) unless LS_CPU_CHUNKED_ROWS=1 at start or
// set_many_rows_chunked(true) makes them claim the chunks one at a time (A/B timing; the bits never depend on it;
// 2-thread prefills of 64-200 rows on the loaded host came out either way by 10-30 %).
std::atomic<bool> g_many_rows_chunked{[] {
  const char* text = std::getenv("LS_CPU_CHUNKED_ROWS");
  return text && text[0] == '1';
}()};
bool many_rows_chunked() { return g_many_rows_chunked.load(std::memory_order_relaxed); }

// Where a column's weights sit: value (c, k) at column(c) + (k / 32) * step + k % 32. Row-major: column(c) = c * K,
// step 32. Packed panels (Matrix::packed): column(c) = panel c / 8 + (c % 8) * 32, step 8 * 32.
template <typename Weight>
struct WeightLayout {
  const Weight* base = nullptr;
  int64_t K = 0;
  bool packed = false;
  int64_t panel_values = 0;  // values per panel when packed: ceil(K / 32) * 32 * 8
  WeightLayout() = default;
  WeightLayout(const Weight* base_, int64_t K_, bool packed_)
      : base(base_), K(K_), packed(packed_),
        panel_values(packed_ ? (K_ + kPackedDepth - 1) / kPackedDepth * kPackedDepth * kPackedColumns : 0) {}
  const Weight* column(int64_t c) const {
    if (!packed) return base + c * K;
    return base + (c / kPackedColumns) * panel_values + (c % kPackedColumns) * kPackedDepth;
  }
  int64_t step() const { return packed ? kPackedColumns * kPackedDepth : kPackedDepth; }
};

// ---- bf16 x bf16 -> fp32: 32 values of K per step, lane i holds the pair (2i, 2i+1) of every step ----

template <int MR, int NR>
LS_TARGET_AVX512_BF16 void tile_bf16(const uint16_t* x, const WeightLayout<uint16_t>& layout, int64_t col, int64_t K,
                                     int64_t ldy, float* y) {
  const uint16_t* w[NR];
  #pragma GCC unroll 16
  for (int n = 0; n < NR; ++n) w[n] = layout.column(col + n);
  const int64_t step = layout.step();
  __m512 acc[MR][NR];
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
  int64_t k = 0, offset = 0;
  if (layout.packed && col % kPackedColumns + NR <= kPackedColumns) {
    // Every column of the tile in one panel: one pointer, the columns at fixed 64-byte displacements (fewer
    // instructions per step than NR pointers; the same loads and the same arithmetic).
    const uint16_t* panel = w[0];
    for (; k + 32 <= K; k += 32, offset += step) {
      __m512bh wv[NR];
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) wv[n] = (__m512bh)_mm512_loadu_si512(panel + offset + n * kPackedDepth);
      #pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
        #pragma GCC unroll 16
        for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
      }
    }
  }
  for (; k + 32 <= K; k += 32, offset += step) {
    __m512bh wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = (__m512bh)_mm512_loadu_si512(w[n] + offset);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
    }
  }
  if (k < K) {  // zero-filled tail: the same extra step for every row
    const __mmask32 mask = _cvtu32_mask32((1u << (K - k)) - 1u);
    __m512bh wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w[n] + offset);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], xv, wv[n]);
    }
  }
  if constexpr (NR == 8) {
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) _mm256_storeu_ps(y + m * ldy, reduce_lanes8(acc[m]));
  } else {
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) y[m * ldy + n] = reduce_lanes(acc[m][n]);
  }
}

// x [rows, K] as bf16 bits (truncated); returns whether the row was bf16-exact (the truncation lost nothing).
LS_TARGET_AVX512 bool row_to_bf16(const float* x, int64_t K, uint16_t* out) {
  __m512i lost = _mm512_setzero_si512();
  const __m512i low_half = _mm512_set1_epi32(0xffff);
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512i bits = _mm512_loadu_si512(x + k);
    lost = _mm512_or_si512(lost, _mm512_and_si512(bits, low_half));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
  }
  if (k < K) {
    const __mmask16 mask = _cvtu32_mask16((1u << (K - k)) - 1u);
    const __m512i bits = _mm512_maskz_loadu_epi32(mask, x + k);
    lost = _mm512_or_si512(lost, _mm512_and_si512(bits, low_half));
    _mm256_mask_storeu_epi16(out + k, mask, _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
  }
  return _mm512_test_epi32_mask(lost, lost) == 0;
}

// ---- fp32 x against fp32 or bf16 weights: 16 values of K per step, FMA ----

template <typename Weight>
LS_TARGET_AVX512 inline __m512 load_weights16(const Weight* w, __mmask16 mask) {
  if constexpr (sizeof(Weight) == 2) {
    const __m256i raw = _mm256_maskz_loadu_epi16(mask, w);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  } else {
    return _mm512_maskz_loadu_ps(mask, w);
  }
}

template <int MR, int NR, typename Weight>
LS_TARGET_AVX512 void tile_fp32(const float* x, const WeightLayout<Weight>& layout, int64_t col, int64_t K,
                                int64_t ldy, float* y) {
  const Weight* w[NR];
  #pragma GCC unroll 16
  for (int n = 0; n < NR; ++n) w[n] = layout.column(col + n);
  const int64_t step = layout.step();
  __m512 acc[MR][NR];
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
  const __mmask16 all = 0xffff;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = load_weights16(w[n] + (k / 32) * step + k % 32, all);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  if (k < K) {
    const __mmask16 mask = _cvtu32_mask16((1u << (K - k)) - 1u);
    __m512 wv[NR];
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) wv[n] = load_weights16(w[n] + (k / 32) * step + k % 32, mask);
    #pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + m * K + k);
      #pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  #pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) y[m * ldy + n] = reduce_lanes(acc[m][n]);
}

// out [col_begin, col_end) += bias, then rounded to bf16 when asked: float_to_bf16 bit for bit (NaN kept quiet).
LS_TARGET_AVX512 void finish_outputs(float* out, const float* bias, int64_t col_begin, int64_t col_end, bool round) {
  if (!bias && !round) return;
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), high = _mm512_set1_epi32(0xffff0000);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  for (int64_t col = col_begin; col < col_end; col += 16) {
    const __mmask16 mask = col + 16 <= col_end ? __mmask16(0xffff) : _cvtu32_mask16((1u << (col_end - col)) - 1u);
    __m512 value = _mm512_maskz_loadu_ps(mask, out + col);
    if (bias) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, bias + col));
    if (round) {
      const __m512i bits = _mm512_castps_si512(value);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
      const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(half, lsb)), high);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), infinity);
      const __m512i quieted = _mm512_or_si512(_mm512_and_si512(bits, high), quiet);
      value = _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quieted));
    }
    _mm512_mask_storeu_ps(out + col, mask, value);
  }
}

// ---- tiling over a block of rows x columns (any tiling gives a row the same bits) ----

struct Bf16Tiles {
  const uint16_t* x;  // [rows, K] bf16 bits
  WeightLayout<uint16_t> w;  // [N, K] bf16 bits
  int64_t K, ldy;
  float* y;
  const char* weight_bytes(int64_t col) const { return reinterpret_cast<const char*>(w.column(col)); }
  template <int MR, int NR>
  void run(int64_t row, int64_t col) const {
    tile_bf16<MR, NR>(x + row * K, w, col, K, ldy, y + row * ldy + col);
  }
};

template <typename Weight>
struct Fp32Tiles {
  const float* x;   // [rows, K]
  WeightLayout<Weight> w;  // [N, K]
  int64_t K, ldy;
  float* y;
  const char* weight_bytes(int64_t col) const { return reinterpret_cast<const char*>(w.column(col)); }
  template <int MR, int NR>
  void run(int64_t row, int64_t col) const {
    tile_fp32<MR, NR>(x + row * K, w, col, K, ldy, y + row * ldy + col);
  }
};

// Runs the MR x NR tile at (row, col), or the narrowest tile that covers `width` < NR columns.
template <int MR, int NR, typename Tiles>
void narrow_tile(const Tiles& tiles, int64_t row, int64_t col, int64_t width) {
  if constexpr (NR > 1)
    if (width < NR) return narrow_tile<MR, NR - 1>(tiles, row, col, width);
  tiles.template run<MR, NR>(row, col);
}

template <int NR, typename Tiles>
void tile_rows(const Tiles& tiles, int64_t rows, int64_t row, int64_t col, int64_t width) {
  switch (rows) {
    case 1: return narrow_tile<1, NR>(tiles, row, col, width);
    case 2: return narrow_tile<2, NR>(tiles, row, col, width);
    case 3: return narrow_tile<3, NR>(tiles, row, col, width);
    default: return narrow_tile<kTileRows, NR>(tiles, row, col, width);
  }
}

// y [rows, cols] of one block. Few rows (decode, small verify): wide tiles, every weight streamed once. Many rows:
// a block of columns whose weights fit in L2 is swept by every row quad, so each y row is written in whole lines.
template <typename Tiles>
void block(const Tiles& tiles, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end,
           int64_t column_bytes) {
  if (row_end - row_begin < kTileRows) {
    for (int64_t col = col_begin; col < col_end; col += kFewRowsColumns)
      tile_rows<kFewRowsColumns>(tiles, row_end - row_begin, row_begin, col, std::min<int64_t>(kFewRowsColumns, col_end - col));
    return;
  }
  if (row_end - row_begin <= g_unprefetched_rows.load(std::memory_order_relaxed)) {
    // A short verify window: each 8-column group runs every row while it is in L1, streaming the weights once: 2-row
    // tiles, but 3 + 2 for five rows (the first tile of a group, the one that waits on memory, the wider: a cold
    // 5-row verify 1.40-1.45 -> 1.23-1.29 ms against 2 + 3, one thread).
    for (int64_t col = col_begin; col < col_end; col += kFewRowsColumns)
      for (int64_t row = row_begin, take = 0; row < row_end; row += take) {
        const int64_t left = row_end - row;
        take = left == 5 || left == 3 ? 3 : std::min<int64_t>(kVerifyGroupRows, left);
        tile_rows<kFewRowsColumns>(tiles, take, row, col, std::min<int64_t>(kFewRowsColumns, col_end - col));
      }
    return;
  }
  if (row_end - row_begin <= kVerifyRows) {
    // A verify window: each 8-column group streams from memory once and is reused from L1 by every 2-row group,
    // while the group two ahead is prefetched into L2 a slice per row group (memory keeps streaming during compute).
    const int64_t groups = (row_end - row_begin + kVerifyGroupRows - 1) / kVerifyGroupRows;
    const int64_t group_bytes = kFewRowsColumns * column_bytes;
    const int64_t slice = (group_bytes / groups + 63) / 64 * 64;
    for (int64_t col = col_begin; col < col_end; col += kFewRowsColumns) {
      const int64_t ahead = col + g_prefetch_groups.load(std::memory_order_relaxed) * kFewRowsColumns;
      const char* next = ahead < col_end ? tiles.weight_bytes(ahead) : nullptr;
      for (int64_t group = 0, row = row_begin; row < row_end; ++group, row += kVerifyGroupRows) {
        if (next)
          for (int64_t offset = group * slice; offset < std::min(group_bytes, (group + 1) * slice); offset += 64)
            _mm_prefetch(next + offset, _MM_HINT_T1);
        tile_rows<kFewRowsColumns>(tiles, std::min<int64_t>(kVerifyGroupRows, row_end - row), row, col,
                                   std::min<int64_t>(kFewRowsColumns, col_end - col));
      }
    }
    return;
  }
  const int64_t block_columns = std::max<int64_t>(kTileColumns, kColumnBlockBytes / column_bytes / kTileColumns * kTileColumns);
  const int64_t quads = (row_end - row_begin + kTileRows - 1) / kTileRows;
  for (int64_t block_begin = col_begin; block_begin < col_end; block_begin += block_columns) {
    const int64_t block_end = std::min(col_end, block_begin + block_columns);
    // The next block's weights (contiguous) are prefetched into L2 a slice per row quad, so that its first quad does
    // not wait on memory.
    const char* next = tiles.weight_bytes(block_end);
    const int64_t next_bytes = (std::min(col_end, block_end + block_columns) - block_end) * column_bytes;
    const int64_t slice = (next_bytes / quads + 63) / 64 * 64;
    for (int64_t quad = 0, row = row_begin; row < row_end; ++quad, row += kTileRows) {
      for (int64_t offset = quad * slice; offset < std::min(next_bytes, (quad + 1) * slice); offset += 64)
        _mm_prefetch(next + offset, _MM_HINT_T1);
      for (int64_t col = block_begin; col < block_end; col += kTileColumns)
        tile_rows<kTileColumns>(tiles, std::min<int64_t>(kTileRows, row_end - row), row, col,
                                std::min<int64_t>(kTileColumns, block_end - col));
    }
  }
}

// `bytes` of anonymous memory starting on a 2 MiB boundary with transparent huge pages asked for (streaming the
// weights then takes far fewer TLB misses: ~35% more read bandwidth on the development VM). The mapping ends at the
// last 4 KiB page of the buffer, so a partial last huge page falls back to small pages instead of wasting memory.
std::shared_ptr<bf16> huge_page_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20, kPage = 4096;
  const size_t length = (bytes + kPage - 1) / kPage * kPage;
  void* mapped = mmap(nullptr, length + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  LS_CHECK(mapped != MAP_FAILED, "out of memory packing a weight matrix");
  const uintptr_t raw = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t start = (raw + kHuge - 1) / kHuge * kHuge;
  if (start > raw) munmap(mapped, start - raw);
  const uintptr_t tail = start + length, raw_end = raw + length + kHuge;
  if (raw_end > tail) munmap(reinterpret_cast<void*>(tail), raw_end - tail);
  madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);  // best effort: small pages if refused
  return std::shared_ptr<bf16>(reinterpret_cast<bf16*>(start),
                               [length](bf16* p) { munmap(static_cast<void*>(p), length); });
}

// The panel layout's length in values (Matrix::packed) for a [N, K] matrix.
int64_t panel_values(int64_t N, int64_t K) {
  const int64_t depth = (K + kPackedDepth - 1) / kPackedDepth * kPackedDepth;
  return (N + kPackedColumns - 1) / kPackedColumns * depth * kPackedColumns;
}

// Writes the panels of the bf16 matrix `view` to `out` [panel_values(N, K)].
void pack_panels(const Matrix& view, bf16* out) {
  const int64_t N = view.rows, K = view.cols;
  const int64_t depth = (K + kPackedDepth - 1) / kPackedDepth * kPackedDepth;
  const int64_t panels = (N + kPackedColumns - 1) / kPackedColumns;
  for (int64_t panel = 0; panel < panels; ++panel)
    for (int64_t k = 0; k < depth; k += kPackedDepth)
      for (int64_t n = 0; n < kPackedColumns; ++n) {
        const int64_t col = panel * kPackedColumns + n;
        for (int64_t i = 0; i < kPackedDepth; ++i)
          *out++ = col < N && k + i < K ? view.b16[col * K + k + i] : bf16{};
      }
}

}  // namespace

int pack_for_cpu(std::span<OwnedMatrix* const> matrices) {
  if (!cpu_features().avx512) return 0;
  std::vector<OwnedMatrix*> chosen;
  std::vector<int64_t> offsets;  // in values; each panel set starts on a 64-byte boundary
  int64_t total = 0;
  for (OwnedMatrix* matrix : matrices) {
    const Matrix view = matrix->view();
    if (!view.b16 || view.rows <= 0 || view.cols <= 0) continue;
    chosen.push_back(matrix);
    offsets.push_back(total);
    total += (panel_values(view.rows, view.cols) + 31) / 32 * 32;
  }
  if (chosen.empty()) return 0;
  std::shared_ptr<bf16> arena = huge_page_buffer(static_cast<size_t>(total) * sizeof(bf16));
  for (size_t i = 0; i < chosen.size(); ++i) {
    pack_panels(chosen[i]->view(), arena.get() + offsets[i]);
    chosen[i]->packed = std::shared_ptr<const bf16>(arena, arena.get() + offsets[i]);  // shares the arena
  }
  return static_cast<int>(chosen.size());
}

bool pack_for_cpu(OwnedMatrix& matrix) {
  OwnedMatrix* one = &matrix;
  return pack_for_cpu(std::span<OwnedMatrix* const>(&one, 1)) == 1;
}

void set_many_rows_chunked(bool on) { g_many_rows_chunked.store(on); }

void set_verify_prefetch(int64_t unprefetched_rows, int64_t groups) {
  g_unprefetched_rows.store(unprefetched_rows >= 0 ? unprefetched_rows : kUnprefetchedVerifyRows);
  g_prefetch_groups.store(groups > 0 ? groups : kPrefetchGroups);
}

int64_t set_stream_chunk_bytes(int64_t bytes) {
  return chunk_bytes_setting().exchange(bytes > 0 ? bytes : kStreamChunkBytes, std::memory_order_relaxed);
}

const char* matmul_avx512_name() {
  const CpuFeatures& features = cpu_features();
  if (features.avx512_bf16) return "avx512-bf16";
  if (features.avx512) return "avx512f";
  return nullptr;
}

namespace {

// One matrix of a call, ready to run: its tile runners and its first chunk in the call's list of chunks.
struct Prepared {
  const Matrix* w = nullptr;
  Bf16Tiles bf16_tiles;
  Fp32Tiles<uint16_t> bf16_weight_tiles;
  Fp32Tiles<float> fp32_tiles;
  int64_t first_chunk = 0;
};

Prepared prepare(const Matrix& w, const float* x, const uint16_t* x_bf16, float* y, int64_t ldy = 0) {
  const int64_t K = w.cols, N = ldy > 0 ? ldy : w.rows;  // N: the output's row stride
  const bool packed = w.b16 && w.packed;
  const uint16_t* w_bits = reinterpret_cast<const uint16_t*>(packed ? w.packed : w.b16);
  const WeightLayout<uint16_t> bf16_layout{w_bits, K, packed};
  return Prepared{&w, Bf16Tiles{x_bf16, bf16_layout, K, N, y}, Fp32Tiles<uint16_t>{x, bf16_layout, K, N, y},
                  Fp32Tiles<float>{x, WeightLayout<float>{w.f32, K, false}, K, N, y}, 0};
}

// Columns [col_begin, col_end) of every row of one matrix; is_bf16 [rows] picks each row's kernel.
void run_columns(const Prepared& m, const uint8_t* is_bf16, int64_t rows, bool round, int64_t col_begin,
                 int64_t col_end) {
  const Matrix& w = *m.w;
  const int64_t K = w.cols, ldy = m.bf16_tiles.ldy;
  for (int64_t tile_begin = 0; tile_begin < rows; tile_begin += kRowTile) {
    const int64_t tile_end = std::min(rows, tile_begin + kRowTile);
    // Runs of rows that take the same kernel.
    for (int64_t run_begin = tile_begin; run_begin < tile_end;) {
      int64_t run_end = run_begin + 1;
      while (run_end < tile_end && is_bf16[run_end] == is_bf16[run_begin]) ++run_end;
      if (is_bf16[run_begin])
        block(m.bf16_tiles, run_begin, run_end, col_begin, col_end, 2 * K);
      else if (w.b16)
        block(m.bf16_weight_tiles, run_begin, run_end, col_begin, col_end, 2 * K);
      else
        block(m.fp32_tiles, run_begin, run_end, col_begin, col_end, 4 * K);
      run_begin = run_end;
    }
    for (int64_t row = tile_begin; row < tile_end; ++row)
      finish_outputs(m.bf16_tiles.y + row * ldy, w.bias, col_begin, col_end, round);
  }
}

// The rows of x as bf16 bits and which of them are bf16-exact (they take the bf16 dot kernel: bf16 weights and a
// CPU with vdpbf16ps). Both live in the calling thread's buffers until its next call; workers read them through
// the pointers.
struct RowKinds {
  const uint16_t* x_bf16;  // [rows, K]
  const uint8_t* is_bf16;  // [rows]
};
RowKinds row_kinds(const float* x, int64_t rows, int64_t K, bool bf16_weights) {
  thread_local std::vector<uint16_t> x_bf16;
  thread_local std::vector<uint8_t> row_is_bf16;
  row_is_bf16.assign(rows, 0);
  if (bf16_weights && cpu_features().avx512_bf16) {
    x_bf16.resize(rows * K);
    for (int64_t row = 0; row < rows; ++row) row_is_bf16[row] = row_to_bf16(x + row * K, K, x_bf16.data() + row * K);
  }
  return RowKinds{x_bf16.data(), row_is_bf16.data()};
}

}  // namespace

// Columns [begin, end) of w as a matrix of their own (begin a multiple of kPackedColumns): the same weights.
Matrix column_slice(const Matrix& w, int64_t begin, int64_t end) {
  Matrix slice = w;
  slice.rows = end - begin;
  if (w.f32) slice.f32 = w.f32 + begin * w.cols;
  if (w.b16) slice.b16 = w.b16 + begin * w.cols;
  if (w.bias) slice.bias = w.bias + begin;
  if (w.packed) slice.packed = w.packed + begin / kPackedColumns * panel_values(kPackedColumns, w.cols);
  return slice;
}

namespace {

// The best column of one row so far, as greedy_token scans: NaN never wins, then strictly greater (ties to the lower
// column, since columns come in ascending order).
struct Best {
  bool found = false;
  float value = 0;
  int32_t column = 0;
  void offer(float candidate, int32_t index) {
    if (!found ? !std::isnan(candidate) : candidate > value) {
      found = true;
      value = candidate;
      column = index;
    }
  }
};

// The Best of values [width] offered in column order from `first_column` on, 16 columns at a time: each lane keeps its
// first largest non-NaN value, then the largest over the lanes wins with ties to the lowest column -- the column the
// one-by-one scan ends on (+0 and -0 tie there as here).
LS_TARGET_AVX512 Best best_of(const float* values, int64_t width, int32_t first_column) {
  __m512 best = _mm512_setzero_ps();
  __m512i best_column = _mm512_setzero_si512();
  __mmask16 found = 0;
  __m512i column = _mm512_add_epi32(_mm512_set1_epi32(first_column),
                                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i step = _mm512_set1_epi32(16);
  for (int64_t col = 0; col < width; col += 16) {
    const __mmask16 inside = simd::first_lanes(width - col);
    const __m512 v = _mm512_maskz_loadu_ps(inside, values + col);
    const __mmask16 number = _mm512_mask_cmp_ps_mask(inside, v, v, _CMP_ORD_Q);  // not NaN
    const __mmask16 better = number & (~found | _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ));
    best = _mm512_mask_mov_ps(best, better, v);
    best_column = _mm512_mask_mov_epi32(best_column, better, column);
    found |= number;
    column = _mm512_add_epi32(column, step);
  }
  Best result;
  if (found == 0) return result;
  const float top = _mm512_mask_reduce_max_ps(found, best);
  const __mmask16 at_top = _mm512_mask_cmp_ps_mask(found, best, _mm512_set1_ps(top), _CMP_EQ_OQ);
  result.found = true;
  result.column = _mm512_mask_reduce_min_epi32(at_top, best_column);
  result.value = values[result.column - first_column];
  return result;
}

}  // namespace

bool matmul_argmax_avx512(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, int32_t* best) {
  if (!cpu_features().avx512) return false;
  LS_CHECK((w.f32 != nullptr) != (w.b16 != nullptr), "a matrix holds exactly one of fp32 or bf16 weights");
  if (rows <= 0) return true;
  const int64_t K = w.cols, N = w.rows;
  const RowKinds kinds = row_kinds(x, rows, K, w.b16 != nullptr);
  const bool round = ctx.rounds_to_bf16();
  // Columns go out in chunks (as a streaming matmul's); each chunk's outputs land in a small per-thread buffer and
  // only its best column per row is kept, [chunks, rows]; the chunks' bests are then met in column order.
  const int64_t chunk_columns = std::max(kColumnChunk, stream_chunk_bytes() / (2 * K) / kColumnChunk * kColumnChunk);
  const int64_t chunks = (N + chunk_columns - 1) / chunk_columns;
  std::vector<Best> chunk_best(chunks * rows);
  auto run = [&](int, int64_t chunk_begin, int64_t chunk_end) {
    thread_local std::vector<float> outputs;  // [rows, chunk columns]
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      const int64_t col_begin = chunk * chunk_columns, col_end = std::min(N, col_begin + chunk_columns);
      const int64_t width = col_end - col_begin;
      outputs.resize(rows * width);
      const Matrix slice = column_slice(w, col_begin, col_end);
      run_columns(prepare(slice, x, kinds.x_bf16, outputs.data()), kinds.is_bf16, rows, round, 0, width);
      for (int64_t row = 0; row < rows; ++row)
        chunk_best[chunk * rows + row] = best_of(outputs.data() + row * width, width, static_cast<int32_t>(col_begin));
    }
  };
  if (ctx.pool)
    ctx.pool->parallel_chunks(chunks, run);
  else
    run(0, 0, chunks);
  for (int64_t row = 0; row < rows; ++row) {
    Best overall;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const Best& found = chunk_best[chunk * rows + row];
      if (found.found) overall.offer(found.value, found.column);
    }
    best[row] = overall.column;  // 0 when every output is NaN, as greedy_token
  }
  return true;
}

bool matmul_avx512(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, float* y) {
  return matmul_group_avx512(ctx, x, rows, std::span<const Matrix>(&w, 1), std::span<float* const>(&y, 1));
}

bool matmul_group_avx512(const OpContext& ctx, const float* x, int64_t rows, std::span<const Matrix> ws,
                         std::span<float* const> ys) {
  const CpuFeatures& features = cpu_features();
  if (!features.avx512) return false;
  LS_CHECK(ws.size() == ys.size() && ws.size() <= kMaxGroup, "a matmul group has one output per matrix, at most 4");
  bool any_b16 = false;
  for (const Matrix& w : ws) {
    LS_CHECK((w.f32 != nullptr) != (w.b16 != nullptr), "a matrix holds exactly one of fp32 or bf16 weights");
    LS_CHECK(w.cols == ws[0].cols, "the matrices of a matmul group share K");
    any_b16 = any_b16 || w.b16;
  }
  if (rows <= 0 || ws.empty()) return true;
  const int64_t K = ws[0].cols;

  const RowKinds kinds = row_kinds(x, rows, K, any_b16);
  const uint8_t* is_bf16 = kinds.is_bf16;
  const uint16_t* x_bf16 = kinds.x_bf16;
  const bool round = ctx.rounds_to_bf16();

  // Few rows (decode, verify windows) stream the weights once: the columns of every matrix go out in chunks of
  // ~128 KiB of weights that the threads claim (one parallel_chunks call for the whole group), so a late thread does
  // not hold the others up. Many rows (prefill) are compute-bound: one contiguous part of each matrix per thread.
  const bool streaming = rows <= kVerifyRows;
  const int64_t chunk_columns =
      streaming ? std::max(kColumnChunk, stream_chunk_bytes() / (2 * K) / kColumnChunk * kColumnChunk) : kColumnChunk;
  std::array<Prepared, kMaxGroup> prepared;
  int64_t chunks = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    prepared[i] = prepare(ws[i], x, x_bf16, ys[i]);
    prepared[i].first_chunk = chunks;
    chunks += (ws[i].rows + chunk_columns - 1) / chunk_columns;
  }
  const size_t count = ws.size();
  // Chunks [chunk_begin, chunk_end) of the group, matrix by matrix.
  auto run = [&](int, int64_t chunk_begin, int64_t chunk_end) {
    for (size_t i = 0; i < count; ++i) {
      const Prepared& m = prepared[i];
      const int64_t last = i + 1 < count ? prepared[i + 1].first_chunk : chunks;
      const int64_t begin = std::max(chunk_begin, m.first_chunk), end = std::min(chunk_end, last);
      if (begin >= end) continue;
      const int64_t N = m.w->rows;
      run_columns(m, is_bf16, rows, round, (begin - m.first_chunk) * chunk_columns,
                  std::min(N, (end - m.first_chunk) * chunk_columns));
    }
  };
  // Many rows: a static split per matrix, or (set_many_rows_chunked) one claimed chunk at a time, so that a worker
  // still waking from sleep (~80 us on the development VM) or preempted costs its chunks' time instead of a wait.
  if (!ctx.pool) {
    run(0, 0, chunks);
  } else if (streaming || many_rows_chunked()) {
    ctx.pool->parallel_chunks(chunks, run);
  } else {
    for (size_t i = 0; i < count; ++i) {
      const int64_t last = i + 1 < count ? prepared[i + 1].first_chunk : chunks;
      ctx.pool->parallel_for(last - prepared[i].first_chunk, [&](int worker, int64_t begin, int64_t end) {
        run(worker, prepared[i].first_chunk + begin, prepared[i].first_chunk + end);
      });
    }
  }
  return true;
}

bool matmul_columns_then_avx512(const OpContext& ctx, const float* x, int64_t rows, std::span<const Matrix> ws,
                                std::span<float* const> ys, int64_t ldy,
                                const std::function<void(int64_t col_begin, int64_t col_end)>& then) {
  if (!cpu_features().avx512 || !ctx.pool || ctx.pool->size() == 1 || rows <= 0 || rows > kVerifyRows) return false;
  LS_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= kMaxGroup,
           "a fused matmul has one output per matrix, 1 to 4 of them");
  const int64_t K = ws[0].cols, N = ws[0].rows;
  bool any_b16 = false;
  for (const Matrix& w : ws) {
    LS_CHECK((w.f32 != nullptr) != (w.b16 != nullptr), "a matrix holds exactly one of fp32 or bf16 weights");
    LS_CHECK(w.cols == K && w.rows == N, "the matrices of a fused matmul share K and N");
    any_b16 = any_b16 || w.b16;
  }
  const RowKinds kinds = row_kinds(x, rows, K, any_b16);
  const bool round = ctx.rounds_to_bf16();
  const int64_t count = static_cast<int64_t>(ws.size());
  // Chunks of ~kStreamChunkBytes of weights in all, the same columns of every matrix.
  const int64_t chunk_columns =
      std::max(kColumnChunk, stream_chunk_bytes() / (2 * K * count) / kColumnChunk * kColumnChunk);
  std::array<Prepared, kMaxGroup> prepared;
  for (int64_t i = 0; i < count; ++i) prepared[i] = prepare(ws[i], x, kinds.x_bf16, ys[i], ldy);
  const int64_t chunks = (N + chunk_columns - 1) / chunk_columns;
  ctx.pool->parallel_chunks(chunks, [&](int, int64_t chunk, int64_t) {
    const int64_t col_begin = chunk * chunk_columns, col_end = std::min(N, col_begin + chunk_columns);
    // The chunk reads one run of weights per matrix: the first lines of the later runs are fetched ahead, so each
    // run after the first does not start on a cold stream (the hardware prefetcher needs a few misses to lock on).
    for (int64_t i = 1; i < count; ++i) {
      if (!ws[i].b16) continue;
      const char* start = prepared[i].bf16_tiles.weight_bytes(col_begin);
      for (int64_t offset = 0; offset < kRunLeadBytes; offset += 64) _mm_prefetch(start + offset, _MM_HINT_T0);
    }
    for (int64_t i = 0; i < count; ++i) run_columns(prepared[i], kinds.is_bf16, rows, round, col_begin, col_end);
    then(col_begin, col_end);
  });
  return true;
}

}  // namespace ls::compute
