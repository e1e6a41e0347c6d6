// The CUDA drafter's context: absorb() takes the target's tapped rows and projects them into the per-stream K/V
// cache (reference/dspark.md §2.3: C = hidden_norm(fc F), K = RoPE(k_norm(k_proj C)), V = v_proj C).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "draft/dspark/cuda/absorb_kernels.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/dspark/shared_steps.h"

namespace ls::dspark::cuda {
namespace {

constexpr int64_t kAbsorbChunkRows = 128;  // matches the absorb scratch reserved in reserve_scratch
constexpr size_t kAbsorbCublasWorkspaceBytes = size_t{32} << 20;  // the drafter handle's (cuBLAS's own default)
// The pass's input part kAbsorbPass: AbsorbGather, then positions [kAbsorbPassRows], then row pointers
// [2, layers, bucket] (16-byte aligned pieces).
constexpr size_t kAbsorbPassPositions = (sizeof(AbsorbGather) + 15) / 16 * 16;
constexpr size_t kAbsorbPassPointers = kAbsorbPassPositions + kAbsorbPassRows * sizeof(int32_t);

}  // namespace

Status CudaDsparkDrafter::absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) {
  const int64_t width = static_cast<int64_t>(config_.tap_count()) * config_.hidden_size;
  if (rows < 0 || start < 0 || static_cast<int64_t>(taps.size()) != rows * width) {
    return Status(ErrorCode::InvalidArgument, "absorb of stream " + std::to_string(stream) + ": " +
                                                  std::to_string(rows) + " rows at " + std::to_string(start) +
                                                  " need " + std::to_string(rows * width) + " tap values, got " +
                                                  std::to_string(taps.size()));
  }
  LS_RETURN_IF_ERROR(flush_pending_absorb());
  std::unique_ptr<DeviceStreamContext>& slot = streams_[stream];
  if (!slot) slot = std::make_unique<DeviceStreamContext>();
  DeviceStreamContext& context = *slot;
  if (start > context.length || start < context.resumed_at) {
    return Status(ErrorCode::InvalidArgument, "absorb of stream " + std::to_string(stream) + " at position " +
                                                  std::to_string(start) + " would leave a gap or rewrite rows before a" +
                                                  " restart: the drafter holds " + std::to_string(context.length) +
                                                  " positions (restarted at " + std::to_string(context.resumed_at) +
                                                  ")");
  }
  // Room for the rows plus one block of scratch K/V after them.
  LS_RETURN_IF_ERROR(reserve_context(context, start - context.skipped + rows + config_.block_size));
  LS_RETURN_IF_ERROR(project_context(taps.data(), rows, start, context));
  LS_CUDA_TRY(cudaStreamSynchronize(stream_.get()));
  context.length = start + rows;
  return ok_status();
}

Status CudaDsparkDrafter::absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) {
  const DsparkConfig& c = config_;
  const int64_t in = static_cast<int64_t>(c.tap_count()) * c.hidden_size;
  if (taps.data == nullptr || taps.device != facts_.tap_device || taps.row_values != in) {
    return Status(ErrorCode::InvalidArgument, "device taps on device " + std::to_string(taps.device) + " with " +
                                                  std::to_string(taps.row_values) + " values a row; this drafter " +
                                                  "reads device " + std::to_string(facts_.tap_device) + " with " +
                                                  std::to_string(in));
  }
  // An earlier call still in flight reads the staging slots reused below.
  LS_RETURN_IF_ERROR(settle());
  // Every check and every context's room first, so a refusal absorbs nothing.
  std::vector<DeviceStreamContext*> contexts;
  int64_t total_rows = 0;
  for (const TapRows& piece : rows) {
    if (piece.rows < 0 || piece.first_row < 0 || piece.first_row + piece.rows > taps.rows) {
      return Status(ErrorCode::InvalidArgument, "tap rows " + std::to_string(piece.first_row) + " + " +
                                                    std::to_string(piece.rows) + " outside the " +
                                                    std::to_string(taps.rows) + " rows on the device");
    }
    std::unique_ptr<DeviceStreamContext>& slot = streams_[piece.stream];
    if (!slot) slot = std::make_unique<DeviceStreamContext>();
    DeviceStreamContext& context = *slot;
    if (piece.start > context.length || piece.start < context.resumed_at) {
      return Status(ErrorCode::InvalidArgument, "absorb of stream " + std::to_string(piece.stream) +
                                                    " at position " + std::to_string(piece.start) + " outside the " +
                                                    std::to_string(context.length) + " positions it covers");
    }
    LS_RETURN_IF_ERROR(reserve_context(context, piece.start - context.skipped + piece.rows + c.block_size));
    contexts.push_back(&context);
    total_rows += piece.rows;
  }
  if (absorb_pass_takes(rows, taps, total_rows)) {
    // Session 19: the next pass of one request runs them inside its graph (settle() or any other call runs them
    // first).
    absorb_pass_.rows.assign(rows.begin(), rows.end());
    absorb_pass_.taps = taps;
    absorb_pass_.total_rows = total_rows;
  } else {
    LS_RETURN_IF_ERROR(enqueue_absorb(rows, taps));
  }
  for (size_t index = 0; index < rows.size(); ++index) {
    contexts[index]->length = rows[index].start + rows[index].rows;
  }
  return ok_status();
}

