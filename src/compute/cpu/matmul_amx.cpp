// The AMX-BF16 GEMM: the switch, the tile-state permission, the B-tile packing and the kernel. A row's outputs are one
// TDPBF16PS chain per 16-column block over the K tiles in increasing order; the rows of a tile never mix (each C row
// reads only its own A row), so a row's bits depend neither on how many rows share the call nor on the thread count
// (threads split columns in whole blocks, never K).
#include "compute/cpu/matmul_amx.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "base/check.h"
#include "compute/cpu/cpu_features.h"

#define LS_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ls::compute {
namespace {

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an XSAVE feature's state (Linux 5.16+)
constexpr long kXfeatureXtiledata = 18;

// Linux hands out the 8 KiB tile state only on request (asked once per process); without it the first tile load
// faults.
bool tile_permission_granted() {
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
}

// Why this process cannot run the AMX path, or "" when it can.
std::string amx_missing() {
  if (!cpu_amx_available()) return "this CPU has no AMX-BF16 (or the OS does not enable the tile state)";
  if (!tile_permission_granted()) return "Linux refused the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA))";
  return "";
}

bool amx_asked_at_start() {
  const char* text = std::getenv("LS_CPU_AMX");
  return text && text[0] == '1';
}

// On when LS_CPU_AMX=1 asked for it at start and this process can run it; asked for where it cannot, it stays off and
// the loaders refuse by name (cpu_amx_refusal).
std::atomic<bool>& amx_setting() {
  static std::atomic<bool> on{amx_asked_at_start() && amx_missing().empty()};
  return on;
}

// On wherever the tile unit can run unless LS_CPU_DRAFTER_AMX=0 at start; off where it cannot (a drafter's bits never
// reach a reply, so it keeps the panels there instead of a refusal).
std::atomic<bool>& drafter_amx_setting() {
  static std::atomic<bool> on{[] {
    const char* text = std::getenv("LS_CPU_DRAFTER_AMX");
    return !(text && text[0] == '0') && amx_missing().empty();
  }()};
  return on;
}

// How the kernel schedules its tiles, a mask for A/B timing (the bits never depend on it: each output is the same
// chain). 1 = the B tiles rotate over tmm5-7 across K steps (a B register is loaded again three products after the
// one that read it, never right after); 4 = each K step prefetches the group's B tiles kPrefetchSteps steps ahead into
// L1. set_amx_schedule, or LS_CPU_AMX_SCHEDULE=<mask> at start. (Bit 2, A and C tiles as tall as the row block
// instead of 16 rows, won on the Xeon in s14A and is the kernel now: a 1-row nano forward 0.70-0.92 against 1.10 ms,
// the 27 x 1152 x 384 sweep at 1 / 4 / 16 rows 0.73 / 0.63 / 0.84 against 0.88 / 0.79 / 0.90 ms, 2 threads.)
constexpr int kRotateB = 1, kPrefetchB = 4;
constexpr int64_t kPrefetchSteps = 4;
std::atomic<int> g_schedule{[] {
  const char* text = std::getenv("LS_CPU_AMX_SCHEDULE");
  return text ? std::atoi(text) : 0;
}()};

// The palette-1 configuration for `rows` rows of A and C: C in tmm0-3 (rows x 16 fp32), A in tmm4 (rows x 32 bf16 of
// x), B in tmm5-7 (16 pair rows x 16 columns).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Each thread loads a configuration before its first tile op (the pool's workers included) and again when the rows
// change; it stays loaded (the kernel saves it across context switches with the rest of the XSAVE state).
LS_TARGET_AMX void ensure_tile_config(int rows) {
  thread_local int loaded_rows = 0;
  if (loaded_rows == rows) return;
  LS_CHECK(tile_permission_granted(), "a tile op without the tile state (the AMX path was never switched on)");
  static const auto configs = [] {
    std::array<TileConfig, 17> all{};
    for (int r = 1; r <= 16; ++r)
      for (int tile = 0; tile <= 4; ++tile) all[r].rows[tile] = static_cast<uint8_t>(r);
    return all;
  }();
  _tile_loadconfig(&configs[rows]);
  loaded_rows = rows;
}

// One K step (tile T) of a group: A into tmm4, then block j's B tile into register Rj and C[j] += A B.
#define LS_AMX_STEP(T, R0, R1, R2, R3)                  \
  do {                                                  \
    const uint16_t* b = w + (T) * step;                 \
    if (prefetch && (T) + kPrefetchSteps < k_tiles)     \
      prefetch_tiles<NB>(b + kPrefetchSteps * step, block); \
    _tile_loadd(4, x + (T) * kAmxDepth, x_bytes);       \
    _tile_loadd(R0, b, 64);                             \
    _tile_dpbf16ps(0, 4, R0);                           \
    if constexpr (NB > 1) {                             \
      _tile_loadd(R1, b + block, 64);                   \
      _tile_dpbf16ps(1, 4, R1);                         \
    }                                                   \
    if constexpr (NB > 2) {                             \
      _tile_loadd(R2, b + 2 * block, 64);               \
      _tile_dpbf16ps(2, 4, R2);                         \
    }                                                   \
    if constexpr (NB > 3) {                             \
      _tile_loadd(R3, b + 3 * block, 64);               \
      _tile_dpbf16ps(3, 4, R3);                         \
    }                                                   \
  } while (0)

// The B tiles of one K step of NB blocks (`block` values apart), every 64-byte line, into L1.
template <int NB>
inline void prefetch_tiles(const uint16_t* b, int64_t block) {
  for (int j = 0; j < NB; ++j)
    for (int64_t line = 0; line < kAmxTileValues; line += 32)
      _mm_prefetch(reinterpret_cast<const char*>(b + j * block + line), _MM_HINT_T0);
}

// C [NB] = x tile rows (from x, stride x_bytes) times NB column blocks of w (k_tiles tiles each; block j's K tile t at
// w + t * step + j * block), K tiles in increasing order, stored at c + j * c_block for block j with row stride
// c_bytes. The intrinsics are inline asm without memory clobbers: the barriers make the compiler finish writing x
// before the loads and read c only after.
template <int NB, bool kRotate>
LS_TARGET_AMX void tile_group(const uint16_t* x, int64_t x_bytes, const uint16_t* w, int64_t k_tiles, int64_t step,
                              int64_t block, float* c, int64_t c_block, int64_t c_bytes, bool prefetch) {
  asm volatile("" ::: "memory");
  _tile_zero(0);
  if constexpr (NB > 1) _tile_zero(1);
  if constexpr (NB > 2) _tile_zero(2);
  if constexpr (NB > 3) _tile_zero(3);
  int64_t t = 0;
  if constexpr (kRotate)
    for (; t + 3 <= k_tiles; t += 3) {
      LS_AMX_STEP(t, 5, 6, 7, 5);
      LS_AMX_STEP(t + 1, 6, 7, 5, 6);
      LS_AMX_STEP(t + 2, 7, 5, 6, 7);
    }
  for (; t < k_tiles; ++t) LS_AMX_STEP(t, 5, 6, 7, 5);
  _tile_stored(0, c, c_bytes);
  if constexpr (NB > 1) _tile_stored(1, c + c_block, c_bytes);
  if constexpr (NB > 2) _tile_stored(2, c + 2 * c_block, c_bytes);
  if constexpr (NB > 3) _tile_stored(3, c + 3 * c_block, c_bytes);
  asm volatile("" ::: "memory");
}
#undef LS_AMX_STEP

template <bool kRotate>
LS_TARGET_AMX void run_group(int blocks, const uint16_t* x, int64_t x_bytes, const uint16_t* w, int64_t k_tiles,
                             int64_t step, int64_t block, float* c, int64_t c_block, int64_t c_bytes, bool prefetch) {
  switch (blocks) {
    case 1: tile_group<1, kRotate>(x, x_bytes, w, k_tiles, step, block, c, c_block, c_bytes, prefetch); break;
    case 2: tile_group<2, kRotate>(x, x_bytes, w, k_tiles, step, block, c, c_block, c_bytes, prefetch); break;
    case 3: tile_group<3, kRotate>(x, x_bytes, w, k_tiles, step, block, c, c_block, c_bytes, prefetch); break;
    default: tile_group<4, kRotate>(x, x_bytes, w, k_tiles, step, block, c, c_block, c_bytes, prefetch); break;
  }
}

}  // namespace

