// CudaTarget: windows validated and staged in one upload, draws/taps/logits back in one sync (pools and load:
// cuda_target_load.cpp; stream bookkeeping, embed and head: cuda_target_streams.cpp).
#include "model/lfm2/cuda/cuda_target.h"

#include "model/shape_counts.h"
#include "model/window_checks.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_set>

#include "compute/cuda/row_gather_norm.h"

namespace ls::lfm2 {
namespace {

size_t align16(size_t bytes) { return (bytes + 15) & ~size_t{15}; }

}  // namespace

Status CudaTarget::check_windows(std::span<const Window> windows) const {
  // The kept conv inputs of a window live in the forward's scratch: every window is committed before the next one,
  // whichever streams the next forward touches.
  for (const auto& [id, state] : streams_)
    if (state.window_rows > 0)
      return Status(ErrorCode::InvalidArgument, "stream " + std::to_string(id) + " has an uncommitted window of " +
                                                    std::to_string(state.window_rows) + " rows");
  return ls::check_windows(
      windows, WindowLimits{facts_.vocab_size, config_.max_position, facts_.max_rows},
      [this](StreamId id) {
        const auto found = streams_.find(id);
        return found == streams_.end() ? int64_t{0} : found->second.committed;
      },
      [](StreamId) { return int64_t{0}; });
}

Result<Verified> CudaTarget::forward(std::span<const Window> windows) {
  LS_RETURN_IF_ERROR(check_windows(windows));
  const int64_t D = facts_.hidden_size, V = facts_.vocab_size, P = kv_shape_.page_size;
  const int64_t tap_count = static_cast<int64_t>(taps_.size());
  // A forward no window wants taps of copies none (its graph is plain's): dormant streams cost no tap copies. (Writing
  // the taps on the device in every forward, so a tap-only round replays the quiet rounds' graph, lost in lanes18's
  // batch A: every quiet forward of the nano pair cost 1-3 % more, 0.1942 against 0.1880 ms at 8 streams.)
  bool any_taps = false;
  for (const Window& window : windows) any_taps = any_taps || window.want_taps;
  tap_this_forward_ = tap_count > 0 && any_taps;
  // Room first (slots, pages), so a refusal changes nothing.
  int new_streams = 0;
  int64_t pages_needed = 0;
  for (const Window& window : windows) {
    const auto found = streams_.find(window.stream);
    const int64_t committed = found == streams_.end() ? 0 : found->second.committed;
    const int64_t held = found == streams_.end() ? 0 : static_cast<int64_t>(found->second.pages.size());
    new_streams += found == streams_.end();
    pages_needed += std::max<int64_t>(0, (committed + static_cast<int64_t>(window.tokens.size()) + P - 1) / P - held);
  }
  if (new_streams > static_cast<int>(free_slots_.size()))
    return Status(ErrorCode::OutOfMemory, "CUDA target: " + std::to_string(new_streams) + " new streams but only " +
                                              std::to_string(free_slots_.size()) + " of " +
                                              std::to_string(max_streams_) + " stream slots are free");
  if (pages_needed > static_cast<int64_t>(free_pages_.size()))
    return Status(ErrorCode::OutOfMemory, "CUDA target: the forward needs " + std::to_string(pages_needed) +
                                              " KV pages, " + std::to_string(free_pages_.size()) + " of " +
                                              std::to_string(kv_pages_) + " are free");
  std::vector<StreamState*> states;
  std::vector<int> fresh_slots;
  for (const Window& window : windows) {
    auto [it, inserted] = streams_.try_emplace(window.stream);
    if (inserted) {
      it->second.slot = free_slots_.back();
      free_slots_.pop_back();
      fresh_slots.push_back(it->second.slot);
    }
    StreamState& state = it->second;
    const int64_t need = (state.committed + static_cast<int64_t>(window.tokens.size()) + P - 1) / P;
    while (static_cast<int64_t>(state.pages.size()) < need) {
      state.pages.push_back(free_pages_.back());
      free_pages_.pop_back();
    }
    states.push_back(&state);
  }

  // Stage the metadata: tokens, positions, row -> window, windows, page lists, drawn rows and their draws, commits.
  Verified verified;
  verified.row_begin.push_back(0);
  bool any_logits = false;
  int64_t page_total = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    verified.row_begin.push_back(verified.row_begin.back() + static_cast<int64_t>(windows[w].tokens.size()));
    any_logits = any_logits || windows[w].want_logits;
    page_total += static_cast<int64_t>(states[w]->pages.size());
  }
  const int64_t rows = verified.row_begin.back();
  std::vector<int64_t> drawn_rows;
  std::vector<char> wants;
  for (size_t w = 0; w < windows.size(); ++w)
    for (int64_t r = windows[w].first_drawn_row; r < static_cast<int64_t>(windows[w].tokens.size()); ++r) {
      drawn_rows.push_back(verified.row_begin[w] + r);
      wants.push_back(windows[w].want_logits);
    }
  const int64_t drawn = static_cast<int64_t>(drawn_rows.size());
  Meta meta;
  size_t at = 0;
  auto region = [&](size_t& offset, size_t bytes) {
    offset = at;
    at += align16(bytes);
  };
  region(meta.tokens, rows * sizeof(int32_t));
  region(meta.positions, rows * sizeof(int64_t));
  region(meta.row_window, rows * sizeof(int32_t));
  region(meta.windows, windows.size() * sizeof(gpu::WindowInfo));
  region(meta.drawn, drawn * sizeof(int32_t));
  region(meta.draws, drawn * sizeof(cuda::RowDraw));
  region(meta.commits, pending_commits_.size() * sizeof(gpu::ConvCommit));
  // Page lists last, uploaded at full capacity: the upload (and a captured graph) does not depend on their length.
  region(meta.pages, size_t(kv_pages_) * sizeof(int32_t));
  meta.bytes = at;
  (void)page_total;
  if (meta.bytes > meta_capacity_)
    return Status(ErrorCode::Internal, "forward metadata of " + std::to_string(meta.bytes) + " bytes exceeds " +
                                           std::to_string(meta_capacity_));
  auto* tokens = reinterpret_cast<int32_t*>(meta_host_ + meta.tokens);
  auto* positions = reinterpret_cast<int64_t*>(meta_host_ + meta.positions);
  auto* row_window = reinterpret_cast<int32_t*>(meta_host_ + meta.row_window);
  auto* infos = reinterpret_cast<gpu::WindowInfo*>(meta_host_ + meta.windows);
  auto* page_list = reinterpret_cast<int32_t*>(meta_host_ + meta.pages);
  int32_t page_at = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const Window& window = windows[w];
    const StreamState& state = *states[w];
    const int64_t first = verified.row_begin[w];
    infos[w] = gpu::WindowInfo{static_cast<int32_t>(first), static_cast<int32_t>(window.tokens.size()),
                               state.committed, state.slot, page_at};
    std::memcpy(page_list + page_at, state.pages.data(), state.pages.size() * sizeof(int32_t));
    page_at += static_cast<int32_t>(state.pages.size());
    for (size_t r = 0; r < window.tokens.size(); ++r) {
      tokens[first + r] = window.tokens[r];
      positions[first + r] = state.committed + static_cast<int64_t>(r);
      row_window[first + r] = static_cast<int32_t>(w);
    }
  }
  auto* drawn_index = reinterpret_cast<int32_t*>(meta_host_ + meta.drawn);
  auto* row_draws = reinterpret_cast<cuda::RowDraw*>(meta_host_ + meta.draws);
  for (int64_t i = 0; i < drawn; ++i) {
    const int64_t row = drawn_rows[i];
    const size_t w = static_cast<size_t>(std::upper_bound(verified.row_begin.begin(), verified.row_begin.end(), row) -
                                         verified.row_begin.begin() - 1);
    const Sampling& s = windows[w].sampling;
    drawn_index[i] = static_cast<int32_t>(row);
    // The draw at position p is the keyed choice for the token at p + 1.
    row_draws[i] = cuda::RowDraw{s.temperature, s.top_k, s.top_p, s.min_p, s.seed, positions[row] + 1};
  }
  std::memcpy(meta_host_ + meta.commits, pending_commits_.data(), pending_commits_.size() * sizeof(gpu::ConvCommit));
  verified.draws.assign(rows, -1);
  if (any_logits) verified.logits.assign(rows * V, std::numeric_limits<float>::quiet_NaN());
  const int commit_count = static_cast<int>(pending_commits_.size());
  pending_commits_.clear();
  auto enqueue = [&]() { return enqueue_forward(rows, meta, commit_count, fresh_slots, drawn_rows, wants, verified); };
  // Steady-state forwards (no fresh stream, nothing that syncs inside) replay a CUDA graph of the same shape.
  // A shape is captured the second time it is seen (one-off shapes such as prompt chunks stay eager).
  const GraphKey key{rows, static_cast<int64_t>(windows.size()), drawn, commit_count,
                     tap_this_forward_ ? tap_count : 0};
  const bool graphable = graphs_enabled_ && fresh_slots.empty() && !any_logits && !expert_trace_ && !profiling_;
  if (graphable && (graphs_.count(key) > 0 || ++sightings_[key] >= 2)) {
    auto found = graphs_.find(key);
    if (found == graphs_.end()) {
      ++g_shape_captures;
      if (graphs_.size() >= kMaxGraphs) {
        clear_graphs();
        sightings_[key] = 2;
      }
      LS_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      const Status enqueued = enqueue();
      cudaGraph_t graph = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
      if (!enqueued.ok() || ended != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        LS_RETURN_IF_ERROR(enqueued);
        LS_CUDA_TRY(ended);
      }
      size_t nodes = 0;  // the kernel launches of the captured forward (benches: the boundaries of a step)
      if (cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess) {
        std::vector<cudaGraphNode_t> list(nodes);
        int kernels = 0;
        cudaGraphNodeType type;
        if (nodes > 0 && cudaGraphGetNodes(graph, list.data(), &nodes) == cudaSuccess)
          for (const cudaGraphNode_t node : list)
            kernels += cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel;
        last_graph_kernels_ = kernels;
      }
      cudaGraphExec_t exec = nullptr;
      const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      LS_CUDA_TRY(made);
      found = graphs_.emplace(key, exec).first;
    }
    LS_CUDA_TRY(cudaGraphLaunch(found->second, stream_));
  } else {
    g_shape_first_sightings += graphable;
    LS_RETURN_IF_ERROR(enqueue());
  }
  if (!tap_this_forward_) {
    verified.tap_row_begin.assign(windows.size() + 1, 0);
  } else if (taps_on_device_) {
    verified.device_taps = DeviceTaps{taps_dev_.data(), device_, rows, tap_count * D};
  } else {
    LS_RETURN_IF_ERROR(copy_taps(windows, verified));
  }
  LS_CUDA_TRY(cudaStreamSynchronize(stream_));
  LS_RETURN_IF_ERROR(collect_profile());
  for (int64_t i = 0; i < drawn; ++i) verified.draws[drawn_rows[i]] = draws_host_[i];
  if (!taps_on_device_ && tap_this_forward_) {
    verified.taps.resize(verified.tap_row_begin.back() * tap_count * D);
    for (size_t i = 0; i < verified.taps.size(); ++i) verified.taps[i] = bf16_to_float(taps_host_[i]);
  }
  for (size_t w = 0; w < windows.size(); ++w) {
    states[w]->window_rows = static_cast<int>(windows[w].tokens.size());
    states[w]->window_first_row = static_cast<int>(verified.row_begin[w]);
  }
  return verified;
}

