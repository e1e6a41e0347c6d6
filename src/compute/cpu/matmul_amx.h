// The AMX-BF16 GEMM (Sapphire Rapids and later Xeons): weights packed at load into B-tile order, every output one
// TDPBF16PS chain over K tiles in increasing order, for every row count (decode, verify windows, drafter blocks,
// prefill). A target's matrices take it behind a switch (LS_CPU_AMX=1 / set_cpu_amx; its 1-row forward is behind the
// AVX-512 panels'), a drafter's by default where the CPU has it (drafter_amx).
#pragma once

#include <cstdint>
#include <span>

#include "base/bf16.h"
#include "base/status.h"
#include "compute/ops.h"

namespace ls::compute {

// The B-tile layout (Matrix::packed of a matrix packed while AMX is on): blocks of 16 output columns, each block
// ceil(K / 32) tiles in K order, a tile 16 rows x 64 bytes where row r holds the VNNI pairs
// (w[n][k0 + 2r], w[n][k0 + 2r + 1]) for n = 0..15. Missing columns and K past the end are zeros.
constexpr int64_t kAmxColumns = 16;
constexpr int64_t kAmxDepth = 32;
constexpr int64_t kAmxTileValues = kAmxColumns * kAmxDepth;  // 512 bf16 = 1 KiB

inline int64_t amx_k_tiles(int64_t K) { return (K + kAmxDepth - 1) / kAmxDepth; }
// Values of the B-tile layout of an [N, K] matrix.
inline int64_t amx_tile_values(int64_t N, int64_t K) {
  return (N + kAmxColumns - 1) / kAmxColumns * amx_k_tiles(K) * kAmxTileValues;
}
// Writes the B-tile layout of the bf16 matrix `view` [N, K] to out [amx_tile_values(N, K)].
void pack_amx_tiles(const Matrix& view, bf16* out);

// Whether this CPU can run the AMX path: CPUID AMX-TILE and AMX-BF16, and the OS enables the tile state (XCR0 bits
// 17 and 18). The permission (arch_prctl) is asked for when the path is switched on.
bool cpu_amx_available();

// Whether pack_for_cpu packs new matrices into the B-tile layout (so matmul runs them on AMX): LS_CPU_AMX=1 at start,
// or set_cpu_amx. Matrices already packed keep their layout and kernel (the choice is per matrix: every call on a
// matrix takes the same kernel, whatever its row count).
bool cpu_amx_enabled();
// DeviceUnavailable when LS_CPU_AMX=1 (read at each call) asks for the AMX path and this CPU has no AMX-BF16, or Linux
// refuses the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM)); OK otherwise. The path then stays off, and the CPU
// loaders return this before reading a weight.
Status cpu_amx_refusal();
// Turns the AMX path on or off for matrices packed from now on; returns the previous setting. Turning it on where
// cpu_amx_available() is false or the tile state is refused is a programmer error (stops the process).
bool set_cpu_amx(bool on);

// Whether this process can run tile ops: cpu_amx_available() and Linux grants the tile state (asked once).
bool cpu_amx_runnable();
// Whose weights a packing holds. A matrix keeps one layout (so one kernel, one summation order) for its whole life, so
// a target's verify rows keep their 1-row bits; a drafter's bits only steer which drafts are offered.
enum class WeightsOf : uint8_t { Target, Drafter };
// The layout such weights take on this CPU: a target's the panels (the B-tiles under LS_CPU_AMX=1, cpu_amx_enabled),
// a drafter's the B-tiles where drafter_amx() (the default with AMX), else the panels.
PackedLayout cpu_packed_layout(WeightsOf weights);
// pack_for_cpu (compute/ops.h, which packs in cpu_packed_layout(WeightsOf::Target)) in the layout given; AmxTiles only
// where cpu_amx_runnable().
int pack_for_cpu(std::span<OwnedMatrix* const> matrices, PackedLayout layout);
bool pack_for_cpu(OwnedMatrix& matrix, PackedLayout layout);

// Whether a drafter's matrices take the B-tile layout: its block's (fc, q/k/v/o, gate/up/down), the Markov W2, and a
// copy of the target's tied head for the block's logits (the target's own head stays on its panels). On by default
// wherever cpu_amx_runnable(), whatever LS_CPU_AMX says for the target: the drafter's multi-row GEMMs run far cheaper on
// the tile unit, and its bits never reach a reply (the target verifies every draft), so the target can stay on the
// panels, whose 1-row forward is faster. LS_CPU_DRAFTER_AMX=0 at start or set_drafter_amx(false): the panels (A/B).
bool drafter_amx();
// Sets it for drafters loaded from now on; returns the previous setting. On where !cpu_amx_runnable() is a programmer
// error.
bool set_drafter_amx(bool on);

// The kernel's tile schedule, a mask for A/B timing (the same bits either way): 1 = B tiles rotate over three
// registers across K steps, 4 = software prefetch of the B tiles 4 K steps ahead; 0 = neither (default). A and C
// tiles are always as tall as the row block (the 16-row alternative, once bit 2, lost in s14A).
// LS_CPU_AMX_SCHEDULE=<mask> at start sets it too. Returns the previous mask.
int set_amx_schedule(int mask);

// y[r * ldy + c] = the dot product of x row r with w's column c, for rows [0, rows) and columns [col_begin, col_end)
// (col_begin a multiple of 16): x is bf16 bits [rows, amx_k_tiles(K) * 32] (row stride that, zero-padded past K),
// w_amx the matrix's B-tile layout. No bias, no rounding.
void amx_columns(const uint16_t* x, int64_t rows, int64_t K, const bf16* w_amx, int64_t col_begin, int64_t col_end,
                 float* y, int64_t ldy);

}  // namespace ls::compute
