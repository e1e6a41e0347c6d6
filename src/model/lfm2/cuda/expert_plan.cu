// CUDA MoE plumbing of the target: the expert plan (choices grouped by expert in slot order), the weighted scatter
// back into slot order, and for few rows the routing + plan in one launch and the combine in one launch.
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

#include <atomic>
#include <mutex>
#include <string>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/gemm_device.cuh"
#include "compute/cuda/pdl.cuh"
#include "model/lfm2/cuda/expert_router.cuh"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

constexpr int kRouteWarps = 8;           // warps of the one route + plan CTA
constexpr int64_t kRouteMaxRows = 64;
constexpr int kRouteMaxExperts = 256;
constexpr int kCombineMaxSlots = 1024;
constexpr int kRouterMaxK = 2048;       // the router GEMM in the launch: K of one canonical chain
constexpr int kRouterStages = 12;       // K tiles in flight per warp
constexpr int kRouterStageBytes = 16 * 128;  // 8 x rows and 8 router rows of one 64-wide K tile
constexpr int kRouterPipeBytes = kRouteWarps * kRouterStages * kRouterStageBytes;

constexpr int64_t kPreloadMaxRows = 16;  // the preloaded router: x rows staged with it (a multiple of 8)

std::atomic<int> g_fused_launches{2};
// the router preloaded where it fits (H200 batch s6A, 8B decode step with graphs: 1.778 ms preloaded vs 1.840 ms
// streamed; with the combine in down 1.835 vs 1.906)
std::atomic<bool> g_router_preload{true};

namespace gd = ls::cuda::gemm_detail;
using route_detail::preload_bytes;
using route_detail::router_preloaded_in_block;
using route_detail::store_router_logits;

// The router GEMM of the RoutePlan's rows in the route + plan CTA: logits [rows, E] = round(x @ router^T (+ bias)),
// the GemmEngine's canonical chain for K <= 2048 (one accumulator, mma.sync m16n8k16 steps over K ascending from
// zero, tail zero-filled). Items (row chunk of 8, 8 experts) go to warps, each a cp.async pipeline of K tiles; the
// first item's router tiles are staged before the programmatic wait (the router is constant). Returns after the wait.
__device__ void router_in_block(const RoutePlan& a, unsigned char* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int E = a.experts, D = a.hidden;
  const int groups = (E + 7) / 8, k_tiles = (D + gd::kBlockK - 1) / gd::kBlockK;
  const int items = groups * static_cast<int>((a.rows + 7) / 8);
  const uint32_t pipe = gd::smem_address(smem) + warp * kRouterStages * kRouterStageBytes;
  bool waited = false;
  for (int item = warp; item < items; item += kRouteWarps) {
    const int e0 = (item % groups) * 8;
    const int64_t r0 = static_cast<int64_t>(item / groups) * 8;
    const int rows = static_cast<int>(min(static_cast<int64_t>(8), a.rows - r0));
    auto stage = [&](int t, bool weights) {  // 8 rows of 8 chunks: two per lane
      const uint32_t base = pipe + (t % kRouterStages) * kRouterStageBytes;
      const int k0 = t * gd::kBlockK;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int index = lane + 32 * h, row = index >> 3, part = index & 7, k = k0 + part * 8;
        if (weights) {
          const bool inside = e0 + row < E && k < D;
          const int64_t at = inside ? (e0 + row) * static_cast<int64_t>(D) + k : 0;
          gd::copy_chunk(base + gd::swizzled(8 + row, part), a.router + at, inside);
        } else {
          const bool inside = row < rows && k < D;
          gd::copy_chunk(base + gd::swizzled(row, part), a.x + (inside ? (r0 + row) * D + k : 0), inside);
        }
      }
    };
    for (int t = 0; t < kRouterStages - 1 && t < k_tiles; ++t) stage(t, true);
    if (!waited) {
      ls::cuda::wait_for_previous_kernel();  // the kernel before wrote x
      ls::cuda::let_next_kernel_start();
      waited = true;
    }
    for (int t = 0; t < kRouterStages - 1 && t < k_tiles; ++t) stage(t, false);
    for (int t = 0; t < kRouterStages - 1; ++t) gd::commit_group();  // all of the prologue in the first group
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int t = 0; t < k_tiles; ++t) {
      gd::wait_group<kRouterStages - 2>();
      __syncwarp();
      if (t + kRouterStages - 1 < k_tiles) {
        stage(t + kRouterStages - 1, true);
        stage(t + kRouterStages - 1, false);
      }
      gd::commit_group();
      const uint32_t base = pipe + (t % kRouterStages) * kRouterStageBytes;
#pragma unroll
      for (int step = 0; step < gd::kBlockK / 16; ++step) {
        uint32_t fa[4], fb[2];
        gd::ldmatrix_x2(base + gd::swizzled(lane & 7, step * 2 + ((lane >> 3) & 1)), fa[0], fa[2]);
        fa[1] = fa[3] = 0u;
        gd::ldmatrix_x2(base + gd::swizzled(8 + (lane & 7), step * 2 + ((lane >> 3) & 1)), fb[0], fb[1]);
        gd::mma_bf16(acc, fa, fb);
      }
    }
    gd::wait_group<0>();
    __syncwarp();
    store_router_logits(a, acc, lane, rows, r0, e0, E, nullptr);
  }
  if (!waited) {
    ls::cuda::wait_for_previous_kernel();
    ls::cuda::let_next_kernel_start();
  }
}

