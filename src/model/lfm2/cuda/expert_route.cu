// The lean route + plan of a few rows (set_moe_route_lean): route_plan_kernel's router GEMM (preloaded, the same
// chain) and outputs, with the logits, choices and weights kept in shared memory and registers instead of read back
// from global memory between the steps, each row's top k by one warp in one pass (each expert's rank), and the
// plan of at most 16 x k slots by one warp without block syncs: counts by a scan over the slots, offsets by a warp
// scan, each slot's position by the rank among the earlier slots of its expert (no sort, no ballots per expert).
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/pdl.cuh"
#include "model/lfm2/cuda/expert_router.cuh"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

constexpr int kLeanWarps = 8;
constexpr int64_t kLeanMaxRows = 16;
constexpr int kLeanMaxExperts = 256;

// the lean kernel where it fits (H200 batch s8B, interleaved in one gpu_bench run: the 8B decode step 1.692 / 1.701 ms
// lean vs 1.725 / 1.733 ms old; route + plan alone 7.23 vs 8.59 us at 1 row, 12.36 vs 14.05 at 16; s8A had the
// step a tie and 8.47 vs 8.69 us alone; every MoE test green in both)
std::atomic<bool> g_route_lean{true};
int g_shared_optin = 0;  // bytes of dynamic shared memory a block may opt into (route_lean_setup)

// Shared memory after the preloaded router and x rows: logits (then scores) [rows, E] f32, chosen [rows k] i32,
// weights [rows k] f32, first [E] i32 (each expert's first plan position), biased scores [rows, E] f32.
// With the norm inside, its weight and inverse rms follow at the next 16-byte boundary.
__host__ __device__ int64_t lean_shared_bytes(int64_t rows, int experts, int k, int64_t hidden) {
  return route_detail::preload_bytes(rows, experts, hidden) + 4 * (2 * rows * experts + 2 * rows * k + experts);
}
__host__ __device__ int64_t norm_offset(int64_t rows, int experts, int k, int64_t hidden) {
  return (lean_shared_bytes(rows, experts, k, hidden) + 15) / 16 * 16;
}
int64_t lean_norm_shared_bytes(int64_t rows, int experts, int k, int64_t hidden) {
  return norm_offset(rows, experts, k, hidden) + route_detail::norm_bytes(rows, hidden);
}

template <bool NORM>
__global__ void __launch_bounds__(kLeanWarps * 32) route_plan_lean_kernel(RoutePlan a) {
  extern __shared__ __align__(128) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int E = a.experts, k = a.k, rows = static_cast<int>(a.rows), slots = rows * k;
  float* logit = reinterpret_cast<float*>(shared_raw + route_detail::preload_bytes(a.rows, E, a.hidden));
  int* chosen = reinterpret_cast<int*>(logit + rows * E);
  float* weight = reinterpret_cast<float*>(chosen + slots);
  int* first = reinterpret_cast<int*>(weight + slots);
  float* biased = reinterpret_cast<float*>(first + E);
  // waits for the kernel before, lets the next start (NORM: makes x from h and delta first)
  route_detail::router_preloaded_in_block<NORM>(a, shared_raw, logit,
                                                shared_raw + norm_offset(a.rows, E, k, a.hidden));
  __syncthreads();  // every logit is in shared memory
  // Routing as cuda::route_experts: sigmoid scores rounded to bf16, + bias, the top k by descending biased score with
  // ties to the lower id and NaN never picked, weights normalized and scaled with its roundings. One warp a row; no
  // serial selection: expert e goes to slot rank(e) = the number of experts before it in that order (one pass over
  // the row's biased scores in shared memory), where rank(e) < k; slots past the experts left are none.
  for (int row = warp; row < rows; row += kLeanWarps) {
    float* row_biased = biased + row * E;
    for (int e = lane; e < E; e += 32) {
      const float e_neg = static_cast<float>(exp(static_cast<double>(-logit[row * E + e])));
      const float s = round_bf16(__fdiv_rn(1.0f, __fadd_rn(1.0f, e_neg)));
      logit[row * E + e] = s;  // the score from here on
      row_biased[e] = a.expert_bias ? __fadd_rn(s, a.expert_bias[e]) : s;
    }
    for (int slot = lane; slot < k; slot += 32) {
      chosen[row * k + slot] = -1;
      weight[row * k + slot] = 0.0f;
    }
    __syncwarp();
    for (int e = lane; e < E; e += 32) {
      const float v = row_biased[e];
      if (isnan(v)) continue;
      int rank = 0;
      for (int other = 0; other < E && rank < k; ++other) {
        const float w = row_biased[other];  // NaN compares false: never before e
        rank += w > v || (w == v && other < e);
      }
      if (rank < k) {
        chosen[row * k + rank] = e;
        weight[row * k + rank] = logit[row * E + e];
      }
    }
    __syncwarp();
    float denominator = 1.0f;
    if (a.normalize) {  // the sum in slot order by lane 0, then every slot by its lane
      float sum = 0.0f;
      if (lane == 0)
        for (int slot = 0; slot < k; ++slot) sum = __fadd_rn(sum, weight[row * k + slot]);
      denominator = round_bf16(__fadd_rn(round_bf16(__shfl_sync(0xffffffffu, sum, 0)), 1e-6f));
    }
    for (int slot = lane; slot < k; slot += 32) {
      float w = weight[row * k + slot];
      if (a.normalize) w = round_bf16(__fdiv_rn(w, denominator));
      w = round_bf16(__fmul_rn(w, a.scaling));
      weight[row * k + slot] = w;
      a.chosen[row * k + slot] = chosen[row * k + slot];
      a.weights[row * k + slot] = w;
    }
  }
  __syncthreads();  // every row's choices are in shared memory
  if (warp != 0) return;
  // The plan (plan_experts' offsets and order): counts per expert, an exclusive scan, then slot s at its expert's
  // first position + the number of earlier slots of the same expert (ascending slot index within an expert).
  int carry = 0;
  for (int base = 0; base < E; base += 32) {
    const int e = base + lane;
    int own = 0;
    if (e < E)
      for (int s = 0; s < slots; ++s) own += chosen[s] == e;
    int sum = own;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, sum, o);
      if (lane >= o) sum += v;
    }
    if (e < E) {
      a.offsets[e] = carry + sum - own;
      first[e] = carry + sum - own;
    }
    carry += __shfl_sync(0xffffffffu, sum, 31);
  }
  if (lane == 0) a.offsets[E] = carry;
  __syncwarp();
  for (int s = lane; s < slots; s += 32) {
    const int e = chosen[s];
    if (e < 0) continue;  // no expert left to pick (every score NaN): not planned
    int rank = 0;
    for (int before = 0; before < s; ++before) rank += chosen[before] == e;
    a.order[first[e] + rank] = s;
  }
}

}  // namespace

