// The lean streamed decode experts (ExpertFfnPath::StreamedLean*): expert_stream.cu's items, chunks, order and bits
// (4 warps x 8 stages, 8 act columns per gate|up item, 16 output columns per down item), with the per-tile address
// arithmetic out of the K loop (each lane's weight / x chunk pointers, shared offsets and bounds fixed per item; the
// tile adds its K offset; stage indices by counters) and the fragments read four 8x8 matrices per ldmatrix. A warp's
// loop is one serial instruction stream, so its address arithmetic is paid in full (the dense decode GEMMs were
// issue-bound on it: docs/cuda.md). Optionally the down launch combines: a CTA per column group runs the group's
// row chunks, then sums each token's slots over its columns (where one row chunk a warp covers the forward).
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

constexpr int kWarps = 4, kStages = 8;
constexpr int kChunkRows = 8;                             // rows of one expert per item (mma A rows 8..15 zero)
constexpr int kStageBytes = (kChunkRows + 16) * 128;      // x rows then 16 weight rows, 128 bytes each
constexpr int kPipeBytes = kWarps * kStages * kStageBytes;  // 96 KB: two CTAs per SM

struct LeanArgs {
  const __nv_bfloat16* x;   // gate|up: [tokens, K] read through gather; down: act [slots, K] in plan order
  const int32_t* offsets;   // [experts + 1]
  const int32_t* gather;    // or null: A row p is x row gather[p] / gather_divisor
  int gather_divisor;
  const __nv_bfloat16* w;   // [experts, N, K]
  __nv_bfloat16* y;         // SwiGLU: act [slots, N / 2]; else [slots, N]
  int experts, n, k;
  int reverse_k;            // test-only fault: walk K tiles backwards
  int early;                // the offsets were final before the kernel before began: stage weights before waiting
  // down under COMBINE: combined [tokens, n] = sum over slot j of round(y[position of slot t k + j] x weights[t k +
  // j]) in slot order (combine_experts' roundings), by the CTA that ran the column group's every chunk
  const int32_t* plan_order;  // [tokens * top_k] the plan's order (slot of each position)
  const float* weights;       // [tokens * top_k] in slot order
  __nv_bfloat16* combined;
  int tokens, top_k;
};

