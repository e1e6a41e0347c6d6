// The persistent Markov scan's plan (grid, ids a CTA, W2 held on chip, the broadcast dot's chunks) and its launch
// (one cooperative launch per group of requests); the kernel: scan_persistent.cu.
#include <algorithm>
#include <cstdint>
#include <string>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/features.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/scan_persistent.h"

namespace ls::dspark::cuda {
namespace {

constexpr int kThreads = kPersistentThreads;
constexpr int kRowsPerRound = kPersistentRowsPerRound;

// Sets the kernels' dynamic shared memory to `bytes`; true when kernels [0, needed) are resident at `grid`, and
// `all` when every one is.
bool resident_at(PersistentKernel (&kernels)[4], size_t bytes, int grid, int sms, int needed, bool* all) {
  *all = true;
  for (int k = 0; k < 4; ++k) {
    int resident = 0;
    const void* entry = reinterpret_cast<const void*>(kernels[k]);  // (a host compiler has no typed overloads)
    if (cudaFuncSetAttribute(entry, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, entry, kThreads, bytes) != cudaSuccess ||
        static_cast<int64_t>(resident) * sms < grid) {
      cudaGetLastError();
      if (k < needed) return false;
      *all = false;
    }
  }
  return true;
}

// Static shared bytes of the largest of the kernels (false when one cannot be read).
bool static_shared(PersistentKernel (&kernels)[4], size_t* bytes) {
  *bytes = 0;
  for (PersistentKernel kernel : kernels) {
    cudaFuncAttributes attributes = {};
    if (cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel)) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    *bytes = std::max(*bytes, attributes.sharedSizeBytes);
  }
  return true;
}

}  // namespace

PersistentScanPlan persistent_scan_plan(const ScanShape& shape, int count) {
  PersistentScanPlan plan;
  if (!fused_scan_supported(shape) || count < 1 || count > kPersistentScanGroup || shape.vocab <= 0 ||
      shape.vocab >= (int64_t{1} << 30)) {
    return plan;  // (the flagged handoff's words carry id + 1 in 30 bits)
  }
  int device = 0, sms = 0, cooperative = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device) != cudaSuccess || !cooperative ||
      sms <= 0) {
    cudaGetLastError();
    return plan;
  }
  const bool single = count == 1;
  const int group = single ? 1 : kPersistentScanGroup;
  const int register_rounds = single ? kSingleRegisterRounds : kGroupRegisterRounds;
  // Two CTAs per SM; each CTA's ids a whole number of 32-row rounds.
  const int64_t wanted = 2 * static_cast<int64_t>(sms);
  const int64_t per_cta = (shape.vocab + wanted - 1) / wanted;
  const int ids = static_cast<int>((per_cta + kRowsPerRound - 1) / kRowsPerRound * kRowsPerRound);
  const int grid = static_cast<int>((shape.vocab + ids - 1) / ids);
  // Every handoff greedy, then keyed (planned alike; plan.keyed when the keyed ones too are resident at once).
  constexpr int kKernels = 4;
  constexpr PersistentHandoff kHandoffs[2] = {PersistentHandoff::Counter, PersistentHandoff::Flags};
  PersistentKernel kernels[kKernels] = {};
  for (int k = 0; k < kKernels; ++k) kernels[k] = persistent_kernel(single, kHandoffs[k % 2], k >= 2);
  size_t static_bytes = 0;
  if (!static_shared(kernels, &static_bytes)) return plan;
  // Shared memory of two CTAs per SM: U staging and e first, then as many held W2 rounds as fit (every handoff).
  const size_t per_sm = static_cast<size_t>(ls::cuda::cuda_features().shared_optin) + 1024;
  const size_t budget = per_sm / 2 - 1024 - static_bytes;
  const size_t staging =
      sizeof(float) * (2 * static_cast<size_t>(group) * ids + static_cast<size_t>(group) * shape.rank);
  const size_t round_bytes = static_cast<size_t>(kRowsPerRound) * shape.rank * 2;
  const int rounds = ids / kRowsPerRound;
  int held = 0;
  if (budget > staging) held = static_cast<int>(std::min<size_t>((budget - staging) / round_bytes, rounds));
  held = std::max(0, std::min(held, rounds - register_rounds));
  const size_t bytes = staging + held * round_bytes;
  bool keyed = true;  // false: the greedy scan stands without its keyed instances
  if (!resident_at(kernels, bytes, grid, sms, 2, &keyed)) return plan;
  plan.keyed = keyed;
  // The broadcast dot (one request, a thread per row): the chunks past the registers' held in shared memory as far
  // as they fit; planned when its greedy kernels are resident (and its keyed ones where the others' are).
  PersistentKernel broadcast[kKernels] = {};
  if (single && ids <= kThreads) {
    for (int k = 0; k < kKernels; ++k) broadcast[k] = persistent_kernel(true, kHandoffs[k % 2], k >= 2, true);
    size_t broadcast_static = 0;
    if (static_shared(broadcast, &broadcast_static)) {
      const size_t broadcast_budget = per_sm / 2 - 1024 - broadcast_static;
      const size_t chunk_bytes = static_cast<size_t>(kThreads) * 16;
      const int past_registers = std::max(0, shape.rank / 8 - kSingleRegisterRounds * kPersistentPieces);
      int chunks = 0;
      if (broadcast_budget > staging) {
        chunks = static_cast<int>(std::min<size_t>((broadcast_budget - staging) / chunk_bytes, past_registers));
      }
      const size_t broadcast_bytes = staging + chunks * chunk_bytes;
      bool all = false;
      if (resident_at(broadcast, broadcast_bytes, grid, sms, keyed ? kKernels : 2, &all)) {
        plan.broadcast = true;
        plan.held_chunks = chunks;
        plan.broadcast_bytes = broadcast_bytes;
      }
    }
  }
  // Confidence helpers (one request): as many CTAs past the grid (up to 4) as stay resident with every kernel.
  const int needed = keyed ? kKernels : 2;
  for (int helpers = single ? kMaxConfidenceHelpers : 0; helpers > 0 && plan.helpers == 0; --helpers) {
    bool all = false;
    if (resident_at(kernels, bytes, grid + helpers, sms, needed, &all) &&
        (!plan.broadcast || resident_at(broadcast, plan.broadcast_bytes, grid + helpers, sms, needed, &all))) {
      plan.helpers = helpers;
    }
  }
  plan.grid = grid;
  plan.ids_per_cta = ids;
  plan.held_rounds = held;
  plan.group = group;
  plan.shared_bytes = bytes;
  return plan;
}