Status CudaDsparkDrafter::enqueue_absorb(std::span<const TapRows> rows, const DeviceTaps& taps) {
  const DsparkConfig& c = config_;
  const cudaStream_t stream = stream_.get();
  const int64_t in = static_cast<int64_t>(c.tap_count()) * c.hidden_size, kv = c.kv_size();
  std::vector<DeviceStreamContext*> contexts;
  int64_t total_rows = 0;
  for (const TapRows& piece : rows) {
    contexts.push_back(streams_.at(piece.stream).get());
    total_rows += piece.rows;
  }
  // The uploads come from page-locked slots (one per chunk): a pageable upload would first wait for the stream.
  const size_t pointer_bytes = static_cast<size_t>(2 * c.num_layers * kAbsorbChunkRows) * sizeof(bf16_t*);
  const size_t slot_bytes = pointer_bytes + kAbsorbChunkRows * sizeof(int32_t);
  const int64_t chunks = (total_rows + kAbsorbChunkRows - 1) / kAbsorbChunkRows;
  LS_RETURN_IF_ERROR(absorb_staging_.reserve(static_cast<size_t>(std::max<int64_t>(chunks, 1)) * slot_bytes));
  int64_t chunk_index = 0;
  LS_RETURN_IF_ERROR(reserve_device_absorb(nullptr));
  const auto* source = static_cast<const bf16_t*>(taps.data);
  // Chunks of up to kAbsorbChunkRows rows across the pieces; a part is one piece's rows inside one chunk.
  struct Part {
    size_t piece;
    int64_t offset, count, chunk_row;
  };
  size_t piece = 0;
  int64_t offset = 0;
  std::vector<int32_t> positions;
  std::vector<bf16_t*> row_pointers;
  while (piece < rows.size()) {
    std::vector<Part> parts;
    positions.clear();
    int64_t filled = 0;
    while (piece < rows.size() && filled < kAbsorbChunkRows) {
      const int64_t count = std::min<int64_t>(rows[piece].rows - offset, kAbsorbChunkRows - filled);
      if (count > 0) {
        parts.push_back({piece, offset, count, filled});
        // The target's taps are bf16 already: the features are the same bits the host path rounds to.
        LS_CUDA_TRY(cudaMemcpyAsync(absorb_.features.data() + filled * in,
                                    source + (rows[piece].first_row + offset) * in, count * in * sizeof(bf16_t),
                                    cudaMemcpyDeviceToDevice, stream));
        for (int64_t row = 0; row < count; ++row) {
          positions.push_back(static_cast<int32_t>(rows[piece].start + offset + row));
        }
        filled += count;
        offset += count;
      }
      if (offset >= rows[piece].rows) {
        ++piece;
        offset = 0;
      }
    }
    if (filled == 0) break;
    // The chunk runs its row bucket: padding rows (zero features, position 0) put their K and V into the sink.
    const int64_t padded =
        request_buckets_ ? std::min<int64_t>(request_bucket(static_cast<int>(filled)), kAbsorbChunkRows) : filled;
    if (padded > filled) {
      LS_CUDA_TRY(cudaMemsetAsync(absorb_.features.data() + filled * in, 0,
                                  (padded - filled) * in * sizeof(bf16_t), stream));
      positions.resize(static_cast<size_t>(padded), 0);
    }
    // Where each row's K and V go, layer by layer: [keys | values][layer][chunk row].
    const int64_t layers = c.num_layers;
    row_pointers.assign(static_cast<size_t>(2 * layers * padded), nullptr);
    for (int64_t index = 0; index < layers; ++index) {
      for (const Part& part : parts) {
        const TapRows& owner = rows[part.piece];
        DeviceStreamContext& context = *contexts[part.piece];
        for (int64_t row = 0; row < part.count; ++row) {
          const int64_t at = (index * context.capacity + owner.start - context.skipped + part.offset + row) * kv;
          row_pointers[index * padded + part.chunk_row + row] = context.keys.data() + at;
          row_pointers[(layers + index) * padded + part.chunk_row + row] = context.values.data() + at;
        }
      }
      for (int64_t row = filled; row < padded; ++row) {
        for (int64_t side = 0; side < 2; ++side) {
          row_pointers[(side * layers + index) * padded + row] =
              absorb_.sink.data() + ((side * layers + index) * kAbsorbChunkRows + row) * kv;
        }
      }
    }
    uint8_t* slot = absorb_staging_.data() + chunk_index++ * slot_bytes;
    std::memcpy(slot, row_pointers.data(), row_pointers.size() * sizeof(bf16_t*));
    std::memcpy(slot + pointer_bytes, positions.data(), padded * sizeof(int32_t));
    LS_CUDA_TRY(cudaMemcpyAsync(absorb_.row_pointers.data(), slot, row_pointers.size() * sizeof(bf16_t*),
                                cudaMemcpyHostToDevice, stream));
    LS_CUDA_TRY(cudaMemcpyAsync(absorb_.positions.data(), slot + pointer_bytes, padded * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream));
    // The chunk's projections: one CUDA graph replay per row bucket (captured at the first absorb_device()), or
    // eagerly (graphs off; exact row counts: from a row count's second sighting).
    LS_RETURN_IF_ERROR(run_shape({static_cast<int>(padded), kAbsorbGraphKey}, [&] { return absorb_chunk(padded); }));
  }
  // No wait here: the next pass queues behind this work on the drafter's stream, and settle() waits before the
  // target's next forward overwrites the taps read above.
  absorb_in_flight_ = true;
  return ok_status();
}

