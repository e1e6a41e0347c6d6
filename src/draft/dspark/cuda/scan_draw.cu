// The scan's pick variant switches (LS_DRAFT_PICK, LS_DRAFT_PICK_SPREAD; scan_pick.h) and the test hook that
// draws whole rows with a chosen variant and CTA size (draw_rows_with), apart from the scan's step kernels.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/scan_verified.cuh"
#include "draft/dspark/cuda/scan_pick.h"

namespace ls::dspark::cuda {
namespace {

template <int Threads>
__global__ void __launch_bounds__(Threads) draw_rows_kernel(const float* logits, int64_t vocab,
                                                            const DeviceScanRequest* samplings,
                                                            const int64_t* positions, int32_t* picks, int mode) {
  __shared__ PickScratch s;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const Best greedy = row_argmax(row, vocab, s);
  const DeviceScanRequest sampling = samplings[blockIdx.x];
  const int32_t pick = draft_pick<Threads>(row, vocab, sampling, positions[blockIdx.x], greedy, mode, nullptr, s);
  if (threadIdx.x == 0) picks[blockIdx.x] = pick;
}

// Batch s9A decides the default; radix stays selectable until a batch shows the verified pick's win.
constexpr DraftPickMode kDefaultPickMode = DraftPickMode::Verified;

DraftPickMode pick_mode_from_env() { return draft_pick_mode_named(std::getenv("LS_DRAFT_PICK")); }

// On since batch s9A (a flat top-p 0.9 row's split step 0.142 -> 0.060 ms with the round in an extra launch;
// now folded into the chunk launch: greedy steps pay nothing).
constexpr bool kDefaultPickSpread = true;

bool pick_spread_from_env() {
  const char* value = std::getenv("LS_DRAFT_PICK_SPREAD");
  if (value == nullptr || value[0] == '\0') return kDefaultPickSpread;
  return value[0] == '1';
}

// On since batch s11B's interleaved rounds (scan at depth 9: 1 stream top-p 0.9 0.744 -> 0.690 ms, 4 streams
// lanes_bench's mix 1.080 -> 1.025); LS_DRAFT_PICK_STAGED=0 is the one-thread combine.
constexpr bool kDefaultPickStaged = true;

bool pick_staged_from_env() {
  const char* value = std::getenv("LS_DRAFT_PICK_STAGED");
  if (value == nullptr || value[0] == '\0') return kDefaultPickStaged;
  return value[0] == '1';
}

std::atomic<int> pick_mode{static_cast<int>(pick_mode_from_env())};
std::atomic<bool> pick_spread{pick_spread_from_env()};
std::atomic<bool> pick_staged{pick_staged_from_env()};
std::atomic<bool> pick_staged_planted{false};

}  // namespace

DraftPickMode draft_pick_mode() { return static_cast<DraftPickMode>(pick_mode.load(std::memory_order_relaxed)); }
void set_draft_pick_mode(DraftPickMode mode) { pick_mode.store(static_cast<int>(mode)); }

bool draft_pick_spread() { return pick_spread.load(std::memory_order_relaxed); }
void set_draft_pick_spread(bool on) { pick_spread.store(on); }

bool draft_pick_staged() { return pick_staged.load(std::memory_order_relaxed); }
void set_draft_pick_staged(bool on, bool planted_skip_last) {
  pick_staged.store(on);
  pick_staged_planted.store(on && planted_skip_last);
}
bool draft_pick_staged_planted() { return pick_staged_planted.load(std::memory_order_relaxed); }

DraftPickMode draft_pick_mode_named(const char* value) {
  if (value == nullptr) return kDefaultPickMode;
  for (const DraftPickMode mode : {DraftPickMode::Radix, DraftPickMode::Verified}) {
    if (std::strcmp(value, draft_pick_name(mode)) == 0) return mode;
  }
  return kDefaultPickMode;
}

const char* draft_pick_name(DraftPickMode mode) {
  switch (mode) {
    case DraftPickMode::Radix: return "radix";
    case DraftPickMode::Verified: return "verified";
    case DraftPickMode::VerifiedBandPlantedZero: return "verified-band-planted-zero";
    case DraftPickMode::VerifiedFallbackForced: return "verified-fallback-forced";
  }
  return "?";
}

Status draw_rows_on_device(const float* logits, int rows, int64_t vocab, const DeviceScanRequest* samplings,
                           const int64_t* positions, int32_t* picks, cudaStream_t stream) {
  return draw_rows_with(logits, rows, vocab, samplings, positions, picks, draft_pick_mode(), kPickThreads, stream);
}

Status draw_rows_with(const float* logits, int rows, int64_t vocab, const DeviceScanRequest* samplings,
                      const int64_t* positions, int32_t* picks, DraftPickMode mode, int threads,
                      cudaStream_t stream) {
  if (rows == 0) return ok_status();
  if (threads != kPickThreads && threads != kStepThreads) {
    return Status(ErrorCode::InvalidArgument, "draw_rows_with: CTAs of " + std::to_string(threads) +
                                                  " threads (the scan's are " + std::to_string(kStepThreads) +
                                                  " and " + std::to_string(kPickThreads) + ")");
  }
  const int m = static_cast<int>(mode);
  if (threads == kPickThreads) {
    draw_rows_kernel<kPickThreads><<<rows, kPickThreads, 0, stream>>>(logits, vocab, samplings, positions, picks, m);
  } else {
    draw_rows_kernel<kStepThreads><<<rows, kStepThreads, 0, stream>>>(logits, vocab, samplings, positions, picks, m);
  }
  LS_CUDA_TRY_LAUNCH("draw_rows_with");
  return ok_status();
}

}  // namespace ls::dspark::cuda
