// The CUDA drafter's device scratch: the block pass and scan buffers sized for a request count (grown on demand),
// each stream's context K / V (grown by doubling), the test hook that poisons them, and the copies back of the last
// pass's Hf and U.
#include <algorithm>
#include <utility>
#include <vector>

#include "draft/dspark/cuda/cuda_drafter.h"

namespace ls::dspark::cuda {

void CudaDsparkDrafter::fit_cooperative_attention() {
  // Which request counts the one-launch attention takes here at the chunks in use (asked now, outside any capture:
  // no occupancy query inside one).
  const DsparkConfig& c = config_;
  const AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 0.0f};
  const size_t n = static_cast<size_t>(scratch_.requests);
  cooperative_attention_fits_.assign(n + 1, false);
  for (size_t count = 1; count <= n; ++count) {
    cooperative_attention_fits_[count] =
        block_attention_cooperative_supported(static_cast<int>(count), c.block_size, dims, attention_chunks_);
  }
}

Status CudaDsparkDrafter::reserve_scratch(int64_t requests, InitSteps* steps) {
  if (requests <= scratch_.requests) return ok_status();
  const DsparkConfig& c = config_;
  const size_t n = static_cast<size_t>(requests), rows = n * c.block_size;
  InitSteps unplanned;
  InitSteps& counted = steps ? *steps : unplanned;
  DeviceBlockScratch& s = scratch_;
  const struct {
    TrackedBuffer<bf16_t>* buffer;
    size_t count;
    const char* name;
  } activations[] = {{&s.hidden, rows * c.hidden_size, "block hidden"},
                     {&s.normed, rows * c.hidden_size, "block normed"},
                     {&s.queries, rows * c.q_size(), "block queries"},
                     {&s.keys, rows * c.kv_size(), "block keys"},
                     {&s.values, rows * c.kv_size(), "block values"},
                     {&s.attended, rows * c.q_size(), "block attention"},
                     {&s.projected, rows * c.hidden_size, "block projection"},
                     {&s.gate, rows * c.ffn_size, "block gate"},
                     // the stacked q/k/v output [rows, q + 2 kv], then the stacked gate/up output [rows, 2 ff]
                     {&s.up, rows * std::max<size_t>(2 * c.ffn_size, c.q_size() + 2 * c.kv_size()), "block up"},
                     {&s.final_hidden, rows * c.hidden_size, "block final hidden"},
                     {&s.markov_embeddings, n * c.markov_rank, "markov embeddings"}};
  for (const auto& entry : activations) LS_RETURN_IF_ERROR(entry.buffer->allocate(entry.count, entry.name, counted));
  LS_RETURN_IF_ERROR(s.base_logits.allocate(rows * c.vocab_size, "block logits", counted));
  LS_RETURN_IF_ERROR(s.markov_logits.allocate(n * c.vocab_size, "markov logits", counted));
  {
    const size_t sizes[DeviceBlockScratch::kParts] = {
        rows * sizeof(int32_t),          rows * sizeof(int32_t), n * sizeof(DeviceBlockRequest),
        n * sizeof(DeviceScanRequest),   absorb_pass_input_bytes(), n * sizeof(DeviceScanRecord)};
    size_t total = 0;
    for (int part = 0; part < DeviceBlockScratch::kParts; ++part) {
      s.offsets[part] = total;
      total += (sizes[part] + 255) / 256 * 256;
    }
    LS_RETURN_IF_ERROR(s.inputs.allocate(total, "pass inputs", counted));
    LS_RETURN_IF_ERROR(counted.step("pinned staging"));
    LS_RETURN_IF_ERROR(staging_.reserve(total));
    uint8_t* base = s.inputs.data();
    s.tokens.pointer = reinterpret_cast<int32_t*>(base + s.offsets[DeviceBlockScratch::kTokens]);
    s.positions.pointer = reinterpret_cast<int32_t*>(base + s.offsets[DeviceBlockScratch::kPositions]);
    s.block_requests.pointer = reinterpret_cast<DeviceBlockRequest*>(base + s.offsets[DeviceBlockScratch::kBlockRequests]);
    s.scan_requests.pointer = reinterpret_cast<DeviceScanRequest*>(base + s.offsets[DeviceBlockScratch::kScanRequests]);
    s.records.pointer = reinterpret_cast<DeviceScanRecord*>(base + s.offsets[DeviceBlockScratch::kRecords]);
  }
  {
    const size_t pad = n * static_cast<size_t>(c.num_layers) * c.block_size * c.kv_size();
    LS_RETURN_IF_ERROR(s.pad_keys.allocate(pad, "padding keys", counted));
    LS_RETURN_IF_ERROR(s.pad_values.allocate(pad, "padding values", counted));
  }
  LS_RETURN_IF_ERROR(s.scan_partials.allocate(n * fused_scan_chunks(c.vocab_size), "scan partials", counted));
  LS_RETURN_IF_ERROR(s.scan_tickets.upload(std::vector<unsigned int>(fused_scan_groups(static_cast<int>(n)), 0u),
                                           "scan tickets", counted));
  const AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 0.0f};
  if (block_attention_tile_supported(c.block_size, dims)) {
    const int most = static_cast<int>(requests);
    LS_RETURN_IF_ERROR(s.attention_stats.allocate(
        static_cast<size_t>(split_attention_stat_floats(most, c.block_size, dims)), "attention stats", counted));
    LS_RETURN_IF_ERROR(s.attention_partials.allocate(
        static_cast<size_t>(split_attention_partial_floats(most, c.block_size, dims)), "attention partials",
        counted));
    LS_RETURN_IF_ERROR(s.attention_barriers.upload(std::vector<unsigned int>(n * c.num_kv_heads + 1, 0u),
                                                   "attention barriers", counted));
  }
  if (absorb_.taps.size() == 0) {
    constexpr size_t kChunk = 128;
    const size_t in = static_cast<size_t>(c.tap_count()) * c.hidden_size;
    LS_RETURN_IF_ERROR(absorb_.taps.allocate(kChunk * in, "absorb taps", counted));
    LS_RETURN_IF_ERROR(absorb_.features.allocate(kChunk * in, "absorb features", counted));
    LS_RETURN_IF_ERROR(absorb_.fused.allocate(kChunk * c.hidden_size, "absorb fc", counted));
    LS_RETURN_IF_ERROR(absorb_.normed.allocate(kChunk * c.hidden_size, "absorb normed", counted));
  }
  s.requests = requests;
  if (s.attention_barriers.size() > 0) fit_cooperative_attention();
  graphs_.clear();  // captured graphs hold the old scratch pointers
  return ok_status();
}