Status CudaDsparkDrafter::absorb_chunk(int64_t filled) {
  return absorb_chunk_from(filled, absorb_.row_pointers.data(), absorb_.positions.data());
}

Status CudaDsparkDrafter::absorb_chunk_from(int64_t filled, bf16_t* const* row_pointers, const int32_t* positions) {
  const DsparkConfig& c = config_;
  const cudaStream_t stream = launch_stream();  // the drafter's stream, or the absorb branch
  const int64_t d = c.hidden_size, in = static_cast<int64_t>(c.tap_count()) * d, kv = c.kv_size();
  const int64_t layers = c.num_layers;
  // C = hidden_norm(fc(F)) for every row of the chunk at once.
  LS_RETURN_IF_ERROR(gemm(absorb_.features.data(), filled, weights_.fc.values.data(), d, in, absorb_.fused.data(),
                          false, d));
  LS_RETURN_IF_ERROR(rms_norm(absorb_.fused.data(), filled, d, weights_.hidden_norm.data(), c.norm_eps,
                              absorb_.normed.data(), stream, batched_loads_));
  mark("absorb fc + norm");
  if (fused_absorb_) {
    // Every layer's K and V in one GEMM, then one launch norms and rotates the keys and puts K and V in place.
    LS_RETURN_IF_ERROR(gemm(absorb_.normed.data(), filled, weights_.context_kv_proj.values.data(), layers * 2 * kv, d,
                            absorb_.context_kv.data(), false, layers * 2 * kv));
    AbsorbHeads heads;
    heads.kv = absorb_.context_kv.data();
    heads.rows = filled;
    heads.layers = c.num_layers;
    heads.kv_heads = c.num_kv_heads;
    heads.head_dim = c.head_dim;
    heads.k_norms = weights_.context_k_norms.data();
    heads.eps = c.norm_eps;
    heads.positions = positions;
    heads.inv_freq = weights_.inv_freq.data();
    heads.neox = neox(c);
    heads.row_pointers = row_pointers;
    heads.batched = batched_loads_;
    LS_RETURN_IF_ERROR(absorb_heads(heads, stream));
    mark("absorb K/V");
    return ok_status();
  }
  for (int index = 0; index < c.num_layers; ++index) {
    const DeviceLayerWeights& layer = weights_.layers[index];
    bf16_t* keys = absorb_.keys.data();
    bf16_t* values = absorb_.values.data();
    LS_RETURN_IF_ERROR(gemm(absorb_.normed.data(), filled, layer.k_proj.values.data(), kv, d, keys, false, kv));
    LS_RETURN_IF_ERROR(rms_norm(keys, filled * c.num_kv_heads, c.head_dim, layer.k_norm.data(), c.norm_eps, keys,
                                stream));
    LS_RETURN_IF_ERROR(rope_rotate(keys, filled, c.num_kv_heads, c.head_dim, positions, 0,
                                   weights_.inv_freq.data(), neox(c), stream));
    LS_RETURN_IF_ERROR(gemm(absorb_.normed.data(), filled, layer.v_proj.values.data(), kv, d, values, false, kv));
    // One launch puts every stream's rows of this layer in place (a copy per stream per layer cost more to
    // launch than the GEMMs took).
    LS_RETURN_IF_ERROR(scatter_context_rows(keys, values, filled, kv, row_pointers + index * filled,
                                            row_pointers + (layers + index) * filled, stream));
  }
  mark("absorb K/V");
  return ok_status();
}