// The plan in one CTA (every warp): counts per expert by ballots over the slots (one warp per expert), offsets by
// a shuffle scan in warp 0, then order: ascending slot index inside each expert. counts: shared [experts].
__device__ void plan_in_block(const int32_t* chosen, int64_t slot_count, int experts, int32_t* counts,
                              int32_t* offsets, int32_t* order) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int e = warp; e < experts; e += warps) {
    int count = 0;
    for (int64_t base = 0; base < slot_count; base += 32) {
      const int64_t s = base + lane;
      count += __popc(__ballot_sync(0xffffffffu, s < slot_count && chosen[s] == e));
    }
    if (lane == 0) counts[e] = count;
  }
  __syncthreads();
  if (warp == 0) {  // exclusive prefix: offsets [experts + 1], counts becomes each expert's first position
    int carry = 0;
    for (int base = 0; base < experts; base += 32) {
      const int e = base + lane;
      const int own = e < experts ? counts[e] : 0;
      int sum = own;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, sum, o);
        if (lane >= o) sum += v;
      }
      if (e < experts) {
        offsets[e] = carry + sum - own;
        counts[e] = carry + sum - own;
      }
      carry += __shfl_sync(0xffffffffu, sum, 31);
    }
    if (lane == 0) offsets[experts] = carry;
  }
  __syncthreads();
  for (int e = warp; e < experts; e += warps) {
    int next = counts[e];
    for (int64_t base = 0; base < slot_count; base += 32) {
      const int64_t s = base + lane;
      const bool mine = s < slot_count && chosen[s] == e;
      const unsigned mask = __ballot_sync(0xffffffffu, mine);
      if (mine) order[next + __popc(mask & ((1u << lane) - 1u))] = static_cast<int32_t>(s);
      next += __popc(mask);
    }
  }
}

__global__ void plan_experts_kernel(const int32_t* chosen, int64_t slot_count, int experts, int32_t* offsets,
                                    int32_t* order) {
  extern __shared__ int32_t counts[];  // [experts]
  plan_in_block(chosen, slot_count, experts, counts, offsets, order);
}