void route_lean_setup() {
  static std::once_flag once;
  std::call_once(once, [] {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
        cudaFuncSetAttribute(route_plan_lean_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) ==
            cudaSuccess &&
        cudaFuncSetAttribute(route_plan_lean_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) ==
            cudaSuccess)
      g_shared_optin = optin;
    cudaGetLastError();  // no device: the lean kernel does not fit, route_and_plan reports the launch
  });
}

bool route_lean_fits(int64_t rows, int experts, int k, int64_t hidden) {
  route_lean_setup();
  return rows >= 1 && rows <= kLeanMaxRows && experts >= 1 && experts <= kLeanMaxExperts && k >= 1 &&
         k <= experts && router_in_route_fits(hidden) && lean_shared_bytes(rows, experts, k, hidden) <= g_shared_optin;
}

bool route_norm_fits(const RoutePlan& a) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.norm_h && a.norm_delta && a.norm_weight && a.norm_out && aligned(a.norm_h) && aligned(a.norm_delta) &&
         aligned(a.norm_weight) && aligned(a.norm_out) && a.hidden % 8 == 0 &&
         route_lean_fits(a.rows, a.experts, a.k, a.hidden) &&
         lean_norm_shared_bytes(a.rows, a.experts, a.k, a.hidden) <= g_shared_optin;
}

void set_moe_route_lean(bool on) { g_route_lean = on; }

bool moe_route_lean() { return g_route_lean.load(); }

Status route_and_plan_lean(const RoutePlan& a, cudaStream_t stream) {
  if (!a.x || !route_lean_fits(a.rows, a.experts, a.k, a.hidden))
    return Status(ErrorCode::InvalidArgument,
                  "route_and_plan_lean takes x, 1.." + std::to_string(kLeanMaxRows) + " rows, 1.." +
                      std::to_string(kLeanMaxExperts) + " experts, 1 <= k <= experts and K 8..2048 within " +
                      std::to_string(g_shared_optin) + " bytes of shared memory, got rows " + std::to_string(a.rows) +
                      ", experts " + std::to_string(a.experts) + ", k " + std::to_string(a.k) + ", K " +
                      std::to_string(a.hidden));
  if (a.norm_h) {  // the norm inside
    if (!route_norm_fits(a))
      return Status(ErrorCode::InvalidArgument,
                    "route_and_plan_lean: the norm inside takes h, delta, weight and out 16-byte aligned and K a "
                    "multiple of 8 within " + std::to_string(g_shared_optin) + " bytes of shared memory, got K " +
                        std::to_string(a.hidden) + ", rows " + std::to_string(a.rows));
    const int shared = static_cast<int>(lean_norm_shared_bytes(a.rows, a.experts, a.k, a.hidden));
    LS_RETURN_IF_ERROR(
        ls::cuda::launch_programmatic(route_plan_lean_kernel<true>, dim3(1), kLeanWarps * 32, shared, stream, a));
    LS_CUDA_TRY_LAUNCH("route_plan_lean_kernel");
    return ok_status();
  }
  const int shared = static_cast<int>(lean_shared_bytes(a.rows, a.experts, a.k, a.hidden));
  LS_RETURN_IF_ERROR(
      ls::cuda::launch_programmatic(route_plan_lean_kernel<false>, dim3(1), kLeanWarps * 32, shared, stream, a));
  LS_CUDA_TRY_LAUNCH("route_plan_lean_kernel");
  return ok_status();
}

}  // namespace ls::lfm2::gpu
