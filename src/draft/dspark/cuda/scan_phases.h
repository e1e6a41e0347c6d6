// The persistent scan's phase clocks (drafter_bench --scan-phases, session 13): thread 0 of every CTA adds the SM
// cycles of each phase of each slot (after the CTA barrier that ends it, so a CTA's time), summed over CTAs and
// slots, with the largest CTA total per phase. Off unless asked; measuring only, the picks are the same.
#pragma once

#include <cstdint>

namespace ls::dspark::cuda {

// prologue (W2 on chip, slot 0's U), then per slot: gather (e = W1[previous], U ready), dot (W2 e + U, the CTA's
// best), handoff (the words or the counter, the combine), update (the pick kept); then CTA 0's tail from
// kFirstTailPhase on (session 13's split of it): its confidence, the barrier after the confidences, the records.
inline constexpr int kScanPhases = 8;
inline constexpr int kFirstTailPhase = 5;
inline constexpr const char* kScanPhaseNames[kScanPhases] = {
    "prologue", "gather", "dot", "handoff", "update", "confidence", "tail barrier", "records"};

struct ScanPhaseClocks {
  uint64_t sums[kScanPhases] = {};     // cycles over every CTA (the tail's phases: CTA 0) and slot
  uint64_t largest[kScanPhases] = {};  // the largest one CTA's total in one launch
  uint64_t ctas = 0;                   // CTA runs counted (grid x launches)
  uint64_t slots = 0;                  // slots run, summed over launches
  uint64_t launches = 0;
};

// Turns the clocks on or off (the next launches read it) and zeroes them.
void set_scan_phase_clocks(bool on);
// The clocks since the last call (or since set_scan_phase_clocks), zeroed again. Waits for the device.
ScanPhaseClocks take_scan_phase_clocks();

}  // namespace ls::dspark::cuda
