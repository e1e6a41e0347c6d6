// The streamed decode experts of the CUDA target: every (expert row chunk of 8, column group) item is one warp's own
// cp.async pipeline of K tiles; gate|up + SwiGLU, then down with its weight tiles staged before it waits. Each output
// is the experts' canonical chain (mma.sync m16n8k16 steps over K ascending from zero, 64-wide tiles, tail
// zero-filled, rounded once), so every row keeps its one-row bits. Optionally the down launch also combines: the last
// warp done with a column group weighs and sums each token's slots in slot order (combine_experts' bits).
#include <cuda_bf16.h>

#include <algorithm>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/gemm_device.cuh"
#include "compute/cuda/pdl.cuh"
#include "model/lfm2/cuda/expert_launch.h"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

namespace gd = ls::cuda::gemm_detail;

constexpr int kChunkRows = 8;  // rows of one expert per item: the mma's A rows 8..15 are zero
constexpr int kDownCols = 16;  // columns of a down item (variant 0): one combine ticket each
constexpr int kCombineSlots = 1024;  // tokens * k of a combining launch (the slot -> plan position table)

struct StreamArgs {
  const __nv_bfloat16* x;   // gate|up: [tokens, K] read through gather; down: act [slots, K] in plan order
  const int32_t* offsets;   // [experts + 1]
  const int32_t* gather;    // or null: A row p is x row gather[p] / gather_divisor
  int gather_divisor;
  const __nv_bfloat16* w;   // [experts, N, K]
  __nv_bfloat16* y;         // SwiGLU: act [slots, N / 2]; else [slots, N]
  int experts, n, k;
  int reverse_k;            // test-only fault: walk K tiles backwards
  int early;                // the offsets were final before the kernel before began: stage weights before waiting
  // the combine (down, COMBINE): combined [tokens, n] = sum over slot j of round(y[position of slot t k + j] x
  // weights[t k + j]) in slot order, by the last warp of each column group (tickets [groups]: zero before, zero after)
  const int32_t* plan_order;  // [tokens * top_k] the plan's order (slot of each position)
  const float* weights;       // [tokens * top_k] in slot order
  __nv_bfloat16* combined;
  int32_t* tickets;
  int tokens, top_k;
};

// WARPS warps per CTA, STAGES K tiles in flight per warp, TILES x 8 weight rows per item.
template <int WARPS, int STAGES, int TILES>
struct StreamShape {
  static constexpr int kStageBytes = (kChunkRows + 8 * TILES) * 128;  // x rows then weight rows, 128 bytes each
  static constexpr int kPipeBytes = WARPS * STAGES * kStageBytes;
};

// After a down item's stores: its ticket for column group `group`; the warp that takes the last of the group's
// `chunks` tickets sums every token's weighted slots over the group's columns in slot order (combine_experts'
// roundings), then sets the ticket back to zero for the next launch.
__device__ void combine_if_last(const StreamArgs& a, const int* position, int c_first, int group, int chunks) {
  const int lane = threadIdx.x & 31;
  __threadfence();  // this lane's outputs are visible device-wide before the ticket
  __syncwarp();
  int last = 0;
  if (lane == 0) last = atomicAdd(a.tickets + group, 1) == chunks - 1;
  if (!__shfl_sync(0xffffffffu, last, 0)) return;
  __threadfence();
  // column pairs (n is even: a multiple of 8), read from L2 (the other warps' outputs)
  const unsigned int* out = reinterpret_cast<const unsigned int*>(a.y);
  for (int i = lane; i < a.tokens * (kDownCols / 2); i += 32) {
    const int t = i / (kDownCols / 2), c = c_first + 2 * (i % (kDownCols / 2));
    if (c >= a.n) continue;
    float sum0 = 0.0f, sum1 = 0.0f;
    for (int j = 0; j < a.top_k; ++j) {
      const int s = t * a.top_k + j, p = position[s];
      if (p < 0) continue;
      const unsigned int pair = __ldcg(out + (static_cast<int64_t>(p) * a.n + c) / 2);
      const float w = a.weights[s];
      sum0 = __fadd_rn(sum0, round_bf16(__fmul_rn(__bfloat162float(__ushort_as_bfloat16(pair & 0xffffu)), w)));
      sum1 = __fadd_rn(sum1, round_bf16(__fmul_rn(__bfloat162float(__ushort_as_bfloat16(pair >> 16)), w)));
    }
    a.combined[static_cast<int64_t>(t) * a.n + c] = __float2bfloat16_rn(sum0);
    a.combined[static_cast<int64_t>(t) * a.n + c + 1] = __float2bfloat16_rn(sum1);
  }
  if (lane == 0) a.tickets[group] = 0;
}

