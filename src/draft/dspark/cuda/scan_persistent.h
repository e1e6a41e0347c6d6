// The persistent Markov scan's kernel shape and instances, shared by the kernel (scan_persistent.cu) and its plan
// and launch (scan_persistent_plan.cpp). Internal to the CUDA drafter.
#pragma once

#include <cuda_runtime.h>

#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

inline constexpr int kPersistentThreads = 256;  // 8 warps; 8 lanes per W2 row, 4 rows per warp instruction
inline constexpr int kPersistentRowsPerRound = 32;
inline constexpr int kPersistentPieces = kMaxFusedScanRank / 64;  // 16-byte pieces of a W2 row per lane
// The kernel for a group size: 1 request (3 register rounds; session 13's 2 rounds, without spills, lost in batch
// s13B: the dot's cost is not the spills) or up to kPersistentScanGroup (2).
inline constexpr int kSingleRegisterRounds = 3;
inline constexpr int kGroupRegisterRounds = 2;
inline constexpr int kMaxConfidenceHelpers = 4;  // a helper computes every 4th slot's confidence (2-3 at depth 9)

using PersistentKernel = void (*)(ScanStepInputs, ScanShape, int, int, unsigned int*);

// The kernel instance: one request or a group, its handoff, keyed or greedy only, and (one request only: a group's
// 8 x 8 accumulators would not fit) the broadcast dot.
PersistentKernel persistent_kernel(bool single, PersistentHandoff handoff, bool keyed, bool broadcast = false);

}  // namespace ls::dspark::cuda