Status markov_scan_persistent(const ScanStepInputs& inputs, ScanShape shape, const PersistentScanPlan& plan,
                              PersistentHandoff handoff, unsigned int* barrier, cudaStream_t stream, int* launched,
                              PersistentScanChoice choice) {
  const bool keyed = choice.keyed;
  *launched = 0;
  if (inputs.count == 0) return ok_status();
  if (plan.grid == 0 || (plan.group == 1 && inputs.count > 1) || (keyed && !plan.keyed)) {
    return Status(ErrorCode::UnsupportedDraftShape,
                  "the persistent Markov scan has no plan for " + std::to_string(inputs.count) + " requests here");
  }
  // The broadcast dot where planned (one request; else the 8-lane rows, the same bits).
  const bool broadcasting = choice.broadcast && plan.broadcast && plan.group == 1;
  // The confidence helpers where planned (one request, the flagged words, a confidence head).
  const int helpers = choice.helpers && plan.group == 1 && handoff == PersistentHandoff::Flags && shape.has_confidence
                          ? plan.helpers
                          : 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(plan.grid + helpers);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = broadcasting ? plan.broadcast_bytes : plan.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  // One launch per group of plan.group requests, one after the other (the partials and the barrier are reused).
  for (int first = 0; first < inputs.count; first += plan.group) {
    ScanStepInputs group = inputs;
    group.count = std::min(plan.group, inputs.count - first);
    group.requests += first;
    group.records += first;
    group.base_logits += static_cast<int64_t>(first) * shape.gamma * shape.vocab;
    group.final_hidden += static_cast<int64_t>(first) * shape.gamma * shape.hidden;
    group.markov += static_cast<int64_t>(first) * shape.vocab;
    group.confidence_helpers = helpers;
    const bool single = plan.group == 1;
    if (handoff != PersistentHandoff::Counter) {
      LS_CUDA_TRY(cudaMemsetAsync(group.partials, 0, persistent_flag_words(shape, plan) * sizeof(uint64_t), stream));
    } else {
      LS_CUDA_TRY(cudaMemsetAsync(barrier, 0, 2 * sizeof(unsigned int), stream));
    }
    const PersistentKernel kernel = persistent_kernel(single, handoff, keyed, broadcasting);
    const int held = broadcasting ? plan.held_chunks : plan.held_rounds;
    LS_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, group, shape, plan.ids_per_cta, held, barrier));
    ++*launched;
  }
  return ok_status();
}

}  // namespace ls::dspark::cuda