Status CudaTarget::enqueue_forward(int64_t rows, const Meta& meta, int commit_count, const std::vector<int>& fresh_slots,
                                   const std::vector<int64_t>& drawn_rows, const std::vector<char>& wants,
                                   Verified& verified) {
  const int64_t D = facts_.hidden_size;
  const int64_t drawn = static_cast<int64_t>(drawn_rows.size());
  LS_RETURN_IF_ERROR(mark("start"));
  LS_CUDA_TRY(cudaMemcpyAsync(meta_dev_.data(), meta_host_, meta.bytes, cudaMemcpyHostToDevice, stream_));

  // Last forward's commits (they read its kept conv inputs), then fresh streams start from zero history.
  const int64_t history = int64_t{config_.conv_kernel - 1} * D * conv_layers_;
  LS_RETURN_IF_ERROR(gpu::commit_conv(device_at<gpu::ConvCommit>(meta.commits), commit_count, z_keep_.data(), max_rows_,
                                      static_cast<int>(D), config_.conv_kernel, conv_layers_, conv_history_.data(),
                                      stream_));
  for (int slot : fresh_slots)
    if (history > 0)
      LS_CUDA_TRY(cudaMemsetAsync(conv_history_.data() + slot * history, 0, history * sizeof(bf16), stream_));
  LS_RETURN_IF_ERROR(mark("upload + commits"));

  LS_RETURN_IF_ERROR(run_layers(rows, meta));
  LS_RETURN_IF_ERROR(draw(drawn, meta, drawn_rows, wants, verified));
  if (drawn > 0)
    LS_CUDA_TRY(cudaMemcpyAsync(draws_host_, draws_dev_.data(), drawn * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                stream_));
  LS_RETURN_IF_ERROR(mark("copies to host"));
  return ok_status();
}

