// The AMX-BF16 GEMM: the switch, the tile-state permission, the B-tile packing and the kernel. A row's outputs are one
// TDPBF16PS chain per 16-column block over the K tiles in increasing order; the rows of a tile never mix (each C row
// reads only its own A row), so a row's bits depend neither on how many rows share the call nor on the thread count
// (threads split columns in whole blocks, never K).
#include "compute/cpu/matmul_amx.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

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

// Linux hands out the 8 KiB tile state only on request, once per process; without it the first tile load faults.
void request_tile_permission() {
  static std::once_flag once;
  std::call_once(once, [] {
    const long refused = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata);
    LS_CHECK(refused == 0, "AMX: Linux refused the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA))");
  });
}

std::atomic<bool>& amx_setting() {
  static std::atomic<bool> on{[] {
    const char* text = std::getenv("LS_CPU_AMX");
    if (!text || text[0] != '1') return false;
    LS_CHECK(cpu_amx_available(), "LS_CPU_AMX=1 on a CPU without AMX-BF16 (or an OS without the tile state)");
    request_tile_permission();
    return true;
  }()};
  return on;
}

// The B-tile arenas: [begin, end) address ranges. `count` lets the AVX-512 path skip the lock when there are none.
std::mutex g_arena_mutex;
std::vector<std::pair<uintptr_t, uintptr_t>> g_arenas;
std::atomic<int> g_arena_count{0};

// Every tile 16 rows x 64 bytes: C in tmm0-3, A (16 rows x 32 K of x) in tmm4, B (32 K x 16 columns) in tmm5-7.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Each thread loads the configuration before its first tile op (the pool's workers included); it stays loaded (the
// kernel saves it across context switches with the rest of the XSAVE state).
LS_TARGET_AMX void ensure_tile_config() {
  thread_local bool loaded = false;
  if (loaded) return;
  request_tile_permission();
  static const TileConfig config;
  _tile_loadconfig(&config);
  loaded = true;
}

// C [NB][16][16] = x tile rows (16 rows from x, stride x_bytes) times NB column blocks of w (k_tiles tiles each),
// stored at c + j * c_block for block j with row stride c_bytes. The intrinsics are inline asm without memory
// clobbers: the barriers make the compiler finish writing x before the loads and read c only after the stores.
template <int NB>
LS_TARGET_AMX void tile_group(const uint16_t* x, int64_t x_bytes, const uint16_t* w, int64_t k_tiles, float* c,
                              int64_t c_block, int64_t c_bytes) {
  const int64_t block = k_tiles * kAmxTileValues;
  asm volatile("" ::: "memory");
  _tile_zero(0);
  if constexpr (NB > 1) _tile_zero(1);
  if constexpr (NB > 2) _tile_zero(2);
  if constexpr (NB > 3) _tile_zero(3);
  for (int64_t t = 0; t < k_tiles; ++t) {
    const uint16_t* b = w + t * kAmxTileValues;
    _tile_loadd(4, x + t * kAmxDepth, x_bytes);
    _tile_loadd(5, b, 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NB > 1) {
      _tile_loadd(6, b + block, 64);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, b + 2 * block, 64);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, b + 3 * block, 64);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, c, c_bytes);
  if constexpr (NB > 1) _tile_stored(1, c + c_block, c_bytes);
  if constexpr (NB > 2) _tile_stored(2, c + 2 * c_block, c_bytes);
  if constexpr (NB > 3) _tile_stored(3, c + 3 * c_block, c_bytes);
  asm volatile("" ::: "memory");
}

}  // namespace

bool cpu_amx_available() { return cpu_features().amx_bf16; }

bool cpu_amx_enabled() { return amx_setting().load(std::memory_order_relaxed); }

bool set_cpu_amx(bool on) {
  if (on) {
    LS_CHECK(cpu_amx_available(), "set_cpu_amx(true) on a CPU without AMX-BF16 (or an OS without the tile state)");
    request_tile_permission();
  }
  return amx_setting().exchange(on);
}

void register_amx_arena(const bf16* begin, int64_t values) {
  std::lock_guard<std::mutex> lock(g_arena_mutex);
  const uintptr_t start = reinterpret_cast<uintptr_t>(begin);
  g_arenas.emplace_back(start, start + static_cast<uintptr_t>(values) * sizeof(bf16));
  g_arena_count.store(static_cast<int>(g_arenas.size()));
}

void forget_amx_arena(const bf16* begin) {
  std::lock_guard<std::mutex> lock(g_arena_mutex);
  const uintptr_t start = reinterpret_cast<uintptr_t>(begin);
  std::erase_if(g_arenas, [start](const auto& range) { return range.first == start; });
  g_arena_count.store(static_cast<int>(g_arenas.size()));
}

bool amx_packed(const bf16* packed) {
  if (!packed || g_arena_count.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(g_arena_mutex);
  const uintptr_t at = reinterpret_cast<uintptr_t>(packed);
  for (const auto& [begin, end] : g_arenas)
    if (at >= begin && at < end) return true;
  return false;
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
  ensure_tile_config();
  const int64_t k_tiles = amx_k_tiles(K), x_stride = k_tiles * kAmxDepth;
  const uint16_t* w = reinterpret_cast<const uint16_t*>(w_amx);
  alignas(64) float c[4 * 256];
  for (int64_t col = col_begin; col < col_end; col += 4 * kAmxColumns) {
    const int64_t width = std::min<int64_t>(4 * kAmxColumns, col_end - col);
    const int blocks = static_cast<int>((width + kAmxColumns - 1) / kAmxColumns);
    const uint16_t* w_group = w + col / kAmxColumns * k_tiles * kAmxTileValues;
    for (int64_t row = 0; row < rows; row += 16) {
      const uint16_t* x_rows = x + row * x_stride;
      const int64_t take = std::min<int64_t>(16, rows - row);
      // 16 rows of whole blocks go straight to y; a partial tile through c.
      const bool direct = take == 16 && width == blocks * kAmxColumns;
      float* out = direct ? y + row * ldy + col : c;
      const int64_t out_block = direct ? kAmxColumns : 256, out_bytes = direct ? ldy * 4 : 64;
      switch (blocks) {
        case 1: tile_group<1>(x_rows, x_stride * 2, w_group, k_tiles, out, out_block, out_bytes); break;
        case 2: tile_group<2>(x_rows, x_stride * 2, w_group, k_tiles, out, out_block, out_bytes); break;
        case 3: tile_group<3>(x_rows, x_stride * 2, w_group, k_tiles, out, out_block, out_bytes); break;
        default: tile_group<4>(x_rows, x_stride * 2, w_group, k_tiles, out, out_block, out_bytes); break;
      }
      if (direct) continue;
      for (int64_t m = 0; m < take; ++m)
        for (int64_t block = 0; block * kAmxColumns < width; ++block)
          std::memcpy(y + (row + m) * ldy + col + block * kAmxColumns, c + block * 256 + m * 16,
                      std::min<int64_t>(kAmxColumns, width - block * kAmxColumns) * sizeof(float));
    }
  }
}

}  // namespace ls::compute
