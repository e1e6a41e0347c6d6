// CUDA attention of the target: causal GQA over paged KV, keys in blocks by absolute position: the tile kernel's launch
// (attention_tile.cuh) and its split combine; the scalar row kernel (attention_rows.cu) where tiles do not fit.
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/pdl.cuh"
#include "model/lfm2/cuda/attention_tile.cuh"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

// After a split launch: each (row, head) of a split window folds its chunk states 0 .. position / chunk in order
// (fold_chunk, as the walking CTA does) and writes out = O / L. A warp per (row, head).
template <int HD>
__global__ void attention_combine_kernel(TileArgs a) {
  const int lane = threadIdx.x & 31;
  // launched programmatically after the tile kernel; early: the window lookup (staged records) before the wait.
  // Every thread waits before it may leave: the output GEMM after this launch waits for its completion only, so
  // that completion must come after the tile kernel's.
  if (!a.early) ls::cuda::wait_for_previous_kernel();
  ls::cuda::let_next_kernel_start();
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const bool live = pair < a.rows * a.shape.heads;
  const int64_t row = live ? pair / a.shape.heads : 0;
  const WindowInfo w = live ? a.windows[a.row_window[row]] : WindowInfo{};
  const bool split = live && window_split(w, a.splits, a.chunk_cap);
  if (a.early) ls::cuda::wait_for_previous_kernel();
  if (!split) return;
  fold_states<HD>(a, pair, (w.committed + (row - w.first_row)) / kAttentionChunkKeys + 1, lane);
}

int sm_count() {
  static const int count = [] {
    int device = 0, value = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount,
                                                                       device) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return value;
  }();
  return count;
}

// Tiles since it passed on the H200 (batch A: fp64 reference, one-row bits, target splits; prefill 33x faster).
std::atomic<int> chosen_kernel{static_cast<int>(AttentionKernel::Tiles)};
std::atomic<int> bench_splits{0};
// the tile kernel launched early (programmatic, committed keys staged before its wait) up to 256 rows: the only launch
// there since H200 batch s10final (with the early ShortConv and the final gather norm 0.892-0.893 ms against
// 0.932-0.938 for the three old launches, three pairs); false (tests only) runs the plain instance as its reference
std::atomic<bool> attention_early{true};

}  // namespace

void set_attention_kernel(AttentionKernel kernel) { chosen_kernel.store(static_cast<int>(kernel)); }

void set_attention_splits_for_bench(int splits) { bench_splits.store(splits); }

void set_attention_tiles_early(bool on) { attention_early.store(on); }

bool attention_tiles_early() { return attention_early.load(); }


AttentionKernel attention_kernel() { return static_cast<AttentionKernel>(chosen_kernel.load()); }

bool attention_tiles_supported(const KvShape& shape) {
  const int hd = shape.head_dim;
  return (hd == 16 || hd == 32 || hd == 64 || hd == 128) && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0 &&
         shape.heads / shape.kv_heads <= kTileRowsMax;
}

int64_t attention_scratch_floats(const KvShape& shape, int64_t rows, int64_t chunks) {
  return rows * shape.heads * chunks * (shape.head_dim + 2);
}