// Items are numbered (row chunk, column group), groups fastest; row chunks are counted per expert on the device
// (ceil(rows_e / 8)), so no host sync sizes the work. Under SWIGLU an item is 8 act columns: weight rows c.. (gate)
// and N/2 + c.. (up); otherwise 8 * TILES output columns.
template <int WARPS, int STAGES, int TILES, bool SWIGLU, bool COMBINE = false>
__global__ void __launch_bounds__(32 * WARPS) expert_stream_kernel(StreamArgs a) {
  using Shape = StreamShape<WARPS, STAGES, TILES>;
  static_assert(!SWIGLU || TILES == 2, "a SwiGLU item pairs 8 gate and 8 up rows");
  static_assert(!COMBINE || (!SWIGLU && TILES * 8 == kDownCols), "the combine rides on 16-column down items");
  constexpr int kItemCols = SWIGLU ? 8 : 8 * TILES;
  // the warps' pipelines, then chunk_end [experts] (row chunks of experts 0..e), then under COMBINE position
  // [tokens * top_k] (slot -> plan position, -1 where the plan left it out): sized at launch (stream_shared_bytes)
  extern __shared__ __align__(128) unsigned char shared_raw[];
  int* chunk_end = reinterpret_cast<int*>(shared_raw + Shape::kPipeBytes);
  int* position = chunk_end + a.experts;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (!a.early) {  // the kernel before wrote the offsets: nothing to stage before it is done
    ls::cuda::wait_for_previous_kernel();
    ls::cuda::let_next_kernel_start();
  }
  if (warp == 0) {
    int carry = 0;
    for (int base = 0; base < a.experts; base += 32) {
      const int e = base + lane;
      int chunks = e < a.experts ? (a.offsets[e + 1] - a.offsets[e] + kChunkRows - 1) / kChunkRows : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, chunks, o);
        if (lane >= o) chunks += v;
      }
      if (e < a.experts) chunk_end[e] = carry + chunks;
      carry += __shfl_sync(0xffffffffu, chunks, 31);
    }
  }
  if constexpr (COMBINE) {  // the plan is final here (an early launch: it was before the kernel before began)
    const int slots = a.tokens * a.top_k;
    for (int s = threadIdx.x; s < slots; s += blockDim.x) position[s] = -1;
    __syncthreads();
    const int planned = a.offsets[a.experts];
    for (int p = threadIdx.x; p < planned; p += blockDim.x) {
      const int s = a.plan_order[p];
      if (s >= 0 && s < slots) position[s] = p;
    }
  }
  __syncthreads();
  const int out_n = SWIGLU ? a.n / 2 : a.n;
  const int groups = (out_n + kItemCols - 1) / kItemCols;
  const int64_t items = static_cast<int64_t>(chunk_end[a.experts - 1]) * groups;
  if (COMBINE && items == 0 && blockIdx.x == 0) {  // nothing planned: every token's sum is empty
    ls::cuda::wait_for_previous_kernel();  // writes only after the kernel before is done
    for (int64_t i = threadIdx.x; i < static_cast<int64_t>(a.tokens) * a.n; i += blockDim.x)
      a.combined[i] = __float2bfloat16_rn(0.0f);
  }
  const int k_tiles = (a.k + gd::kBlockK - 1) / gd::kBlockK;
  const uint32_t pipe = gd::smem_address(shared_raw) + warp * STAGES * Shape::kStageBytes;
  bool waited = !a.early;

  for (int64_t item = static_cast<int64_t>(blockIdx.x) * WARPS + warp; item < items;
       item += static_cast<int64_t>(gridDim.x) * WARPS) {
    const int chunk = static_cast<int>(item / groups), c_first = static_cast<int>(item % groups) * kItemCols;
    int lo = 0, hi = a.experts - 1;  // the first expert whose chunk_end exceeds chunk
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (chunk_end[mid] > chunk) hi = mid; else lo = mid + 1;
    }
    const int expert = lo;
    const int64_t row0 = a.offsets[expert] + static_cast<int64_t>(chunk - (expert ? chunk_end[expert - 1] : 0)) *
                                                 kChunkRows;
    const int rows = static_cast<int>(min(static_cast<int64_t>(kChunkRows), a.offsets[expert + 1] - row0));
    const __nv_bfloat16* we = a.w + static_cast<int64_t>(expert) * a.n * a.k;
    // This lane's x chunks: rows lane / 8 and lane / 8 + 4, 16-byte chunk lane % 8 of each K tile.
    const int x_chunk = lane & 7;
    const __nv_bfloat16* x_row[2];
    bool x_inside[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (lane >> 3) + 4 * h;
      x_inside[h] = r < rows;
      const int64_t p = row0 + (x_inside[h] ? r : 0);
      x_row[h] = a.x + (a.gather ? a.gather[p] / a.gather_divisor : p) * a.k;
    }
    auto k_of = [&](int t) { return (a.reverse_k ? k_tiles - 1 - t : t) * gd::kBlockK; };
    auto stage_weights = [&](int t) {
      const uint32_t base = pipe + (t % STAGES) * Shape::kStageBytes;
      const int k0 = k_of(t);
#pragma unroll
      for (int i = 0; i < TILES * 2; ++i) {  // 8 * TILES rows of 8 chunks, 32 chunks per step
        const int index = lane + 32 * i, row = index >> 3, part = index & 7;
        const int col = c_first + (SWIGLU ? (row & 7) : row);
        const int w_row = SWIGLU && row >= 8 ? out_n + col : col;
        const bool inside = col < out_n && k0 + part * 8 < a.k;
        gd::copy_chunk(base + gd::swizzled(kChunkRows + row, part),
                       we + (inside ? static_cast<int64_t>(w_row) * a.k + k0 + part * 8 : 0), inside);
      }
    };
    auto stage_x = [&](int t) {
      const uint32_t base = pipe + (t % STAGES) * Shape::kStageBytes;
      const int k = k_of(t) + x_chunk * 8;
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows past the chunk's are zero-filled
        const bool inside = x_inside[h] && k < a.k;
        gd::copy_chunk(base + gd::swizzled((lane >> 3) + 4 * h, x_chunk), x_row[h] + (inside ? k : 0), inside);
      }
    };
    // Prologue: STAGES - 1 tiles in one group; in an early launch the first item's weights go out before the wait.
    for (int t = 0; t < STAGES - 1 && t < k_tiles; ++t) stage_weights(t);
    if (!waited) {
      ls::cuda::wait_for_previous_kernel();
      ls::cuda::let_next_kernel_start();
      waited = true;
    }
    for (int t = 0; t < STAGES - 1 && t < k_tiles; ++t) stage_x(t);
    gd::commit_group();
    for (int t = 1; t < STAGES - 1; ++t) gd::commit_group();  // empty groups keep the count
    float acc[TILES][4];