// Routing as cuda::route_experts (sigmoid scores rounded to bf16, + bias, top-k by descending biased score with ties
// to the lower id and NaN never picked, weights normalized and scaled with its roundings), one warp per row, then
// the plan of every slot, in one CTA launched programmatically.
__global__ void __launch_bounds__(kRouteWarps * 32) route_plan_kernel(RoutePlan a) {
  extern __shared__ float route_shared[];  // per warp: score [experts], biased [experts]; then counts [experts]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int E = a.experts, k = a.k;
  float* score = route_shared + static_cast<int64_t>(warp) * 2 * E;
  float* biased = score + E;
  if (a.x) {  // the router GEMM first (its pipelines use the memory of the scores)
    if (a.preload_router)
      router_preloaded_in_block(a, reinterpret_cast<unsigned char*>(route_shared), nullptr);
    else
      router_in_block(a, reinterpret_cast<unsigned char*>(route_shared));
    __syncthreads();  // every logit is written and visible to the block
  } else {
    ls::cuda::wait_for_previous_kernel();  // the router GEMM wrote the logits
    ls::cuda::let_next_kernel_start();
  }
  for (int64_t row = warp; row < a.rows; row += kRouteWarps) {
    for (int e = lane; e < E; e += 32) {
      const float logit = load(a.logits + row * E + e);
      const float e_neg = static_cast<float>(exp(static_cast<double>(-logit)));
      const float s = round_bf16(__fdiv_rn(1.0f, __fadd_rn(1.0f, e_neg)));
      score[e] = s;
      biased[e] = a.expert_bias ? __fadd_rn(s, a.expert_bias[e]) : s;
    }
    __syncwarp();
    for (int slot = 0; slot < k; ++slot) {
      int best = -1;  // this lane's best over e = lane + 32 i (the lowest id among equals), then across lanes
      float value = 0.0f;
      for (int e = lane; e < E; e += 32) {
        const float v = biased[e];
        if (!isnan(v) && (best < 0 || v > value)) {
          best = e;
          value = v;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const int other = __shfl_xor_sync(0xffffffffu, best, o);
        const float other_value = __shfl_xor_sync(0xffffffffu, value, o);
        if (other >= 0 && (best < 0 || other_value > value || (other_value == value && other < best))) {
          best = other;
          value = other_value;
        }
      }
      if (lane == 0) {
        a.chosen[row * k + slot] = best;
        a.weights[row * k + slot] = best >= 0 ? score[best] : 0.0f;
        if (best >= 0) biased[best] = __int_as_float(0x7fc00000);  // taken
      }
      __syncwarp();
    }
    if (lane == 0) {
      float* w = a.weights + row * k;
      if (a.normalize) {
        float sum = 0.0f;
        for (int slot = 0; slot < k; ++slot) sum = __fadd_rn(sum, w[slot]);
        const float denominator = round_bf16(__fadd_rn(round_bf16(sum), 1e-6f));
        for (int slot = 0; slot < k; ++slot) w[slot] = round_bf16(__fdiv_rn(w[slot], denominator));
      }
      for (int slot = 0; slot < k; ++slot) w[slot] = round_bf16(__fmul_rn(w[slot], a.scaling));
    }
    __syncwarp();
  }
  __syncthreads();  // every row's choices are written (and visible to the block)
  int32_t* counts = reinterpret_cast<int32_t*>(route_shared + static_cast<int64_t>(kRouteWarps) * 2 * E);
  plan_in_block(a.chosen, a.rows * k, E, counts, a.offsets, a.order);
}

__global__ void scatter_weighted_kernel(const bf16* out, const int32_t* order, const float* weights,
                                        int64_t slot_count, int width, bf16* slots) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= slot_count * width) return;
  const int64_t p = i / width;
  const int d = static_cast<int>(i % width);
  const int32_t slot = order[p];
  store(slots + static_cast<int64_t>(slot) * width + d, load(out + i) * weights[slot]);
}

// scatter_weighted + cuda::sum_slots in one pass: each CTA inverts the plan's order in shared memory, then each
// output sums its row's weighted slots in slot order (the same roundings).
__global__ void combine_kernel(const bf16* out, const int32_t* offsets, int experts, const int32_t* order,
                               const float* weights, int64_t rows, int k, int width, bf16* y) {
  __shared__ int32_t position[kCombineMaxSlots];  // slot -> plan position, -1 where the plan left it out
  ls::cuda::wait_for_previous_kernel();  // the down GEMM wrote out
  ls::cuda::let_next_kernel_start();
  const int slots = static_cast<int>(rows * k);
  for (int s = threadIdx.x; s < slots; s += blockDim.x) position[s] = -1;
  __syncthreads();
  const int planned = offsets[experts];
  for (int p = threadIdx.x; p < planned; p += blockDim.x) {
    const int s = order[p];
    if (s >= 0 && s < slots) position[s] = p;
  }
  __syncthreads();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * width;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width;
    const int d = static_cast<int>(i % width);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int s = static_cast<int>(row) * k + j, p = position[s];
      if (p >= 0)
        sum = __fadd_rn(sum, round_bf16(__fmul_rn(load(out + static_cast<int64_t>(p) * width + d), weights[s])));
    }
    store(y + i, sum);
  }
}

}  // namespace

Status plan_experts(const int32_t* chosen, int64_t slot_count, int experts, int32_t* offsets, int32_t* order,
                    cudaStream_t stream) {
  const int warps = experts < 32 ? experts : 32;
  plan_experts_kernel<<<1, warps * 32, sizeof(int32_t) * experts, stream>>>(chosen, slot_count, experts, offsets,
                                                                            order);
  LS_CUDA_TRY_LAUNCH("plan_experts");
  return ok_status();
}

Status scatter_weighted(const bf16* out, const int32_t* order, const float* weights, int64_t slot_count, int width,
                        bf16* slots, cudaStream_t stream) {
  if (slot_count == 0) return ok_status();
  scatter_weighted_kernel<<<blocks_for(slot_count * width, 256), 256, 0, stream>>>(out, order, weights, slot_count,
                                                                                   width, slots);
  LS_CUDA_TRY_LAUNCH("scatter_weighted");
  return ok_status();
}