bool CudaTarget::keep_taps_on_device(bool on) {
  if (on && cudaGetDevice(&device_) != cudaSuccess) return false;
  taps_on_device_ = on;
  return true;
}

Status CudaTarget::copy_taps(std::span<const Window> windows, Verified& verified) {
  // Only the windows that want taps, compacted in window order; adjacent windows go in one copy.
  const int64_t row_bytes = static_cast<int64_t>(taps_.size()) * facts_.hidden_size * sizeof(bf16);
  verified.tap_row_begin.assign(1, 0);
  int64_t run_first = -1, run_rows = 0;
  auto flush = [&]() -> Status {
    if (run_rows > 0 && row_bytes > 0) {
      const int64_t to_row = verified.tap_row_begin.back() - run_rows;
      LS_CUDA_TRY(cudaMemcpyAsync(reinterpret_cast<char*>(taps_host_) + to_row * row_bytes,
                                  reinterpret_cast<const char*>(taps_dev_.data()) + run_first * row_bytes,
                                  run_rows * row_bytes, cudaMemcpyDeviceToHost, stream_));
    }
    run_rows = 0;
    return ok_status();
  };
  for (size_t w = 0; w < windows.size(); ++w) {
    const int64_t rows = windows[w].want_taps ? static_cast<int64_t>(windows[w].tokens.size()) : 0;
    if (rows > 0 && (run_rows == 0 || run_first + run_rows != verified.row_begin[w])) {
      LS_RETURN_IF_ERROR(flush());
      run_first = verified.row_begin[w];
    }
    run_rows += rows;
    verified.tap_row_begin.push_back(verified.tap_row_begin.back() + rows);
  }
  return flush();
}