#pragma unroll
    for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    for (int t = 0; t < k_tiles; ++t) {
      gd::wait_group<STAGES - 2>();
      __syncwarp();
      if (t + STAGES - 1 < k_tiles) {
        stage_weights(t + STAGES - 1);
        stage_x(t + STAGES - 1);
      }
      gd::commit_group();
      const uint32_t base = pipe + (t % STAGES) * Shape::kStageBytes;
#pragma unroll
      for (int step = 0; step < gd::kBlockK / 16; ++step) {  // four 16-wide steps, ascending K
        uint32_t fa[4], fb[TILES][2];
        // A: rows 0..7 at K chunks 2 step and 2 step + 1; rows 8..15 of the mma are zero
        gd::ldmatrix_x2(base + gd::swizzled(lane & 7, step * 2 + ((lane >> 3) & 1)), fa[0], fa[2]);
        fa[1] = fa[3] = 0u;
#pragma unroll
        for (int j = 0; j < TILES; ++j)
          gd::ldmatrix_x2(base + gd::swizzled(kChunkRows + j * 8 + (lane & 7), step * 2 + ((lane >> 3) & 1)),
                          fb[j][0], fb[j][1]);
#pragma unroll
        for (int j = 0; j < TILES; ++j) gd::mma_bf16(acc[j], fa, fb[j]);
      }
    }
    gd::wait_group<0>();
    __syncwarp();  // every lane is done reading the stages before the next item refills them
    // c0, c1 at (row lane / 4, columns 2 (lane % 4) + {0, 1}); c2, c3 are the zero rows 8..15
    const int r = lane >> 2;
    if (r < rows) {
      const int64_t p = row0 + r;
      if constexpr (SWIGLU) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // cuda::swiglu's arithmetic on the two rounded outputs
          const int c = c_first + (lane & 3) * 2 + e;
          if (c >= out_n) continue;
          const float g = round_bf16(acc[0][e]), u = round_bf16(acc[1][e]);
          const float silu =
              round_bf16(__fdiv_rn(g, __fadd_rn(1.0f, static_cast<float>(exp(static_cast<double>(-g))))));
          a.y[p * out_n + c] = __float2bfloat16_rn(__fmul_rn(silu, u));
        }
      } else {
#pragma unroll
        for (int j = 0; j < TILES; ++j) {
          const int c = c_first + j * 8 + (lane & 3) * 2;
          if (c < a.n) a.y[p * a.n + c] = __float2bfloat16_rn(acc[j][0]);
          if (c + 1 < a.n) a.y[p * a.n + c + 1] = __float2bfloat16_rn(acc[j][1]);
        }
      }
    }
    if constexpr (COMBINE)
      combine_if_last(a, position, c_first, static_cast<int>(item % groups), chunk_end[a.experts - 1]);
  }
}