// Items are numbered (row chunk, column group), groups fastest, as in expert_stream_kernel. Under COMBINE (down
// only) a CTA takes whole column groups: its warps run the group's row chunks, then its threads combine the group's
// columns of every token in slot order (no tickets, no device fences: the outputs are the CTA's own).
template <bool SWIGLU, bool COMBINE = false>
__global__ void __launch_bounds__(32 * kWarps) expert_lean_kernel(LeanArgs a) {
  static_assert(!(SWIGLU && COMBINE), "the combine rides on the down launch");
  constexpr int kItemCols = SWIGLU ? 8 : 16;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  int* chunk_end = reinterpret_cast<int*>(shared_raw + kPipeBytes);  // [experts]: row chunks of experts 0..e
  int* position = chunk_end + a.experts;  // COMBINE: [tokens * top_k] slot -> plan position, -1 if left out
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
  const int k_tiles = (a.k + gd::kBlockK - 1) / gd::kBlockK;
  const uint32_t pipe = gd::smem_address(shared_raw) + warp * kStages * kStageBytes;
  bool waited = !a.early;
  // Fixed per lane: the chunk it copies, its shared offsets and its fragments' shared offsets. Copies: weight rows
  // (lane >> 3) + 4 i (i < 4) and x rows (lane >> 3) + 4 h (h < 2), 16-byte chunk lane & 7 of each K tile.
  const int chunk = lane & 7;
  const int k_left = a.k - chunk * 8;  // the lane's chunk at tile offset koff is inside K while koff < k_left
  uint32_t w_dst[4], x_dst[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) w_dst[i] = gd::swizzled(kChunkRows + (lane >> 3) + 4 * i, chunk);
#pragma unroll
  for (int h = 0; h < 2; ++h) x_dst[h] = gd::swizzled((lane >> 3) + 4 * h, chunk);
  // A (x rows 0..7) of steps 2 s2 and 2 s2 + 1 in one x4: matrices at chunks 4 s2 + 0..3; B of step s in one x4:
  // weight rows 8..15 and 16..23 at chunks 2 s and 2 s + 1
  uint32_t a_off[2], b_off[4];
#pragma unroll
  for (int s2 = 0; s2 < 2; ++s2) a_off[s2] = gd::swizzled(lane & 7, 4 * s2 + (lane >> 3));
#pragma unroll
  for (int s = 0; s < 4; ++s)
    b_off[s] = gd::swizzled(kChunkRows + ((lane >> 4) << 3) + (lane & 7), 2 * s + ((lane >> 3) & 1));

  auto run_item = [&](int chunk_index, int group) {
    const int c_first = group * kItemCols;
    int lo = 0, hi = a.experts - 1;  // the first expert whose chunk_end exceeds chunk_index
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (chunk_end[mid] > chunk_index) hi = mid; else lo = mid + 1;
    }
    const int expert = lo;
    const int chunk_in_expert = chunk_index - (expert ? chunk_end[expert - 1] : 0);
    const int64_t row0 = a.offsets[expert] + static_cast<int64_t>(chunk_in_expert) * kChunkRows;
    const int rows = static_cast<int>(min(static_cast<int64_t>(kChunkRows), a.offsets[expert + 1] - row0));
    const __nv_bfloat16* we = a.w + static_cast<int64_t>(expert) * a.n * a.k;
    const __nv_bfloat16* w_src[4];
    bool w_in[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = (lane >> 3) + 4 * i;
      const int col = c_first + (SWIGLU ? (row & 7) : row);
      const int w_row = SWIGLU && row >= 8 ? out_n + col : col;
      w_in[i] = col < out_n;
      w_src[i] = we + (w_in[i] ? static_cast<int64_t>(w_row) * a.k + chunk * 8 : 0);
    }
    const __nv_bfloat16* x_src[2];
    bool x_in[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (lane >> 3) + 4 * h;
      x_in[h] = r < rows;
      const int64_t p = row0 + (x_in[h] ? r : 0);
      x_src[h] = a.x + (a.gather ? a.gather[p] / a.gather_divisor : p) * a.k + chunk * 8;
    }
    auto k_of = [&](int t) { return (a.reverse_k ? k_tiles - 1 - t : t) * gd::kBlockK; };
    auto stage_weights = [&](int t, int stage) {
      const uint32_t base = pipe + stage * kStageBytes;
      const int koff = k_of(t);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool inside = w_in[i] && koff < k_left;
        gd::copy_chunk(base + w_dst[i], w_src[i] + (inside ? koff : 0), inside);  // w_src: in bounds at 0
      }
    };
    auto stage_x = [&](int t, int stage) {
      const uint32_t base = pipe + stage * kStageBytes;
      const int koff = k_of(t);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows past the chunk's are zero-filled
        const bool inside = x_in[h] && koff < k_left;
        gd::copy_chunk(base + x_dst[h], x_src[h] + (inside ? koff : 0), inside);
      }
    };
    // Prologue: kStages - 1 tiles in one group; in an early launch the first item's weights go out before the wait.
    for (int t = 0; t < kStages - 1 && t < k_tiles; ++t) stage_weights(t, t);
    if (!waited) {
      ls::cuda::wait_for_previous_kernel();
      ls::cuda::let_next_kernel_start();
      waited = true;
    }
    for (int t = 0; t < kStages - 1 && t < k_tiles; ++t) stage_x(t, t);
    gd::commit_group();
#pragma unroll
    for (int t = 1; t < kStages - 1; ++t) gd::commit_group();  // empty groups keep the count
    float acc[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    int read_stage = 0, write_stage = kStages - 1;  // t % kStages and (t + kStages - 1) % kStages
    for (int t = 0; t < k_tiles; ++t) {
      gd::wait_group<kStages - 2>();
      __syncwarp();
      if (t + kStages - 1 < k_tiles) {
        stage_weights(t + kStages - 1, write_stage);
        stage_x(t + kStages - 1, write_stage);
      }
      gd::commit_group();
      const uint32_t base = pipe + read_stage * kStageBytes;
      read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
      write_stage = write_stage == kStages - 1 ? 0 : write_stage + 1;
#pragma unroll
      for (int s2 = 0; s2 < 2; ++s2) {  // four 16-wide steps, ascending K, two A fragments per ldmatrix
        uint32_t a4[4];
        gd::ldmatrix_x4(base + a_off[s2], a4[0], a4[1], a4[2], a4[3]);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int step = 2 * s2 + half;
          const uint32_t fa[4] = {a4[2 * half], 0u, a4[2 * half + 1], 0u};  // rows 8..15 of the mma are zero
          uint32_t fb[2][2];
          gd::ldmatrix_x4(base + b_off[step], fb[0][0], fb[0][1], fb[1][0], fb[1][1]);
          gd::mma_bf16(acc[0], fa, fb[0]);
          gd::mma_bf16(acc[1], fa, fb[1]);
        }
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
        for (int j = 0; j < 2; ++j) {
          const int c = c_first + j * 8 + (lane & 3) * 2;
          if (c < a.n) a.y[p * a.n + c] = __float2bfloat16_rn(acc[j][0]);
          if (c + 1 < a.n) a.y[p * a.n + c + 1] = __float2bfloat16_rn(acc[j][1]);
        }
      }
    }
  };

  if constexpr (!COMBINE) {
    for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp; item < items;
         item += static_cast<int64_t>(gridDim.x) * kWarps)
      run_item(static_cast<int>(item / groups), static_cast<int>(item % groups));
  } else {
    const int chunks = chunk_end[a.experts - 1];
    for (int group = blockIdx.x; group < groups; group += gridDim.x) {
      for (int c = warp; c < chunks; c += kWarps) run_item(c, group);
      __syncthreads();  // the group's outputs of every chunk, written by this CTA, are visible to its threads
      ls::cuda::wait_for_previous_kernel();  // writes below only after the kernel before is done (a no-op if waited)
      const int c_first = group * kItemCols;
      for (int i = threadIdx.x; i < a.tokens * kItemCols; i += blockDim.x) {
        const int t = i / kItemCols, c = c_first + i % kItemCols;
        if (c >= a.n) continue;
        float sum = 0.0f;
        for (int j = 0; j < a.top_k; ++j) {  // combine_experts' roundings, slot order
          const int s = t * a.top_k + j, p = position[s];
          if (p < 0) continue;
          const float v = __bfloat162float(a.y[static_cast<int64_t>(p) * a.n + c]);
          sum = __fadd_rn(sum, round_bf16(__fmul_rn(v, a.weights[s])));
        }
        a.combined[static_cast<int64_t>(t) * a.n + c] = __float2bfloat16_rn(sum);
      }
    }
  }
}