void CudaTarget::clear_graphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  sightings_.clear();
}

Status CudaTarget::draw(int64_t n, const Meta& meta, const std::vector<int64_t>& drawn_rows,
                        const std::vector<char>& wants, Verified& verified) {
  const int64_t D = facts_.hidden_size, V = facts_.vocab_size;
  std::vector<float> host_logits;
  for (int64_t g = 0; g < n; g += head_group_) {
    const int64_t count = std::min<int64_t>(head_group_, n - g);
    if (final_delta_ != nullptr) {  // the gather, the last residual add and the final norm in one launch
      LS_RETURN_IF_ERROR(cuda::gather_rms_norm(h_.data(), final_delta_, device_at<int32_t>(meta.drawn) + g, count,
                                               static_cast<int>(D), weights_.final_norm.data(), config_.norm_eps,
                                               head_normed_.data(), stream_));
    } else {
      LS_RETURN_IF_ERROR(gpu::gather_rows(h_.data(), device_at<int32_t>(meta.drawn) + g, count, static_cast<int>(D),
                                          1, head_in_.data(), stream_));
      LS_RETURN_IF_ERROR(cuda::rms_norm(head_in_.data(), count, static_cast<int>(D), weights_.final_norm.data(),
                                        config_.norm_eps, head_normed_.data(), stream_));
    }
    LS_RETURN_IF_ERROR(mark("elementwise"));
    LS_RETURN_IF_ERROR(gemm_.gemm(head_normed_.data(), count, weights_.head().view(), nullptr, logits_.data(), stream_));
    LS_RETURN_IF_ERROR(mark("head gemm"));
    LS_RETURN_IF_ERROR(cuda::draw_rows(logits_.data(), count, static_cast<int>(V), device_at<cuda::RowDraw>(meta.draws) + g,
                                       draws_dev_.data() + g, draw_scratch_, stream_));
    LS_RETURN_IF_ERROR(mark("draw"));
    if (std::find(wants.begin() + g, wants.begin() + g + count, 1) == wants.begin() + g + count) continue;
    // Logits asked for (tests, probes): copied group by group (an extra sync per group).
    host_logits.resize(count * V);
    LS_CUDA_TRY(cudaMemcpyAsync(host_logits.data(), logits_.data(), count * V * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
    LS_CUDA_TRY(cudaStreamSynchronize(stream_));
    for (int64_t i = 0; i < count; ++i)
      if (wants[g + i])
        std::memcpy(verified.logits.data() + drawn_rows[g + i] * V, host_logits.data() + i * V, sizeof(float) * V);
  }
  return ok_status();
}

Status CudaTarget::mark(const char* label) {
  if (!profiling_) return ok_status();
  cudaEvent_t event = nullptr;
  if (spare_events_.empty()) {
    LS_CUDA_TRY(cudaEventCreate(&event));
  } else {
    event = spare_events_.back();
    spare_events_.pop_back();
  }
  marks_.push_back({event, label});
  LS_CUDA_TRY(cudaEventRecord(event, stream_));
  return ok_status();
}

Status CudaTarget::collect_profile() {
  // The time between two marks belongs to the later mark's op kind.
  for (size_t i = 1; i < marks_.size(); ++i) {
    float ms = 0;
    LS_CUDA_TRY(cudaEventElapsedTime(&ms, marks_[i - 1].first, marks_[i].first));
    auto found = std::find_if(profile_.begin(), profile_.end(), [&](const auto& p) { return p.first == marks_[i].second; });
    if (found == profile_.end()) profile_.push_back({marks_[i].second, ms});
    else found->second += ms;
  }
  for (auto& [event, label] : marks_) spare_events_.push_back(event);
  marks_.clear();
  return ok_status();
}

}  // namespace ls::lfm2
