// The CUDA drafter's device state as plain structs: its weights, each stream's context K / V, and the scratch of
// a block pass, a scan and absorb_device() (cuda_drafter.h holds the drafter that owns them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "draft/dspark/cuda/device_memory.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

// A dense bf16 matrix [rows, cols] (out x in) on the device.
struct DeviceWeightMatrix {
  TrackedBuffer<bf16_t> values;
  int64_t rows = 0;
  int64_t cols = 0;
};

struct DeviceLayerWeights {
  TrackedBuffer<float> input_norm, q_norm, k_norm, post_norm;  // [d], [hd], [hd], [d]
  // qkv_proj [q + 2 kv, d]: q_proj, k_proj, v_proj stacked (one GEMM); k_proj and v_proj alone too, for absorb.
  // gate_up_proj [2 ff, d]: gate_proj then up_proj stacked.
  DeviceWeightMatrix qkv_proj, k_proj, v_proj, o_proj, gate_up_proj, down_proj;
};

struct DeviceDraftWeights {
  DeviceWeightMatrix fc;                   // [d, taps * d]
  TrackedBuffer<float> hidden_norm;        // [d]
  std::vector<DeviceLayerWeights> layers;  // [num_layers]
  TrackedBuffer<float> final_norm;         // [d]
  // absorb_device()'s fused projections: every layer's k_proj then v_proj stacked [layers * 2 kv, d] (one GEMM) and
  // every layer's k_norm [layers, hd].
  DeviceWeightMatrix context_kv_proj;
  TrackedBuffer<float> context_k_norms;
  TrackedBuffer<bf16_t> markov_w1;         // [V, r]
  DeviceWeightMatrix markov_w2;            // [V, r]
  TrackedBuffer<float> confidence_weight;  // [d + r] or empty
  TrackedBuffer<float> confidence_temperatures;  // [block_size] or empty
  TrackedBuffer<float> inv_freq;           // [hd / 2] the draft's RoPE table (fp32)
  float confidence_bias = 0;
};

// One stream's context: K/V [layers, capacity, kv_size] bf16; rows [length, length + block) are block scratch.
struct DeviceStreamContext {
  int64_t length = 0;       // positions covered (held or skipped by a restart)
  int64_t skipped = 0;      // positions restarts skipped: position p >= resumed_at sits at row p - skipped
  int64_t resumed_at = 0;   // the last restart's position: absorbs may not rewrite rows before it
  int64_t rows() const { return length - skipped; }
  int64_t capacity = 0;
  TrackedBuffer<bf16_t> keys;
  TrackedBuffer<bf16_t> values;
};

// Activations of one block pass (rows = requests x block_size) and of the scan (requests); sized at load for
// max_streams and grown on demand.
struct DeviceBlockScratch {
  int64_t requests = 0;
  TrackedBuffer<bf16_t> hidden, normed, queries, keys, values, attended, projected, gate, up, final_hidden;
  TrackedBuffer<float> base_logits;  // [rows, V] fp32 U
  // The pass's inputs in one allocation, uploaded by one copy from the same layout in pinned host memory:
  // tokens, positions [rows], block_requests, scan_requests [requests], the absorb inside the pass (session 19:
  // AbsorbGather, positions [kAbsorbPassRows], row pointers [2, layers, kAbsorbPassRows]; read only by a pass that
  // absorbs), records [requests] (records last: copied back).
  enum Part { kTokens, kPositions, kBlockRequests, kScanRequests, kAbsorbPass, kRecords, kParts };
  TrackedBuffer<uint8_t> inputs;
  size_t offsets[kParts] = {};  // byte offsets of the parts in `inputs` (and the host staging)
  DeviceSpan<int32_t> tokens, positions;
  DeviceSpan<DeviceBlockRequest> block_requests;
  DeviceSpan<DeviceScanRequest> scan_requests;
  DeviceSpan<DeviceScanRecord> records;
  TrackedBuffer<bf16_t> markov_embeddings;           // [requests, r]
  TrackedBuffer<float> markov_logits;                // [requests, V]
  TrackedBuffer<ScanPartial> scan_partials;          // [requests, fused_scan_chunks(V)] the fused scan's chunk picks
  TrackedBuffer<unsigned int> scan_tickets;          // [fused_scan_groups(requests)] zero between steps
  TrackedBuffer<ScanPartial> persistent_partials;   // [gamma + 1, group, grid] + 1 the persistent scan's CTA picks
  TrackedBuffer<unsigned int> scan_barrier;          // [2] the persistent scan's barrier and timed-out flag
  TrackedBuffer<float> attention_stats, attention_partials;  // the split attention's (split_attention_*_floats)
  TrackedBuffer<unsigned int> attention_barriers;  // [requests * kv_heads + 1] the one-launch split's, zero at first
  // Padding requests' own caches (a request count rounded up to its bucket): [requests, layers, block, kv] each, so
  // a padding request's block K/V land in rows no real stream reads.
  TrackedBuffer<bf16_t> pad_keys, pad_values;
};

// Buffers of absorb(): up to kAbsorbChunkRows tap rows at a time.
struct DeviceAbsorbScratch {
  TrackedBuffer<float> taps;      // [chunk, taps * d] fp32 as handed over
  TrackedBuffer<bf16_t> features;  // [chunk, taps * d] in the model dtype
  TrackedBuffer<bf16_t> fused;     // [chunk, d] fc output
  TrackedBuffer<bf16_t> normed;    // [chunk, d] hidden_norm output
  // absorb_device(): K and V of a chunk of rows of many streams before they are copied to each stream's context,
  // and the rows' positions (allocated on first use).
  TrackedBuffer<bf16_t> keys, values;  // [chunk, kv_size]
  TrackedBuffer<int32_t> positions;    // [chunk]
  TrackedBuffer<bf16_t*> row_pointers;  // [2, layers, chunk] each row's context K and V row, per layer
  TrackedBuffer<bf16_t> context_kv;     // [chunk, layers * 2 kv] the fused absorb's one GEMM output
  TrackedBuffer<bf16_t> sink;           // [2, layers, chunk, kv] where padding rows' K and V go (read by nothing)
};

}  // namespace ls::dspark::cuda