bool cpu_amx_available() { return cpu_features().amx_bf16; }

int set_amx_schedule(int mask) { return g_schedule.exchange(mask >= 0 ? mask : 0); }

bool cpu_amx_enabled() { return amx_setting().load(std::memory_order_relaxed); }

Status cpu_amx_refusal() {
  if (!amx_asked_at_start()) return ok_status();
  const std::string missing = amx_missing();
  if (missing.empty()) return ok_status();
  return Status(ErrorCode::DeviceUnavailable, "LS_CPU_AMX=1 asks for the AMX path, but " + missing);
}

bool set_cpu_amx(bool on) {
  if (on) LS_CHECK(amx_missing().empty(), "set_cpu_amx(true) on a CPU without AMX-BF16 or the tile state");
  return amx_setting().exchange(on);
}

bool cpu_amx_runnable() { return amx_missing().empty(); }

bool drafter_amx() { return drafter_amx_setting().load(std::memory_order_relaxed); }

bool set_drafter_amx(bool on) {
  if (on) LS_CHECK(cpu_amx_runnable(), "set_drafter_amx(true) on a CPU without AMX-BF16 or the tile state");
  return drafter_amx_setting().exchange(on);
}

void pack_amx_tiles(const Matrix& view, bf16* out) {
  LS_CHECK(view.b16, "the B-tile layout packs bf16 weights");
  const int64_t N = view.rows, K = view.cols, k_tiles = amx_k_tiles(K);
  for (int64_t block = 0; block * kAmxColumns < N; ++block)
    for (int64_t t = 0; t < k_tiles; ++t)
      for (int64_t r = 0; r < kAmxDepth / 2; ++r)
        for (int64_t n = 0; n < kAmxColumns; ++n)
          for (int64_t i = 0; i < 2; ++i) {
            const int64_t col = block * kAmxColumns + n, k = t * kAmxDepth + 2 * r + i;
            *out++ = col < N && k < K ? view.b16[col * K + k] : bf16{};
          }
}

