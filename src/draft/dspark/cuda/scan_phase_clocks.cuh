// The persistent scan's phase clocks on the device (scan_phases.h): the counters and their host functions. Included
// by scan_persistent.cu only (the kernel and the counters must share one translation unit).
#pragma once

#include <cstdint>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/scan_phases.h"

namespace ls::dspark::cuda {
namespace {

__device__ int g_phase_clocks_on;
__device__ unsigned long long g_phase_clocks[2 * kScanPhases + 3];  // sums, largest, CTAs, slots, launches

// Thread 0's clock: mark(p) adds the cycles since the last mark to phase p (in shared memory, so the kernel keeps
// its registers); slots_done() and tail() add the CTA's totals to the counters.
struct PhaseClocks {
  unsigned long long* sums;  // [kScanPhases] in shared memory
  bool on = false;
  long long last = 0;
  __device__ void start() {
    on = threadIdx.x == 0 && *static_cast<volatile int*>(&g_phase_clocks_on) != 0;
    if (!on) return;
    for (int p = 0; p < kScanPhases; ++p) sums[p] = 0;
    last = clock64();
  }
  __device__ void mark(int phase) {
    if (!on) return;
    const long long now = clock64();
    sums[phase] += static_cast<unsigned long long>(now - last);
    last = now;
  }
  __device__ void flush(int first, int end) {
    for (int p = first; p < end; ++p) {
      atomicAdd(&g_phase_clocks[p], sums[p]);
      atomicMax(&g_phase_clocks[kScanPhases + p], sums[p]);
    }
  }
  __device__ void slots_done(int slots) {
    if (!on) return;
    flush(0, kFirstTailPhase);
    atomicAdd(&g_phase_clocks[2 * kScanPhases], 1ull);
    if (blockIdx.x != 0) return;
    atomicAdd(&g_phase_clocks[2 * kScanPhases + 1], static_cast<unsigned long long>(slots));
    atomicAdd(&g_phase_clocks[2 * kScanPhases + 2], 1ull);
  }
  __device__ void tail() {
    if (!on) return;
    mark(kScanPhases - 1);
    flush(kFirstTailPhase, kScanPhases);
  }
};

}  // namespace

void set_scan_phase_clocks(bool on) {
  const int flag = on ? 1 : 0;
  const unsigned long long zeros[2 * kScanPhases + 3] = {};
  cudaMemcpyToSymbol(g_phase_clocks, zeros, sizeof zeros);
  cudaMemcpyToSymbol(g_phase_clocks_on, &flag, sizeof flag);
}

ScanPhaseClocks take_scan_phase_clocks() {
  unsigned long long raw[2 * kScanPhases + 3] = {};
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(raw, g_phase_clocks, sizeof raw);
  const unsigned long long zeros[2 * kScanPhases + 3] = {};
  cudaMemcpyToSymbol(g_phase_clocks, zeros, sizeof zeros);
  ScanPhaseClocks clocks;
  for (int p = 0; p < kScanPhases; ++p) {
    clocks.sums[p] = raw[p];
    clocks.largest[p] = raw[kScanPhases + p];
  }
  clocks.ctas = raw[2 * kScanPhases];
  clocks.slots = raw[2 * kScanPhases + 1];
  clocks.launches = raw[2 * kScanPhases + 2];
  return clocks;
}

}  // namespace ls::dspark::cuda