Status CudaDsparkDrafter::reserve_device_absorb(InitSteps* steps) {
  if (absorb_.sink.size() > 0) return ok_status();
  const DsparkConfig& c = config_;
  const int64_t kv = c.kv_size();
  InitSteps unplanned;
  InitSteps& counted = steps ? *steps : unplanned;
  LS_RETURN_IF_ERROR(absorb_.keys.allocate(kAbsorbChunkRows * kv, "absorb keys", counted));
  LS_RETURN_IF_ERROR(absorb_.values.allocate(kAbsorbChunkRows * kv, "absorb values", counted));
  LS_RETURN_IF_ERROR(absorb_.positions.allocate(kAbsorbChunkRows, "absorb positions", counted));
  LS_RETURN_IF_ERROR(
      absorb_.row_pointers.allocate(2 * c.num_layers * kAbsorbChunkRows, "absorb row pointers", counted));
  LS_RETURN_IF_ERROR(
      absorb_.context_kv.allocate(kAbsorbChunkRows * c.num_layers * 2 * kv, "absorb context K/V", counted));
  LS_RETURN_IF_ERROR(absorb_.sink.allocate(2 * c.num_layers * kAbsorbChunkRows * kv, "absorb padding sink", counted));
  return ok_status();  // the graphs: capture_bucket_graphs() (at load, and when the scratch grows)
}

