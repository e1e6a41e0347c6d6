// CudaTarget's streams between forwards (commit, release, their pages and conv slots) and the one-off embed / head
// calls.
#include "model/lfm2/cuda/cuda_target.h"

#include "model/window_checks.h"

#include <algorithm>
#include <string>

namespace ls::lfm2 {

void CudaTarget::free_stream_pages(StreamState& state, int64_t keep_positions) {
  const int64_t P = kv_shape_.page_size;
  const size_t keep = static_cast<size_t>((keep_positions + P - 1) / P);
  while (state.pages.size() > keep) {
    free_pages_.push_back(state.pages.back());
    state.pages.pop_back();
  }
}

Status CudaTarget::commit(StreamId stream, int kept) {
  const auto found = streams_.find(stream);
  if (found == streams_.end() || found->second.window_rows == 0)
    return Status(ErrorCode::InvalidArgument, "stream " + std::to_string(stream) + " has no window to commit");
  StreamState& state = found->second;
  if (kept < 1 || kept > state.window_rows)
    return Status(ErrorCode::InvalidArgument, "stream " + std::to_string(stream) + ": commit keeps " +
                                                  std::to_string(kept) + " rows of a window of " +
                                                  std::to_string(state.window_rows));
  // The conv history moves at the start of the next forward (one launch for every stream); KV is truncated by length.
  pending_commits_.push_back(gpu::ConvCommit{state.slot, state.window_first_row, kept});
  state.committed += kept;
  state.window_rows = 0;
  free_stream_pages(state, state.committed);
  return ok_status();
}

int64_t CudaTarget::committed_length(StreamId stream) const {
  const auto found = streams_.find(stream);
  return found == streams_.end() ? 0 : found->second.committed;
}

void CudaTarget::release(StreamId stream) {
  const auto found = streams_.find(stream);
  if (found == streams_.end()) return;
  StreamState& state = found->second;
  std::erase_if(pending_commits_, [&](const gpu::ConvCommit& c) { return c.slot == state.slot; });
  free_stream_pages(state, 0);
  free_slots_.push_back(state.slot);
  streams_.erase(found);
}

Status CudaTarget::embed(std::span<const int32_t> tokens, std::span<float> out) const {
  const int64_t D = facts_.hidden_size;
  LS_RETURN_IF_ERROR(check_embed_args(tokens, out.size(), facts_));
  for (size_t g = 0; g < tokens.size(); g += head_group_) {
    const int64_t n = std::min<int64_t>(head_group_, static_cast<int64_t>(tokens.size() - g));
    LS_CUDA_TRY(cudaMemcpyAsync(embed_tokens_.data(), tokens.data() + g, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                stream_));
    LS_RETURN_IF_ERROR(cuda::embed_rows(weights_.embedding.w.data(), facts_.vocab_size, static_cast<int>(D),
                                        embed_tokens_.data(), n, head_in_.data(), stream_));
    LS_RETURN_IF_ERROR(cuda::bf16_to_f32(head_in_.data(), n * D, head_f32_.data(), stream_));
    LS_CUDA_TRY(cudaMemcpyAsync(out.data() + g * D, head_f32_.data(), n * D * sizeof(float), cudaMemcpyDeviceToHost,
                                stream_));
    LS_CUDA_TRY(cudaStreamSynchronize(stream_));
  }
  return ok_status();
}

Status CudaTarget::head(std::span<const float> hidden, int rows, std::span<float> out) const {
  const int64_t D = facts_.hidden_size, V = facts_.vocab_size;
  LS_RETURN_IF_ERROR(check_head_args(rows, hidden.size(), out.size(), facts_));
  for (int64_t g = 0; g < rows; g += head_group_) {
    const int64_t n = std::min<int64_t>(head_group_, rows - g);
    LS_CUDA_TRY(cudaMemcpyAsync(head_f32_.data(), hidden.data() + g * D, n * D * sizeof(float),
                                cudaMemcpyHostToDevice, stream_));
    LS_RETURN_IF_ERROR(cuda::f32_to_bf16(head_f32_.data(), n * D, head_in_.data(), stream_));
    LS_RETURN_IF_ERROR(gemm_.gemm(head_in_.data(), n, weights_.head().view(), nullptr, logits_.data(), stream_));
    LS_CUDA_TRY(cudaMemcpyAsync(out.data() + g * V, logits_.data(), n * V * sizeof(float), cudaMemcpyDeviceToHost,
                                stream_));
    LS_CUDA_TRY(cudaStreamSynchronize(stream_));
  }
  return ok_status();
}

}  // namespace ls::lfm2