// Gate|up 4 warps x 8 stages (two CTAs per SM), down 4 warps x 8 stages of 16 columns (the narrow-down, 2-warp and
// 6-stage variants never won in the 8B step and were removed in session 8).
// Dynamic shared memory of a launch: the pipelines, chunk_end and (COMBINE) the position table; at most max_bytes.
template <int WARPS, int STAGES, int TILES, bool COMBINE>
int stream_shared_bytes(int experts, int slots) {
  return StreamShape<WARPS, STAGES, TILES>::kPipeBytes + 4 * experts + (COMBINE ? 4 * slots : 0);
}

template <int STAGES, int TILES, bool SWIGLU, int kWarps = 4, bool COMBINE = false>
Status launch_stream(const StreamArgs& a, int64_t max_chunks, cudaStream_t stream) {
  const int smem = stream_shared_bytes<kWarps, STAGES, TILES, COMBINE>(a.experts, a.tokens * a.top_k);
  const int item_cols = SWIGLU ? 8 : 8 * TILES, out_n = SWIGLU ? a.n / 2 : a.n;
  const int64_t bound = max_chunks * ((out_n + item_cols - 1) / item_cols);
  const int64_t ctas = std::clamp<int64_t>((bound + kWarps - 1) / kWarps, 1, 65535);
  LS_RETURN_IF_ERROR(ls::cuda::launch_programmatic(expert_stream_kernel<kWarps, STAGES, TILES, SWIGLU, COMBINE>,
                                                   dim3(static_cast<unsigned>(ctas)), 32 * kWarps, smem, stream, a));
  LS_CUDA_TRY_LAUNCH("expert_stream_kernel");
  return ok_status();
}

template <int STAGES, int TILES, bool SWIGLU, int kWarps = 4, bool COMBINE = false>
void allow_shared() {
  cudaFuncSetAttribute(expert_stream_kernel<kWarps, STAGES, TILES, SWIGLU, COMBINE>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                       stream_shared_bytes<kWarps, STAGES, TILES, COMBINE>(kMaxTensorExperts, kCombineSlots));
}

}  // namespace

void allow_expert_stream_shared() {
  allow_shared<8, 2, true>();
  allow_shared<8, 2, false>();
  allow_shared<8, 2, false, 4, true>();
}

bool expert_stream_combine_fits(int64_t rows, int top_k) { return rows * top_k <= kCombineSlots; }

int64_t expert_combine_tickets(int64_t hidden) { return (hidden + kDownCols - 1) / kDownCols; }

Status expert_ffn_streamed(const ExpertFfn& f, bool combine, int fault, cudaStream_t stream) {
  const int64_t slots = f.rows * f.top_k;
  // row chunks of 8: at most one partial chunk per routed expert plus the whole ones
  const int64_t max_chunks = std::min<int64_t>(f.experts, slots) + slots / kChunkRows;
  const StreamArgs up{reinterpret_cast<const __nv_bfloat16*>(f.x), f.offsets, f.order, f.top_k,
                      reinterpret_cast<const __nv_bfloat16*>(f.w_gate_up), reinterpret_cast<__nv_bfloat16*>(f.act),
                      f.experts, static_cast<int>(2 * f.inter), static_cast<int>(f.hidden), fault, 0,
                      nullptr, nullptr, nullptr, nullptr, 0, 0};
  LS_RETURN_IF_ERROR((launch_stream<8, 2, true>(up, max_chunks, stream)));
  const StreamArgs down{reinterpret_cast<const __nv_bfloat16*>(f.act), f.offsets, nullptr, 1,
                        reinterpret_cast<const __nv_bfloat16*>(f.w_down), reinterpret_cast<__nv_bfloat16*>(f.out),
                        f.experts, static_cast<int>(f.hidden), static_cast<int>(f.inter), fault, 1,
                        f.order, f.weights, reinterpret_cast<__nv_bfloat16*>(f.y), f.tickets,
                        static_cast<int>(f.rows), f.top_k};
  if (combine) return launch_stream<8, 2, false, 4, true>(down, max_chunks, stream);
  return launch_stream<8, 2, false>(down, max_chunks, stream);
}

}  // namespace ls::lfm2::gpu
