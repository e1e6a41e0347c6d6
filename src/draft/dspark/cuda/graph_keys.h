// The CUDA drafter's graph keys and request buckets: the second parts of its graph cache's keys, the key bounds that
// choose an attention kernel by context, and the count buckets a pass is padded to.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

// Second parts of graph keys that are not a depth (the block pass is 0, a scan its depth).
inline constexpr int kPersistentScanKey = -1;
inline constexpr int kAbsorbGraphKey = -2;
// The block pass of fewer than kHeadAttentionRequests requests whose longest holds more than short_context_keys()
// keys (its own graph: the attention kernel differs by context there, and a graph cannot choose).
inline constexpr int kLongContextBlockKey = -3;
// The keyed persistent scan (set_keyed_scan) of sampled requests without cuts.
inline constexpr int kKeyedScanKey = -4;
// Whether a sampled request's draw is the plain Gumbel max of its logits: a temperature, no top-k, top-p or min-p.
inline bool plain_gumbel_draw(const DeviceScanRequest& scan, int64_t vocab) {
  return scan.temperature > 0.0f && (scan.top_k <= 0 || scan.top_k >= vocab) && scan.top_p >= 1.0f &&
         scan.min_p <= 0.0f;
}
// Keys (context + block) per request up to which the head attention beats the split from 2 to 15 requests: ~320 a
// request (batch s9B, graphed block pass at 4 streams: 0.501 vs 0.600 ms at context 512, 1.081 vs 1.000 at 2000).
// Not at one request: batch s10A's lanes-like rounds (context 128..350) had the head pass 0.4306 ms against the
// split's 0.4261 there (4 streams: 0.4346 against 0.4685 with 256-key stages and session 10's folded q/k heads).
inline constexpr int64_t kHeadKeysPerRequest = 320;
inline int64_t short_context_keys(int count) { return count >= 2 ? kHeadKeysPerRequest * count : 0; }
// Keys (context + block) per request up to which the row attention (set_row_attention) takes a pass: batch s12A's
// 1-stream rounds had it 64 us a pass ahead at contexts 128..300 but 15 us at 512..680 (each row CTA reads its head's
// whole K / V from L2), so it stops short of where the two would meet; longer passes keep the split (own graph).
inline constexpr int64_t kRowKeysPerRequest = 640;
// The graph key part of a block pass and scan in one graph (set_one_graph): block key 0 or kLongContextBlockKey,
// scan key kPersistentScanKey, kKeyedScanKey or a depth (<= kMaxDeviceBlock), each pair its own key below -1000.
inline int one_graph_key(int block_key, int scan_key) {
  return -1000 - 100 * (block_key == 0 ? 0 : 1) - (scan_key + 10);
}
// Graph shapes kept at most.
inline constexpr size_t kMaxGraphShapes = 1024;

// Request (and absorb row) count buckets: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers of two and 1.5 times them). A
// pass of `count` requests runs as the smallest bucket >= count, the rest padding requests (depth 0, own caches), so
// a few graphs per depth serve every count and are captured once, outside timed rounds.
inline int request_bucket(int count) {
  int bucket = 1;
  while (bucket < count) {
    const int power = static_cast<int>(std::bit_floor(static_cast<unsigned>(bucket)));
    bucket = bucket == power && bucket >= 2 ? power + power / 2 : 2 * power;
  }
  return bucket;
}

}  // namespace ls::dspark::cuda