LS_TARGET_AMX void amx_columns(const uint16_t* x, int64_t rows, int64_t K, const bf16* w_amx, int64_t col_begin,
                               int64_t col_end, float* y, int64_t ldy) {
  LS_CHECK(col_begin % kAmxColumns == 0, "AMX column ranges start on a 16-column block");
  if (rows <= 0 || col_end <= col_begin) return;
  const int schedule = g_schedule.load(std::memory_order_relaxed);
  const int64_t k_tiles = amx_k_tiles(K), x_stride = k_tiles * kAmxDepth;
  const uint16_t* w = reinterpret_cast<const uint16_t*>(w_amx);
  alignas(64) float c[4 * 256];
  for (int64_t col = col_begin; col < col_end; col += 4 * kAmxColumns) {
    const int64_t width = std::min<int64_t>(4 * kAmxColumns, col_end - col);
    const int blocks = static_cast<int>((width + kAmxColumns - 1) / kAmxColumns);
    const uint16_t* w_group = w + col / kAmxColumns * k_tiles * kAmxTileValues;
    // Each block's K tiles in a run of their own (the grouped layout, a group's tiles of one K step side by side,
    // lost in the fifteenth session).
    const int64_t tile_step = kAmxTileValues, block_stride = k_tiles * kAmxTileValues;
    for (int64_t row = 0; row < rows; row += 16) {
      const uint16_t* x_rows = x + row * x_stride;
      const int64_t take = std::min<int64_t>(16, rows - row);
      // A and C tiles as tall as the row block (a 1-row decode multiplies 1 row, not 16).
      ensure_tile_config(static_cast<int>(take));
      // Whole blocks go straight to y; a group's partial last block through c.
      const bool direct = width == blocks * kAmxColumns;
      float* out = direct ? y + row * ldy + col : c;
      const int64_t out_block = direct ? kAmxColumns : 256, out_bytes = direct ? ldy * 4 : 64;
      const bool prefetch = (schedule & kPrefetchB) != 0;
      if (schedule & kRotateB)
        run_group<true>(blocks, x_rows, x_stride * 2, w_group, k_tiles, tile_step, block_stride, out, out_block,
                        out_bytes, prefetch);
      else
        run_group<false>(blocks, x_rows, x_stride * 2, w_group, k_tiles, tile_step, block_stride, out, out_block,
                         out_bytes, prefetch);
      if (direct) continue;
      for (int64_t m = 0; m < take; ++m)
        for (int64_t block = 0; block * kAmxColumns < width; ++block)
          std::memcpy(y + (row + m) * ldy + col + block * kAmxColumns, c + block * 256 + m * 16,
                      std::min<int64_t>(kAmxColumns, width - block * kAmxColumns) * sizeof(float));
    }
  }
}

}  // namespace ls::compute
