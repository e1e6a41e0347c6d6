// Synthetic acceptance: the inner drafter's pass, then recorded tokens right at the profile's rates (a draw a window).
#include "draft/synthetic/synthetic_acceptance_drafter.h"

#include <algorithm>
#include <utility>

#include "base/check.h"
#include "base/hash.h"

namespace ls {

namespace {

// The counter of draft k (1-based) of a request anchored at `anchor_position` of `stream`.
uint64_t draft_key(uint64_t seed, StreamId stream, int64_t anchor_position, int k) {
  uint64_t key = splitmix64(seed ^ 0x5eed5eed5eed5eedull);
  key = splitmix64(key ^ static_cast<uint64_t>(stream));
  key = splitmix64(key ^ static_cast<uint64_t>(anchor_position));
  return splitmix64(key ^ static_cast<uint64_t>(k));
}

// 2^64 / golden ratio: the Weyl step whose fractional sequence frac(u_0 + n / phi) spreads most evenly over (0, 1).
constexpr uint64_t kGoldenStep = 0x9e3779b97f4a7c15ull;
// Windows are taken in blocks of this many golden points in a keyed random order: in sequence order consecutive
// points are 0.618 apart, so a long window would mostly follow a short one (lag-1 correlation -0.47; shuffled in 8s
// -0.11), and pricing that learns from the last windows would see a pattern no drafter has.
constexpr int kBlockWindows = 8;

// The key of stream `stream`'s window sequence: its start u_0 as 64 fixed-point bits of a fraction, and its blocks'
// orders.
uint64_t window_key(uint64_t seed, StreamId stream) {
  return splitmix64(splitmix64(seed ^ 0x3a1d0c5e11f0ull) ^ static_cast<uint64_t>(stream));
}

// The golden index window `window` takes: its block's kBlockWindows indices, shuffled (Fisher-Yates) by the key.
uint64_t golden_index(uint64_t key, int64_t window) {
  const uint64_t block = static_cast<uint64_t>(window / kBlockWindows);
  int order[kBlockWindows];
  for (int slot = 0; slot < kBlockWindows; ++slot) order[slot] = slot;
  uint64_t bits = splitmix64(key ^ splitmix64(block));
  for (int slot = kBlockWindows - 1; slot > 0; --slot) {
    bits = splitmix64(bits);
    std::swap(order[slot], order[bits % static_cast<uint64_t>(slot + 1)]);
  }
  return block * kBlockWindows + static_cast<uint64_t>(order[window % kBlockWindows]);
}

}  // namespace

double SyntheticAcceptanceDrafter::window_uniform(const DraftRequest& request) {
  WindowCursor& cursor = cursors_[request.stream];
  if (cursor.window < 0 || cursor.anchor_position != request.anchor_position) {
    ++cursor.window;
    cursor.anchor_position = request.anchor_position;
  }
  // Mod 2^64 in fixed point: exact for any window count.
  const uint64_t key = window_key(options_.seed, request.stream);
  return uniform_open01(key + golden_index(key, cursor.window) * kGoldenStep);
}

SyntheticAcceptanceDrafter::SyntheticAcceptanceDrafter(Drafter& inner, SyntheticAcceptanceOptions options)
    : inner_(inner), options_(std::move(options)), facts_(inner.facts()) {
  LS_CHECK(options_.vocab_size >= 2, "synthetic acceptance needs a vocabulary of at least 2 ids for wrong drafts");
  facts_.has_confidence = true;
}

void SyntheticAcceptanceDrafter::expect(StreamId stream, std::vector<int32_t> sequence) {
  sequences_[stream] = std::move(sequence);
  cursors_.erase(stream);
}

Status SyntheticAcceptanceDrafter::absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) {
  return inner_.absorb(stream, start, rows, taps);
}

std::vector<Draft> SyntheticAcceptanceDrafter::draft(std::span<const DraftRequest> requests) {
  std::vector<Draft> drafts = inner_.draft(requests);
  const std::vector<double>& conditional = options_.profile.conditional;
  for (size_t index = 0; index < drafts.size() && index < requests.size(); ++index) {
    const DraftRequest& request = requests[index];
    Draft& draft = drafts[index];
    if (!draft.status.ok() || conditional.empty()) continue;  // a real fault stays a fault
    const auto found = sequences_.find(request.stream);
    const std::vector<int32_t>* sequence = found == sequences_.end() ? nullptr : &found->second;
    const int64_t length = sequence ? static_cast<int64_t>(sequence->size()) : 0;
    if (sequence && request.anchor_position < length && (*sequence)[request.anchor_position] != request.anchor_token) {
      ++record_mismatches_;
      sequence = nullptr;
    }
    draft.tokens.resize(request.depth, 0);
    draft.chances.resize(request.depth);
    const double u = window_uniform(request);
    double chain = 1.0;
    for (int k = 1; k <= request.depth; ++k) {
      const size_t depth_index = static_cast<size_t>(k - 1);
      const double q = conditional[std::min(depth_index, conditional.size() - 1)];
      chain *= q;
      draft.chances[depth_index] = static_cast<float>(chain);
      const int64_t position = request.anchor_position + k;
      if (!sequence) continue;
      if (position >= length) {
        ++unrecorded_positions_;
        continue;
      }
      const int32_t truth = (*sequence)[position];
      const uint64_t key = draft_key(options_.seed, request.stream, request.anchor_position, k);
      if (u < chain) {
        draft.tokens[depth_index] = truth;
      } else {
        const uint64_t offset = 1 + splitmix64(key ^ 0xbadbadbadull) % static_cast<uint64_t>(options_.vocab_size - 1);
        draft.tokens[depth_index] = static_cast<int32_t>((truth + offset) % static_cast<uint64_t>(options_.vocab_size));
      }
    }
  }
  return drafts;
}

void SyntheticAcceptanceDrafter::release(StreamId stream) {
  cursors_.erase(stream);
  inner_.release(stream);
}

Status SyntheticAcceptanceDrafter::absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) {
  return inner_.absorb_device(rows, taps);
}

Status SyntheticAcceptanceDrafter::restart(StreamId stream, int64_t position) {
  return inner_.restart(stream, position);
}

}  // namespace ls