bool route_and_plan_fits(int64_t rows, int experts, int k) {
  return rows >= 1 && rows <= kRouteMaxRows && experts >= 1 && experts <= kRouteMaxExperts && k >= 1 && k <= experts;
}

Status route_and_plan(const RoutePlan& plan, cudaStream_t stream) {
  if (plan.x && moe_route_lean() && route_lean_fits(plan.rows, plan.experts, plan.k, plan.hidden))
    return route_and_plan_lean(plan, stream);
  if (plan.norm_h)
    return Status(ErrorCode::InvalidArgument, "route_and_plan: the norm inside runs on the lean kernel only (x set, "
                                              "set_moe_route_lean, route_lean_fits), got rows " +
                                                  std::to_string(plan.rows) + ", K " + std::to_string(plan.hidden));
  RoutePlan a = plan;
  a.preload_router = a.x && g_router_preload.load() && router_preload_fits(a.rows, a.experts, a.hidden);
  if (!route_and_plan_fits(a.rows, a.experts, a.k))
    return Status(ErrorCode::InvalidArgument, "route_and_plan takes 1.." + std::to_string(kRouteMaxRows) +
                                                  " rows, 1.." + std::to_string(kRouteMaxExperts) +
                                                  " experts and 1 <= k <= experts, got rows " +
                                                  std::to_string(a.rows) + ", experts " + std::to_string(a.experts) +
                                                  ", k " + std::to_string(a.k));
  if (a.x && !router_in_route_fits(a.hidden))
    return Status(ErrorCode::InvalidArgument, "route_and_plan: the router GEMM takes K 8.." +
                                                  std::to_string(kRouterMaxK) + " (a multiple of 8), got " +
                                                  std::to_string(a.hidden));
  static std::once_flag once;  // the opt-in for the router's pipelines (legal inside a capture too)
  std::call_once(once, route_plan_setup);
  int shared = static_cast<int>(sizeof(float)) * (kRouteWarps * 2 + 1) * a.experts;
  if (a.x && shared < kRouterPipeBytes) shared = kRouterPipeBytes;  // (the preloaded router fits in it)
  LS_RETURN_IF_ERROR(ls::cuda::launch_programmatic(route_plan_kernel, dim3(1), kRouteWarps * 32, shared, stream, a));
  LS_CUDA_TRY_LAUNCH("route_plan_kernel");
  return ok_status();
}

bool router_in_route_fits(int64_t hidden) { return hidden >= 8 && hidden <= kRouterMaxK && hidden % 8 == 0; }

bool router_preload_fits(int64_t rows, int experts, int64_t hidden) {
  return router_in_route_fits(hidden) && rows >= 1 && rows <= kPreloadMaxRows && experts >= 1 &&
         preload_bytes(rows, experts, hidden) <= kRouterPipeBytes;
}

void set_moe_router_preload(bool on) { g_router_preload = on; }

bool moe_router_preload() { return g_router_preload.load(); }

void route_plan_setup() {
  cudaFuncSetAttribute(route_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRouterPipeBytes);
}

bool combine_experts_fits(int64_t rows, int k) { return rows >= 1 && k >= 1 && rows * k <= kCombineMaxSlots; }

Status combine_experts(const bf16* out, const int32_t* offsets, int experts, const int32_t* order,
                       const float* weights, int64_t rows, int k, int width, bf16* y, cudaStream_t stream) {
  if (!combine_experts_fits(rows, k) || width <= 0)
    return Status(ErrorCode::InvalidArgument, "combine_experts takes at most " + std::to_string(kCombineMaxSlots) +
                                                  " slots and a positive width, got rows " + std::to_string(rows) +
                                                  " x k " + std::to_string(k) + ", width " + std::to_string(width));
  const unsigned blocks = blocks_for(rows * width, 256);
  LS_RETURN_IF_ERROR(ls::cuda::launch_programmatic(combine_kernel, dim3(blocks < 1024 ? blocks : 1024), 256, 0,
                                                   stream, out, offsets, experts, order, weights, rows, k, width, y));
  LS_CUDA_TRY_LAUNCH("combine_kernel");
  return ok_status();
}

void set_moe_fused_launches(int level) { g_fused_launches = level; }

int moe_fused_launches() { return g_fused_launches.load(); }

}  // namespace ls::lfm2::gpu
