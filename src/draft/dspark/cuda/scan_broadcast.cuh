// The persistent scan's broadcast dot (session 14, set_scan_broadcast): a thread per vocabulary row instead of 8
// lanes a row, so every e read is one address for the whole warp (a broadcast) where the 8-lane layout read each
// e piece in different quarter-warp phases (~640 shared-memory wavefronts a warp a slot; this: ~140). The bits stay
// the fused step's: the 8-lane layout's lane p adds chunks p, p + 8, p + 16, .. (16 bytes = 8 terms each, in order)
// and the lanes meet in an xor tree; here accumulator p adds the same chunks in the same order, and the 8 are added
// in the tree's order. W2's held chunks lie in shared memory [chunk][thread], each 8-thread group's slots
// xor-swizzled by the chunk, so a quarter warp's 16-byte reads (and the staging's 8-chunk writes of a row) hit 8
// different bank groups. Included by scan_persistent.cu only; internal linkage.
#pragma once

#include <cstdint>

#include "draft/dspark/cuda/scan_finish.cuh"
#include "draft/dspark/cuda/scan_handoff.cuh"

namespace ls::dspark::cuda {
namespace {

constexpr int kBroadcastChunks = kMaxFusedScanRank / 8;  // 16-byte chunks of a W2 row

// Where held chunk h of the CTA's local row t lies, in 16-byte units.
template <int Threads>
__device__ __forceinline__ int broadcast_slot(int h, int t) {
  return h * Threads + (t ^ (h & 7));
}

// W2 onto the chip for the broadcast dot: local row t (t < ids <= Threads) is thread t's; its first Rounds x Pieces
// chunks go to that thread's registers, the next `held` chunks (of every row) to shared memory by asynchronous
// copies (a row's chunks contiguous in the loads), the rest stay in L2.
template <int Threads, int Rounds, int Pieces>
__device__ __forceinline__ void stage_broadcast_rows(const bf16_t* w2, int64_t first_id, int ids, int64_t vocab,
                                                     int rank, int held, bf16_t* held_rows,
                                                     uint4 (&registers)[Rounds][Pieces]) {
  constexpr int kRegisterChunks = Rounds * Pieces;
  const int chunks = rank / 8;
  for (int i = threadIdx.x; i < held * ids; i += Threads) {
    const int t = i / held, h = i % held;
    const int64_t id = first_id + t;
    if (id < vocab && kRegisterChunks + h < chunks) {
      copy_async_16(held_rows + static_cast<int64_t>(broadcast_slot<Threads>(h, t)) * 8,
                    w2 + id * rank + (kRegisterChunks + h) * 8);
    }
  }
  const int64_t id = first_id + threadIdx.x;
  const bool mine = static_cast<int>(threadIdx.x) < ids && id < vocab;
#pragma unroll
  for (int ch = 0; ch < kRegisterChunks; ++ch) {
    registers[ch / Pieces][ch % Pieces] =
        mine && ch < chunks ? __ldg(reinterpret_cast<const uint4*>(w2 + id * rank + ch * 8)) : make_uint4(0, 0, 0, 0);
  }
}

// sums[r] = W2 row . e_r for this thread's row (`row`: its W2 row in memory; `mine` false past the CTA's ids or the
// vocabulary), the fused step's order (above). `e_shared` [group][rank] fp32. `planted` (tests only): the held
// chunks read unswizzled (other rows' chunks).
template <int G, int Threads, int Rounds, int Pieces>
__device__ __forceinline__ void broadcast_row_sums(const uint4 (&registers)[Rounds][Pieces], const bf16_t* held_rows,
                                                   int held, const bf16_t* row, bool mine, const float* e_shared,
                                                   int rank, int group, bool planted, float (&sums)[G]) {
  constexpr int kRegisterChunks = Rounds * Pieces;
  const int chunks = rank / 8;
  float parts[G][8];
#pragma unroll
  for (int r = 0; r < G; ++r) {
#pragma unroll
    for (int p = 0; p < 8; ++p) parts[r][p] = 0.0f;
  }
#pragma unroll
  for (int ch = 0; ch < kBroadcastChunks; ++ch) {
    if (ch >= chunks) break;
    uint4 piece;
    if (ch < kRegisterChunks) {
      piece = registers[ch / Pieces][ch % Pieces];
    } else if (!mine) {
      piece = make_uint4(0, 0, 0, 0);
    } else if (ch - kRegisterChunks < held) {
      const int h = ch - kRegisterChunks;
      const int slot = planted ? h * Threads + threadIdx.x : broadcast_slot<Threads>(h, threadIdx.x);
      piece = *reinterpret_cast<const uint4*>(held_rows + static_cast<int64_t>(slot) * 8);
    } else {
      piece = load_w2(row + ch * 8, true);
    }
    float weights[8];
    widen_bf16x8(piece, weights);
#pragma unroll
    for (int r = 0; r < G; ++r) {
      if (r < group) parts[r][ch & 7] = add_eight_terms(weights, e_shared + r * rank + ch * 8, parts[r][ch & 7]);
    }
  }
  // The xor tree's order (offsets 4, 2, 1 as seen by lane 0): ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)).
#pragma unroll
  for (int r = 0; r < G; ++r) {
    const float* p = parts[r];
    sums[r] = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
  }
}

}  // namespace
}  // namespace ls::dspark::cuda