void CudaDsparkDrafter::capture_absorb_graphs() {
  if (!request_buckets_ || tuned_gemms_) return;
  const auto start = std::chrono::steady_clock::now();
  int captured = 0;
  for (int rows = 1; rows <= kAbsorbChunkRows; rows = request_bucket(rows + 1)) {
    captured += capture_shape({rows, kAbsorbGraphKey}, [&] { return absorb_chunk(rows); });
  }
  absorb_graphs_captured_ = captured;
  absorb_capture_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Status CudaDsparkDrafter::settle() {
  LS_RETURN_IF_ERROR(flush_pending_absorb());
  if (!absorb_in_flight_) return ok_status();
  absorb_in_flight_ = false;
  LS_CUDA_TRY(cudaStreamSynchronize(stream_.get()));
  return ok_status();
}

void CudaDsparkDrafter::release(StreamId stream) {
  if (const Status flushed = flush_pending_absorb(); !flushed.ok()) {
    log_warn("cuda drafter: an absorb left for the next pass failed at release (%s)", flushed.to_string().c_str());
  }
  streams_.erase(stream);
}

Status CudaDsparkDrafter::restart(StreamId stream, int64_t position) {
  LS_RETURN_IF_ERROR(flush_pending_absorb());
  std::unique_ptr<DeviceStreamContext>& slot = streams_[stream];
  if (!slot) slot = std::make_unique<DeviceStreamContext>();
  DeviceStreamContext& context = *slot;
  return restart_context(context, stream, position);
}

Status CudaDsparkDrafter::project_context(const float* taps, int64_t rows, int64_t start,
                                          DeviceStreamContext& context) {
  const DsparkConfig& c = config_;
  const cudaStream_t stream = stream_.get();
  const int64_t d = c.hidden_size, in = static_cast<int64_t>(c.tap_count()) * d, kv = c.kv_size();
  for (int64_t first = 0; first < rows; first += kAbsorbChunkRows) {
    const int64_t count = std::min(kAbsorbChunkRows, rows - first);
    // F is taken in the model dtype, as the reference's taps.to(dtype).
    LS_CUDA_TRY(cudaMemcpyAsync(absorb_.taps.data(), taps + first * in, count * in * sizeof(float),
                                cudaMemcpyHostToDevice, stream));
    LS_RETURN_IF_ERROR(round_to_bf16(absorb_.taps.data(), count * in, absorb_.features.data(), stream));
    // C = hidden_norm(fc(F)).
    LS_RETURN_IF_ERROR(gemm(absorb_.features.data(), count, weights_.fc.values.data(), d, in, absorb_.fused.data(),
                            false, d));
    LS_RETURN_IF_ERROR(rms_norm(absorb_.fused.data(), count, d, weights_.hidden_norm.data(), c.norm_eps,
                                absorb_.normed.data(), stream, batched_loads_));
    for (int index = 0; index < c.num_layers; ++index) {
      const DeviceLayerWeights& layer = weights_.layers[index];
      // K = RoPE(k_norm(k_proj C)) and V = v_proj C, written straight into the cache rows start+first ...
      const int64_t offset = (index * context.capacity + start - context.skipped + first) * kv;
      bf16_t* keys = context.keys.data() + offset;
      bf16_t* values = context.values.data() + offset;
      LS_RETURN_IF_ERROR(gemm(absorb_.normed.data(), count, layer.k_proj.values.data(), kv, d, keys, false, kv));
      LS_RETURN_IF_ERROR(rms_norm(keys, count * c.num_kv_heads, c.head_dim, layer.k_norm.data(), c.norm_eps, keys,
                                  stream));
      LS_RETURN_IF_ERROR(rope_rotate(keys, count, c.num_kv_heads, c.head_dim, nullptr, start + first,
                                     weights_.inv_freq.data(), neox(c), stream));
      LS_RETURN_IF_ERROR(gemm(absorb_.normed.data(), count, layer.v_proj.values.data(), kv, d, values, false, kv));
    }
  }
  return ok_status();
}

bool CudaDsparkDrafter::absorb_pass_takes(std::span<const TapRows> rows, const DeviceTaps& taps,
                                          int64_t total_rows) const {
  // One stream's rows only: several streams' rows precede a pass of several requests, which would carry the absorb's
  // device time (the lanes' pass prices took it: nano 4 streams 1.17x against 1.32-1.41x, H200 b5).
  return rows.size() == 1 && absorb_in_pass_ && graphs_on_ && request_buckets_ && !profile_.on() && !tuned_gemms_ &&
         !engine_gemms_ && fused_absorb_ && fused_block_ && total_rows >= 1 && total_rows <= kAbsorbPassRows &&
         taps.row_values % 8 == 0 && reinterpret_cast<uintptr_t>(taps.data) % 16 == 0 && absorb_.sink.size() > 0;
}

Status CudaDsparkDrafter::flush_pending_absorb() {
  if (!absorb_pass_.waiting()) return ok_status();
  const std::vector<TapRows> rows = std::move(absorb_pass_.rows);
  const DeviceTaps taps = absorb_pass_.taps;
  absorb_pass_.clear();
  return enqueue_absorb(rows, taps);
}

size_t CudaDsparkDrafter::absorb_pass_input_bytes() const {
  return kAbsorbPassPointers + static_cast<size_t>(2 * config_.num_layers * kAbsorbPassRows) * sizeof(bf16_t*);
}

int CudaDsparkDrafter::stage_absorb_pass(uint8_t* part) const {
  const DsparkConfig& c = config_;
  const int64_t kv = c.kv_size(), layers = c.num_layers;
  const int bucket = std::min(request_bucket(static_cast<int>(absorb_pass_.total_rows)), kAbsorbPassRows);
  AbsorbGather gather;
  gather.taps = static_cast<const bf16_t*>(absorb_pass_.taps.data);
  std::fill(std::begin(gather.sources), std::end(gather.sources), int64_t{-1});
  int32_t positions[kAbsorbPassRows] = {};
  // [keys | values][layer][chunk row], rows `bucket` apart (absorb_heads' layout); padding rows into the sink.
  std::vector<bf16_t*> row_pointers(static_cast<size_t>(2 * layers * bucket), nullptr);
  int filled = 0;
  for (const TapRows& piece : absorb_pass_.rows) {
    const DeviceStreamContext& context = *streams_.at(piece.stream);
    for (int64_t row = 0; row < piece.rows; ++row, ++filled) {
      gather.sources[filled] = piece.first_row + row;
      positions[filled] = static_cast<int32_t>(piece.start + row);
      for (int64_t index = 0; index < layers; ++index) {
        const int64_t at = (index * context.capacity + piece.start - context.skipped + row) * kv;
        row_pointers[index * bucket + filled] = context.keys.data() + at;
        row_pointers[(layers + index) * bucket + filled] = context.values.data() + at;
      }
    }
  }
  for (int row = filled; row < bucket; ++row) {
    for (int64_t index = 0; index < layers; ++index) {
      for (int64_t side = 0; side < 2; ++side) {
        row_pointers[(side * layers + index) * bucket + row] =
            absorb_.sink.data() + ((side * layers + index) * kAbsorbChunkRows + row) * kv;
      }
    }
  }
  std::memcpy(part, &gather, sizeof(gather));
  std::memcpy(part + kAbsorbPassPositions, positions, sizeof(positions));
  std::memcpy(part + kAbsorbPassPointers, row_pointers.data(), row_pointers.size() * sizeof(bf16_t*));
  return bucket;
}

Status CudaDsparkDrafter::ready_absorb_branch() {
  if (!absorb_pass_.branch.ready()) LS_RETURN_IF_ERROR(absorb_pass_.branch.create());
  if (absorb_pass_.cublas.get() == nullptr) {
    LS_RETURN_IF_ERROR(absorb_pass_.cublas.create(absorb_pass_.branch.side()));
    LS_RETURN_IF_ERROR(absorb_pass_.workspace.allocate(kAbsorbCublasWorkspaceBytes, "absorb branch cublas workspace"));
    LS_RETURN_IF_ERROR(cublas_status(cublasSetWorkspace(absorb_pass_.cublas.get(), absorb_pass_.workspace.data(),
                                                        kAbsorbCublasWorkspaceBytes),
                                     "cublasSetWorkspace"));
  }
  return ok_status();
}

Status CudaDsparkDrafter::fork_absorb_branch(int bucket) {
  const cudaStream_t side = absorb_pass_.branch.fork(stream_.get());
  if (side == nullptr || absorb_pass_.cublas.get() == nullptr) {
    return Status(ErrorCode::DeviceError, "the absorb branch of the block pass could not fork");
  }
  const uint8_t* part = scratch_.inputs.data() + scratch_.offsets[DeviceBlockScratch::kAbsorbPass];
  const int64_t in = static_cast<int64_t>(config_.tap_count()) * config_.hidden_size;
  launch_stream_override_ = side;
  cublas_override_ = absorb_pass_.cublas.get();
  Status status = absorb_pass_planted_ ? ok_status()
                                       : gather_tap_rows(reinterpret_cast<const AbsorbGather*>(part), in, bucket,
                                                         absorb_.features.data(), side);
  if (status.ok()) {
    status = absorb_chunk_from(bucket, reinterpret_cast<bf16_t* const*>(part + kAbsorbPassPointers),
                               reinterpret_cast<const int32_t*>(part + kAbsorbPassPositions));
  }
  launch_stream_override_ = nullptr;
  cublas_override_ = nullptr;
  if (!status.ok()) {
    (void)absorb_pass_.branch.join(stream_.get());  // a capture must end with its branches joined
    return status;
  }
  absorb_pass_.open = true;  // block_pass joins it before layer 0's attention
  return ok_status();
}

}  // namespace ls::dspark::cuda