constexpr int kCombineChunks = kWarps;  // the combining down launch: at most one row chunk per warp
constexpr int kCombineSlots = 1024;     // its slot -> plan position table

int lean_shared_bytes(int experts, int combine_slots) { return kPipeBytes + 4 * experts + 4 * combine_slots; }

template <bool SWIGLU, bool COMBINE = false>
Status launch_lean(const LeanArgs& a, int64_t max_chunks, cudaStream_t stream) {
  const int item_cols = SWIGLU ? 8 : 16, out_n = SWIGLU ? a.n / 2 : a.n;
  const int64_t groups = (out_n + item_cols - 1) / item_cols, bound = max_chunks * groups;
  const int64_t ctas = std::clamp<int64_t>(COMBINE ? groups : (bound + kWarps - 1) / kWarps, 1, 65535);
  const int smem = lean_shared_bytes(a.experts, COMBINE ? a.tokens * a.top_k : 0);
  LS_RETURN_IF_ERROR(ls::cuda::launch_programmatic(expert_lean_kernel<SWIGLU, COMBINE>,
                                                   dim3(static_cast<unsigned>(ctas)), 32 * kWarps, smem, stream, a));
  LS_CUDA_TRY_LAUNCH("expert_lean_kernel");
  return ok_status();
}

}  // namespace

void allow_expert_lean_shared() {
  cudaFuncSetAttribute(expert_lean_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       lean_shared_bytes(kMaxTensorExperts, 0));
  cudaFuncSetAttribute(expert_lean_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       lean_shared_bytes(kMaxTensorExperts, 0));
  cudaFuncSetAttribute(expert_lean_kernel<false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       lean_shared_bytes(kMaxTensorExperts, kCombineSlots));
}

namespace {
// Row chunks of 8 a forward can have: at most one partial chunk per routed expert plus the whole ones.
int64_t max_chunks_of(const ExpertFfn& f) {
  const int64_t slots = f.rows * f.top_k;
  return std::min<int64_t>(f.experts, slots) + slots / kChunkRows;
}
}  // namespace

bool expert_lean_combine_fits(const ExpertFfn& f) {
  return f.rows > 0 && f.y && f.weights && max_chunks_of(f) <= kCombineChunks && f.rows * f.top_k <= kCombineSlots;
}

Status expert_ffn_lean(const ExpertFfn& f, bool combine, int fault, cudaStream_t stream) {
  const int64_t max_chunks = max_chunks_of(f);
  combine = combine && expert_lean_combine_fits(f);
  const LeanArgs up{reinterpret_cast<const __nv_bfloat16*>(f.x), f.offsets, f.order, f.top_k,
                    reinterpret_cast<const __nv_bfloat16*>(f.w_gate_up), reinterpret_cast<__nv_bfloat16*>(f.act),
                    f.experts, static_cast<int>(2 * f.inter), static_cast<int>(f.hidden), fault, 0,
                    nullptr, nullptr, nullptr, 0, 0};
  LS_RETURN_IF_ERROR(launch_lean<true>(up, max_chunks, stream));
  const LeanArgs down{reinterpret_cast<const __nv_bfloat16*>(f.act), f.offsets, nullptr, 1,
                      reinterpret_cast<const __nv_bfloat16*>(f.w_down), reinterpret_cast<__nv_bfloat16*>(f.out),
                      f.experts, static_cast<int>(f.hidden), static_cast<int>(f.inter), fault, 1,
                      f.order, f.weights, reinterpret_cast<__nv_bfloat16*>(f.y), static_cast<int>(f.rows), f.top_k};
  if (combine) return launch_lean<false, true>(down, max_chunks, stream);
  return launch_lean<false>(down, max_chunks, stream);
}

}  // namespace ls::lfm2::gpu