Status attention_tiles(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                       const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream,
                       const AttentionTiling& tiling, const AttentionScratch& scratch) {
  if (!attention_tiles_supported(shape))
    return Status(ErrorCode::InvalidArgument, "attention tiles: head_dim " + std::to_string(shape.head_dim) +
                                                  " not 16/32/64/128, or " + std::to_string(shape.heads) +
                                                  " heads not a multiple of " + std::to_string(shape.kv_heads) +
                                                  " KV heads, or more than 64 heads per KV head");
  const int group = shape.heads / shape.kv_heads;
  const int most = kTileRowsMax / group;
  if (tiling.tile_rows < 0 || tiling.tile_rows > most)
    return Status(ErrorCode::InvalidArgument, "attention tiles: " + std::to_string(tiling.tile_rows) +
                                                  " rows per CTA, at most " + std::to_string(most) + " at group " +
                                                  std::to_string(group));
  if (tiling.splits < 0 || tiling.splits > kMaxSplits || (tiling.splits > 1 && scratch.states == nullptr))
    return Status(ErrorCode::InvalidArgument, "attention tiles: " + std::to_string(tiling.splits) +
                                                  " splits (at most " + std::to_string(kMaxSplits) +
                                                  ", and more than 1 needs scratch)");
  if (rows == 0) return ok_status();
  // Rows per CTA: the most that still gives two waves of CTAs (fewer rows per CTA read the keys more often but run
  // in parallel). Any choice gives the same bits. Four warps always: those without pairs help stage the blocks.
  int tile = tiling.tile_rows;
  if (tile == 0) {
    tile = most;
    while (tile > 1 && ((rows + tile - 1) / tile) * shape.kv_heads < 2LL * sm_count()) tile = tile / 2;
  }
  const int64_t tiles = (rows + tile - 1) / tile;
  // Splits: from the rows and the scratch only (never the context, so a captured graph stays right as keys grow);
  // about four CTAs per SM (batch B: 16 x 16 verify rows at 2048 keys split in 2 were 1.2x, a 512-row prefill
  // 0.9x; the host cannot tell them apart). Split or not, every row gets the same bits.
  const int64_t per_chunk = rows * shape.heads * (shape.head_dim + 2);
  const int64_t cap = scratch.states ? std::min<int64_t>(scratch.floats / per_chunk, 1 << 30) : 0;
  int64_t splits = tiling.splits;
  if (splits == 0) splits = std::min<int64_t>({kAutoSplits, cap, (4LL * sm_count() + tiles * shape.kv_heads - 1) /
                                                                    (tiles * shape.kv_heads)});
  if (splits < 2 || cap < 2) splits = 1;
  // early only where it won (decode and verify forwards, up to issue 8's 256 rows a round); prefill chunks take the
  // plain instance (the same bits)
  const bool early = attention_early.load() && rows <= 256;
  const TileArgs args{q,    rows, row_window, windows, pages, shape, layer, out, tile, tiling.fault_swap_first_blocks,
                      tiling.fault_early_chunk_edges, static_cast<int>(splits), static_cast<int>(cap),
                      scratch.states, early};
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(shape.kv_heads), static_cast<unsigned>(splits));
  auto pick = [](int head_dim, auto early) {
    constexpr bool E = decltype(early)::value;
    return head_dim == 16   ? attention_tile_kernel<16, E>
           : head_dim == 32 ? attention_tile_kernel<32, E>
           : head_dim == 64 ? attention_tile_kernel<64, E>
                            : attention_tile_kernel<128, E>;
  };
  auto tile_kernel = early ? pick(shape.head_dim, std::true_type{}) : pick(shape.head_dim, std::false_type{});
  if (early)
    LS_RETURN_IF_ERROR(ls::cuda::launch_programmatic(tile_kernel, grid, kTileWarps * 32, 0, stream, args));
  else
    tile_kernel<<<grid, kTileWarps * 32, 0, stream>>>(args);
  LS_CUDA_TRY_LAUNCH("attention tiles");
  if (splits == 1) return ok_status();
  const dim3 combine_blocks(blocks_for(rows * shape.heads, 4));
  auto combine = shape.head_dim == 16   ? attention_combine_kernel<16>
                 : shape.head_dim == 32 ? attention_combine_kernel<32>
                 : shape.head_dim == 64 ? attention_combine_kernel<64>
                                        : attention_combine_kernel<128>;
  // programmatic: its CTAs are resident while the tile kernel drains
  LS_RETURN_IF_ERROR(ls::cuda::launch_programmatic(combine, combine_blocks, 128, 0, stream, args));
  LS_CUDA_TRY_LAUNCH("attention combine");
  return ok_status();
}

Status attention(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                 const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream,
                 const AttentionScratch& scratch) {
  if (attention_kernel() == AttentionKernel::Tiles && attention_tiles_supported(shape))
    return attention_tiles(q, rows, row_window, windows, pages, shape, layer, out, stream,
                           {0, false, bench_splits.load(), false}, scratch);
  return attention_rows(q, rows, row_window, windows, pages, shape, layer, out, stream);
}

}  // namespace ls::lfm2::gpu
