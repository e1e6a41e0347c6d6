// The AVX-512 GEMM's packed weights: every bf16 matrix of a model in 8-column panels (Matrix::packed), or in the AMX
// B-tile layout instead (matmul_amx.h: a drafter's by default where the CPU has it, a target's under LS_CPU_AMX=1),
// all in one huge-page arena in the order a forward reads them; column_slice of a packed matrix.
#include <sys/mman.h>

#include <memory>
#include <span>
#include <vector>

#include "base/check.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_amx.h"
#include "compute/cpu/matmul_avx512.h"

namespace ls::compute {
namespace {

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

PackedLayout cpu_packed_layout(WeightsOf weights) {
  const bool amx = weights == WeightsOf::Target ? cpu_amx_enabled() : drafter_amx();
  return amx ? PackedLayout::AmxTiles : PackedLayout::Panels;
}

int pack_for_cpu(std::span<OwnedMatrix* const> matrices, PackedLayout layout) {
  if (!cpu_features().avx512) return 0;
  // AMX: the B-tile layout replaces the panels (one packed copy either way); each matrix carries its layout.
  const bool amx = layout == PackedLayout::AmxTiles;
  LS_CHECK(!amx || cpu_amx_runnable(), "the B-tile layout packed where the AMX path cannot run");
  std::vector<OwnedMatrix*> chosen;
  std::vector<int64_t> offsets;  // in values; each panel set starts on a 64-byte boundary
  int64_t total = 0;
  for (OwnedMatrix* matrix : matrices) {
    const Matrix view = matrix->view();
    if (!view.b16 || view.rows <= 0 || view.cols <= 0) continue;
    chosen.push_back(matrix);
    offsets.push_back(total);
    const int64_t values = amx ? amx_tile_values(view.rows, view.cols) : panel_values(view.rows, view.cols);
    total += (values + 31) / 32 * 32;
  }
  if (chosen.empty()) return 0;
  const std::shared_ptr<bf16> arena = huge_page_buffer(static_cast<size_t>(total) * sizeof(bf16));
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (amx)
      pack_amx_tiles(chosen[i]->view(), arena.get() + offsets[i]);
    else
      pack_panels(chosen[i]->view(), arena.get() + offsets[i]);
    chosen[i]->packed = std::shared_ptr<const bf16>(arena, arena.get() + offsets[i]);  // shares the arena
    chosen[i]->packed_layout = amx ? PackedLayout::AmxTiles : PackedLayout::Panels;
  }
  return static_cast<int>(chosen.size());
}

bool pack_for_cpu(OwnedMatrix& matrix, PackedLayout layout) {
  OwnedMatrix* one = &matrix;
  return pack_for_cpu(std::span<OwnedMatrix* const>(&one, 1), layout) == 1;
}

int pack_for_cpu(std::span<OwnedMatrix* const> matrices) {
  return pack_for_cpu(matrices, cpu_packed_layout(WeightsOf::Target));
}

bool pack_for_cpu(OwnedMatrix& matrix) { return pack_for_cpu(matrix, cpu_packed_layout(WeightsOf::Target)); }

// Columns [begin, end) of w as a matrix of their own (begin a multiple of kPackedColumns, or of kAmxColumns in the
// B-tile layout): the same weights.
Matrix column_slice(const Matrix& w, int64_t begin, int64_t end) {
  Matrix slice = w;
  slice.rows = end - begin;
  if (w.f32) slice.f32 = w.f32 + begin * w.cols;
  if (w.b16) slice.b16 = w.b16 + begin * w.cols;
  if (w.bias) slice.bias = w.bias + begin;
  if (amx_tiles(w)) {
    LS_CHECK(begin % kAmxColumns == 0, "a slice of a B-tile matrix starts on a 16-column block");
    slice.packed = w.packed + begin / kAmxColumns * amx_tile_values(kAmxColumns, w.cols);
  } else if (w.packed) {
    slice.packed = w.packed + begin / kPackedColumns * panel_values(kPackedColumns, w.cols);
  }
  return slice;
}

}  // namespace ls::compute