Status CudaDsparkDrafter::reserve_context(DeviceStreamContext& context, int64_t rows) {
  if (rows <= context.capacity) return ok_status();
  // An absorb left for the next pass holds row pointers into the contexts: it runs before any of them moves.
  LS_RETURN_IF_ERROR(flush_pending_absorb());
  const int64_t capacity = std::max<int64_t>({rows, 2 * context.capacity, 64});
  const int64_t kv = config_.kv_size(), layers = config_.num_layers;
  TrackedBuffer<bf16_t> keys, values;
  LS_RETURN_IF_ERROR(keys.allocate(static_cast<size_t>(layers * capacity * kv), "context keys"));
  LS_RETURN_IF_ERROR(values.allocate(static_cast<size_t>(layers * capacity * kv), "context values"));
  if (context.rows() > 0) {
    // Each layer's held rows move to the start of that layer's new, longer span.
    const size_t width = static_cast<size_t>(kv) * sizeof(bf16_t);
    for (auto [from, to] : {std::pair{&context.keys, &keys}, std::pair{&context.values, &values}}) {
      LS_CUDA_TRY(cudaMemcpy2DAsync(to->data(), capacity * width, from->data(), context.capacity * width,
                                    context.rows() * width, layers, cudaMemcpyDeviceToDevice, stream_.get()));
    }
    LS_CUDA_TRY(cudaStreamSynchronize(stream_.get()));
  }
  context.keys = std::move(keys);
  context.values = std::move(values);
  context.capacity = capacity;
  return ok_status();
}

Status CudaDsparkDrafter::poison_scratch_for_test() {
  DeviceBlockScratch& s = scratch_;
  for (TrackedBuffer<bf16_t>* buffer : {&s.hidden, &s.normed, &s.queries, &s.keys, &s.values, &s.attended,
                                        &s.projected, &s.gate, &s.up, &s.final_hidden, &s.markov_embeddings,
                                        &absorb_.features, &absorb_.fused, &absorb_.normed, &absorb_.keys,
                                        &absorb_.values, &absorb_.context_kv}) {
    if (buffer->size() == 0) continue;
    LS_CUDA_TRY(cudaMemsetAsync(buffer->data(), 0xff, buffer->bytes(), stream_.get()));
  }
  for (TrackedBuffer<float>* buffer :
       {&s.base_logits, &s.markov_logits, &absorb_.taps, &s.attention_stats, &s.attention_partials}) {
    if (buffer->size() == 0) continue;
    LS_CUDA_TRY(cudaMemsetAsync(buffer->data(), 0xff, buffer->bytes(), stream_.get()));
  }
  LS_CUDA_TRY(cudaMemsetAsync(s.scan_partials.data(), 0xff, s.scan_partials.bytes(), stream_.get()));
  if (s.persistent_partials.size() > 0) {
    LS_CUDA_TRY(cudaMemsetAsync(s.persistent_partials.data(), 0xff, s.persistent_partials.bytes(), stream_.get()));
  }
  LS_CUDA_TRY(cudaStreamSynchronize(stream_.get()));
  return ok_status();
}

Result<std::vector<float>> CudaDsparkDrafter::last_final_hidden() const {
  std::vector<bf16_t> values(static_cast<size_t>(last_rows_ * config_.hidden_size));
  LS_CUDA_TRY(cudaMemcpy(values.data(), scratch_.final_hidden.data(), values.size() * sizeof(bf16_t),
                         cudaMemcpyDeviceToHost));
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
  return out;
}

Result<std::vector<float>> CudaDsparkDrafter::last_base_logits() const {
  std::vector<float> out(static_cast<size_t>(last_rows_) * config_.vocab_size);
  LS_CUDA_TRY(cudaMemcpy(out.data(), scratch_.base_logits.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace ls::dspark::cuda
