// AVX-512 GEMM y = x @ W^T. Every (row, column) is one 16-lane accumulator over K in order, then one fixed lane tree,
// so a row's result never depends on how many rows share the call, its tile, or the thread count (threads split
// columns). Rows whose values are all bf16-exact take vdpbf16ps against bf16 weights (converting them is lossless);
// other rows, and fp32 weights, take fp32 FMA. The choice is made per row from that row's values alone. A matrix
// packed in the AMX B-tile layout (matmul_amx.h) runs its bf16-exact rows on AMX instead, at every row count.
#include "compute/cpu/matmul_avx512.h"

// GCC 12's AVX-512 headers trip -Wuninitialized inside their own _mm512_undefined_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_amx.h"
#include "compute/cpu/matmul_avx512_tiles.h"
#include "compute/cpu/simd_avx512.h"

namespace ls::compute {
namespace {

using namespace avx512;

constexpr int64_t kRowTile = 128;     // rows kept hot in L2 while a column block of weights is swept
constexpr int64_t kColumnChunk = 16;  // columns per unit of thread work
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
// (kUnprefetchedVerifyRows, kPrefetchGroups; set_verify_prefetch, or LS_CPU_VERIFY_PREFETCH=ROWS*10+GROUPS at start
// as cpu_bench's --prefetch, for A/B timing: the bits never depend on it).
int64_t verify_prefetch_at_start(bool rows) {
  const char* text = std::getenv("LS_CPU_VERIFY_PREFETCH");
  const int setting = text ? std::atoi(text) : 0;
  if (setting <= 0) return rows ? kUnprefetchedVerifyRows : kPrefetchGroups;
  return rows ? setting / 10 : std::max(1, setting % 10);
}
std::atomic<int64_t> g_unprefetched_rows{verify_prefetch_at_start(true)};
std::atomic<int64_t> g_prefetch_groups{verify_prefetch_at_start(false)};

// Many-row calls split each matrix's 16-column chunks statically (as before) unless LS_CPU_CHUNKED_ROWS=1 at start or
// set_many_rows_chunked(true) makes them claim the chunks one at a time (A/B timing; the bits never depend on it;
// 2-thread prefills of 64-200 rows on the loaded host came out either way by 10-30 %).
std::atomic<bool> g_many_rows_chunked{[] {
  const char* text = std::getenv("LS_CPU_CHUNKED_ROWS");
  return text && text[0] == '1';
}()};
bool many_rows_chunked() { return g_many_rows_chunked.load(std::memory_order_relaxed); }

// The few-row kernel's options, a mask (set_small_m_kernel, LS_CPU_SMALL_M at start; A/B timing, the bits never depend
// on it). kSmallMChunks: windows of r rows claim chunks of stream_chunk_bytes() / min(r, 8) (at least
// kMinWindowChunkBytes) and the verify prefetch runs past a chunk's end (a thread's next chunk is mostly the next
// columns); without it every call takes chunks of stream_chunk_bytes() and the prefetch stops at a chunk's end (a
// window's chunk costs r rows of compute, and a 384-column matrix in 160-column chunks (160, 160, 64) left a thread
// idle for up to a third of the call). kSmallMPanels: rows against packed weights run whole panels per call
// (panels_bf16 for 1-3 rows, verify_panels_bf16 for 4-16) instead of a tile call per panel and row group. Both on by
// default since the quiet-host A/B of the ninth session (nano pair, 2 threads, 1-stream rounds interleaved: verify 8 +
// pass 7 2.009 -> 1.942 ms, verify 4 + pass 3 1.539 -> 1.478, verify 2 + pass 1 1.453 -> 1.346; docs/benchmarks.md).
// Fixed row groups per window width (session 9, bits 4 / 8) lost in 2-thread rounds and are gone (docs/benchmarks.md).
constexpr int kSmallMChunks = 1, kSmallMPanels = 2;
constexpr int kSmallMDefault = kSmallMChunks | kSmallMPanels;
constexpr int64_t kMinWindowChunkBytes = 16 * 1024;
std::atomic<int> g_small_m{[] {
  const char* text = std::getenv("LS_CPU_SMALL_M");
  return text ? std::atoi(text) : kSmallMDefault;
}()};
bool small_m(int option) { return (g_small_m.load(std::memory_order_relaxed) & option) != 0; }

// Weight bytes per claimed chunk for a few-row call of `rows` rows.
int64_t window_chunk_bytes(int64_t rows) {
  const int64_t bytes = stream_chunk_bytes();
  if (!small_m(kSmallMChunks) || rows <= 1) return bytes;
  return std::max(std::min(bytes, kMinWindowChunkBytes), bytes / std::min<int64_t>(rows, 8));
}

// y [rows, cols] of one block. Few rows (decode, small verify): wide tiles, every weight streamed once. Many rows:
// a block of columns whose weights fit in L2 is swept by every row quad, so each y row is written in whole lines.
// Verify windows prefetch weights up to column prefetch_end (col_end, or the matrix's end when chunks are consecutive).
template <typename Tiles>
void block(const Tiles& tiles, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end,
           int64_t column_bytes, int64_t prefetch_end) {
  if (row_end - row_begin < kTileRows) {
    if constexpr (std::is_same_v<Tiles, Bf16Tiles>) {
      // Packed bf16 weights: whole panels in one call (panels_bf16), then any last partial panel as before.
      const int64_t panels_end = col_begin + (col_end - col_begin) / kFewRowsColumns * kFewRowsColumns;
      if (small_m(kSmallMPanels) && panels_end > col_begin &&
          tiles.run_panels(row_end - row_begin, row_begin, col_begin, panels_end))
        col_begin = panels_end;
    }
    for (int64_t col = col_begin; col < col_end; col += kFewRowsColumns)
      tile_rows<kFewRowsColumns>(tiles, row_end - row_begin, row_begin, col, std::min<int64_t>(kFewRowsColumns, col_end - col));
    return;
  }
  if constexpr (std::is_same_v<Tiles, Bf16Tiles>) {
    // Packed bf16 weights: a verify window's whole panels in one call (verify_panels_bf16: the same groups, prefetch
    // and bits), then any last partial panel as below.
    const int64_t panels_end = col_begin + (col_end - col_begin) / kFewRowsColumns * kFewRowsColumns;
    if (small_m(kSmallMPanels) && row_end - row_begin <= kVerifyRows && panels_end > col_begin &&
        tiles.run_verify_panels(row_end - row_begin, row_begin, col_begin, panels_end, prefetch_end,
                                g_unprefetched_rows.load(std::memory_order_relaxed),
                                g_prefetch_groups.load(std::memory_order_relaxed))) {
      if (panels_end == col_end) return;
      col_begin = panels_end;
    }
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
      const char* next = ahead < prefetch_end ? tiles.weight_bytes(ahead) : nullptr;
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

}  // namespace

int set_small_m_kernel(int arm) { return g_small_m.exchange(arm >= 0 ? arm : kSmallMDefault); }

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
  if (cpu_amx_enabled()) return "amx-bf16";
  if (features.avx512_bf16) return "avx512-bf16";
  if (features.avx512) return "avx512f";
  return nullptr;
}

namespace {

// The rows of x as bf16 bits and which of them are bf16-exact (they take the bf16 dot kernel: bf16 weights and a
// CPU with vdpbf16ps), and for AMX matrices the same bits in the tiles' padded rows. All live in the calling thread's
// buffers until its next call; workers read them through the pointers.
struct RowKinds {
  const uint16_t* x_bf16;  // [rows, K]
  const uint8_t* is_bf16;  // [rows]
  const uint16_t* x_amx;   // [rows, amx_k_tiles(K) * 32], zeros past K; null without AMX
};

// One matrix of a call, ready to run: its tile runners and its first chunk in the call's list of chunks. An AMX matrix
// (`amx`, its B-tile layout) runs its bf16 rows on amx_columns; its other rows read the row-major bf16 weights.
struct Prepared {
  const Matrix* w = nullptr;
  Bf16Tiles bf16_tiles;
  Fp32Tiles<uint16_t> bf16_weight_tiles;
  Fp32Tiles<float> fp32_tiles;
  int64_t first_chunk = 0;
  const bf16* amx = nullptr;
  const uint16_t* x_amx = nullptr;
  // The first weight bytes of column `col` (a chunk's start), for prefetching.
  const char* weight_bytes(int64_t col) const {
    if (!amx) return bf16_tiles.weight_bytes(col);
    return reinterpret_cast<const char*>(amx + col / kAmxColumns * amx_tile_values(kAmxColumns, w->cols));
  }
};

Prepared prepare(const Matrix& w, const float* x, const RowKinds& kinds, float* y, int64_t ldy = 0) {
  const int64_t K = w.cols, N = ldy > 0 ? ldy : w.rows;  // N: the output's row stride
  const bool amx = w.b16 && amx_tiles(w);
  const bool packed = w.b16 && w.packed && !amx;
  const uint16_t* w_bits = reinterpret_cast<const uint16_t*>(packed ? w.packed : w.b16);
  const WeightLayout<uint16_t> bf16_layout{w_bits, K, packed};
  LS_CHECK(!amx || kinds.x_amx || !cpu_features().avx512_bf16, "an AMX matrix's call prepares the tiles' rows");
  return Prepared{&w,
                  Bf16Tiles{kinds.x_bf16, bf16_layout, K, N, y},
                  Fp32Tiles<uint16_t>{x, bf16_layout, K, N, y},
                  Fp32Tiles<float>{x, WeightLayout<float>{w.f32, K, false}, K, N, y},
                  0,
                  amx ? w.packed : nullptr,
                  kinds.x_amx};
}

// Columns [col_begin, col_end) of every row of one matrix; is_bf16 [rows] picks each row's kernel.
void run_columns(const Prepared& m, const uint8_t* is_bf16, int64_t rows, bool round, int64_t col_begin,
                 int64_t col_end) {
  const Matrix& w = *m.w;
  const int64_t K = w.cols, ldy = m.bf16_tiles.ldy;
  // kSmallMChunks: the verify prefetch runs past the chunk (a thread's next chunk is mostly the next columns).
  const int64_t prefetch_end = small_m(kSmallMChunks) ? w.rows : col_end;
  for (int64_t tile_begin = 0; tile_begin < rows; tile_begin += kRowTile) {
    const int64_t tile_end = std::min(rows, tile_begin + kRowTile);
    // Runs of rows that take the same kernel.
    for (int64_t run_begin = tile_begin; run_begin < tile_end;) {
      int64_t run_end = run_begin + 1;
      while (run_end < tile_end && is_bf16[run_end] == is_bf16[run_begin]) ++run_end;
      if (is_bf16[run_begin] && m.amx)
        amx_columns(m.x_amx + run_begin * amx_k_tiles(K) * kAmxDepth, run_end - run_begin, K, m.amx, col_begin,
                    col_end, m.bf16_tiles.y + run_begin * ldy, ldy);
      else if (is_bf16[run_begin])
        block(m.bf16_tiles, run_begin, run_end, col_begin, col_end, 2 * K, prefetch_end);
      else if (w.b16)
        block(m.bf16_weight_tiles, run_begin, run_end, col_begin, col_end, 2 * K, prefetch_end);
      else
        block(m.fp32_tiles, run_begin, run_end, col_begin, col_end, 4 * K, prefetch_end);
      run_begin = run_end;
    }
    for (int64_t row = tile_begin; row < tile_end; ++row)
      finish_outputs(m.bf16_tiles.y + row * ldy, w.bias, col_begin, col_end, round);
  }
}

// RowKinds of x [rows, K]; `amx` when a matrix of the call is in the B-tile layout.
RowKinds row_kinds(const float* x, int64_t rows, int64_t K, bool bf16_weights, bool amx) {
  thread_local std::vector<uint16_t> x_bf16, x_amx;
  thread_local std::vector<uint8_t> row_is_bf16;
  row_is_bf16.assign(rows, 0);
  if (!bf16_weights || !cpu_features().avx512_bf16) return RowKinds{x_bf16.data(), row_is_bf16.data(), nullptr};
  x_bf16.resize(rows * K);
  for (int64_t row = 0; row < rows; ++row) row_is_bf16[row] = row_to_bf16(x + row * K, K, x_bf16.data() + row * K);
  if (!amx) return RowKinds{x_bf16.data(), row_is_bf16.data(), nullptr};
  const int64_t stride = amx_k_tiles(K) * kAmxDepth;
  // K's padding is zeroed (the B tiles' zeros times x must be 0, never NaN).
  x_amx.resize(rows * stride);
  for (int64_t row = 0; row < rows; ++row) {
    uint16_t* out = x_amx.data() + row * stride;
    std::copy(x_bf16.data() + row * K, x_bf16.data() + (row + 1) * K, out);
    std::fill(out + K, out + stride, uint16_t{0});
  }
  return RowKinds{x_bf16.data(), row_is_bf16.data(), x_amx.data()};
}

// Whether any matrix of `ws` is in the B-tile layout.
bool any_amx(std::span<const Matrix> ws) {
  for (const Matrix& w : ws)
    if (w.b16 && amx_tiles(w)) return true;
  return false;
}

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
  const RowKinds kinds = row_kinds(x, rows, K, w.b16 != nullptr, any_amx(std::span<const Matrix>(&w, 1)));
  const bool round = ctx.rounds_to_bf16();
  // Columns go out in chunks (as a streaming matmul's); each chunk's outputs land in a small per-thread buffer and
  // only its best column per row is kept, [chunks, rows]; the chunks' bests are then met in column order.
  const int64_t chunk_columns =
      std::max(kColumnChunk, window_chunk_bytes(rows) / (2 * K) / kColumnChunk * kColumnChunk);
  const int64_t chunks = (N + chunk_columns - 1) / chunk_columns;
  std::vector<Best> chunk_best(chunks * rows);
  auto run = [&](int, int64_t chunk_begin, int64_t chunk_end) {
    thread_local std::vector<float> outputs;  // [rows, chunk columns]
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      const int64_t col_begin = chunk * chunk_columns, col_end = std::min(N, col_begin + chunk_columns);
      const int64_t width = col_end - col_begin;
      outputs.resize(rows * width);
      const Matrix slice = column_slice(w, col_begin, col_end);
      run_columns(prepare(slice, x, kinds, outputs.data()), kinds.is_bf16, rows, round, 0, width);
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

  const RowKinds kinds = row_kinds(x, rows, K, any_b16, any_amx(ws));
  const uint8_t* is_bf16 = kinds.is_bf16;
  const bool round = ctx.rounds_to_bf16();

  // Few rows (decode, verify windows) stream the weights once: the columns of every matrix go out in chunks of
  // ~128 KiB of weights that the threads claim (one parallel_chunks call for the whole group), so a late thread does
  // not hold the others up. Many rows (prefill) are compute-bound: one contiguous part of each matrix per thread.
  const bool streaming = rows <= kVerifyRows;
  const int64_t chunk_columns =
      streaming ? std::max(kColumnChunk, window_chunk_bytes(rows) / (2 * K) / kColumnChunk * kColumnChunk)
                : kColumnChunk;
  std::array<Prepared, kMaxGroup> prepared;
  int64_t chunks = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    prepared[i] = prepare(ws[i], x, kinds, ys[i]);
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
  const RowKinds kinds = row_kinds(x, rows, K, any_b16, any_amx(ws));
  const bool round = ctx.rounds_to_bf16();
  const int64_t count = static_cast<int64_t>(ws.size());
  // Chunks of ~kStreamChunkBytes of weights in all, the same columns of every matrix.
  const int64_t chunk_columns =
      std::max(kColumnChunk, window_chunk_bytes(rows) / (2 * K * count) / kColumnChunk * kColumnChunk);
  std::array<Prepared, kMaxGroup> prepared;
  for (int64_t i = 0; i < count; ++i) prepared[i] = prepare(ws[i], x, kinds, ys[i], ldy);
  const int64_t chunks = (N + chunk_columns - 1) / chunk_columns;
  ctx.pool->parallel_chunks(chunks, [&](int, int64_t chunk, int64_t) {
    const int64_t col_begin = chunk * chunk_columns, col_end = std::min(N, col_begin + chunk_columns);
    // The chunk reads one run of weights per matrix: the first lines of the later runs are fetched ahead, so each
    // run after the first does not start on a cold stream (the hardware prefetcher needs a few misses to lock on).
    for (int64_t i = 1; i < count; ++i) {
      if (!ws[i].b16) continue;
      const char* start = prepared[i].weight_bytes(col_begin);
      for (int64_t offset = 0; offset < kRunLeadBytes; offset += 64) _mm_prefetch(start + offset, _MM_HINT_T0);
    }
    for (int64_t i = 0; i < count; ++i) run_columns(prepared[i], kinds.is_bf16, rows, round, col_begin, col_end);
    then(col_begin, col_end);
  });
  return true;
}

}  // namespace ls::compute
