// The CUDA drafter's context: absorb() takes the target's tapped rows and projects them into the per-stream K/V
// cache (reference/dspark.md §2.3: C = hidden_norm(fc F), K = RoPE(k_norm(k_proj C)), V = v_proj C).
#include <algorithm>
#include <memory>
#include <string>

#include "draft/dspark/cuda/cuda_drafter.h"

namespace ls::dspark::cuda {
namespace {

constexpr int64_t kAbsorbChunkRows = 128;  // matches the absorb scratch reserved in reserve_scratch

}  // namespace

Status CudaDsparkDrafter::absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) {
  const int64_t width = static_cast<int64_t>(config_.tap_count()) * config_.hidden_size;
  if (rows < 0 || start < 0 || static_cast<int64_t>(taps.size()) != rows * width) {
    return Status(ErrorCode::InvalidArgument, "absorb of stream " + std::to_string(stream) + ": " +
                                                  std::to_string(rows) + " rows at " + std::to_string(start) +
                                                  " need " + std::to_string(rows * width) + " tap values, got " +
                                                  std::to_string(taps.size()));
  }
  std::unique_ptr<DeviceStreamContext>& slot = streams_[stream];
  if (!slot) slot = std::make_unique<DeviceStreamContext>();
  DeviceStreamContext& context = *slot;
  if (start > context.length) {
    return Status(ErrorCode::InvalidArgument, "absorb of stream " + std::to_string(stream) + " at position " +
                                                  std::to_string(start) + " would leave a gap: the drafter holds " +
                                                  std::to_string(context.length) + " positions");
  }
  // Room for the rows plus one block of scratch K/V after them.
  LS_RETURN_IF_ERROR(reserve_context(context, start + rows + config_.block_size));
  LS_RETURN_IF_ERROR(project_context(taps.data(), rows, start, context));
  LS_CUDA_TRY(cudaStreamSynchronize(stream_.get()));
  context.length = start + rows;
  return ok_status();
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
                                absorb_.normed.data(), stream));
    for (int index = 0; index < c.num_layers; ++index) {
      const DeviceLayerWeights& layer = weights_.layers[index];
      // K = RoPE(k_norm(k_proj C)) and V = v_proj C, written straight into the cache rows start+first ...
      const int64_t offset = (index * context.capacity + start + first) * kv;
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

}  // namespace ls::dspark::cuda
