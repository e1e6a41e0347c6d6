// CudaTarget at load: the device weights' target made, its pools sized once (no allocation after load), the taps'
// buffers.
#include "model/lfm2/cuda/cuda_target.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ls::lfm2 {
namespace {

constexpr int kHeadGroupRows = 256;  // drawn rows sent through the head together (bounds the logits buffer)

size_t align16(size_t bytes) { return (bytes + 15) & ~size_t{15}; }

}  // namespace

Result<std::unique_ptr<CudaTarget>> CudaTarget::create(io::ModelConfig config, const Weights& weights,
                                                       const LoadOptions& options) {
  LS_RETURN_IF_ERROR(cuda::require_device());
  if (options.mode != compute::NumericMode::Bf16)
    return Status(ErrorCode::InvalidArgument, "the CUDA target runs bf16 only; --mode fp32 is CPU-only");
  if (options.max_rows < 1 || options.max_streams < 1 || options.kv_page_size < 1 || options.kv_pages < 0)
    return Status(ErrorCode::InvalidArgument,
                  "CUDA target: max_rows " + std::to_string(options.max_rows) + ", max_streams " +
                      std::to_string(options.max_streams) + ", kv_page_size " + std::to_string(options.kv_page_size) +
                      " must be >= 1 and kv_pages " + std::to_string(options.kv_pages) + " >= 0");
  if (config.head_dim > 128 || config.hidden_size % 8 != 0)
    return Status(ErrorCode::InvalidArgument, "CUDA target: head_dim " + std::to_string(config.head_dim) +
                                                  " above 128 or hidden " + std::to_string(config.hidden_size) +
                                                  " not a multiple of 8");
  std::unique_ptr<CudaTarget> target(new CudaTarget());
  target->config_ = std::move(config);
  const io::ModelConfig& c = target->config_;
  target->facts_.vocab_size = c.vocab_size;
  target->facts_.hidden_size = c.hidden_size;
  target->facts_.num_layers = c.num_layers;
  target->facts_.max_rows = options.max_rows;
  target->facts_.exact_width = 1;
  target->facts_.eos_token_id = c.eos_token_id;
  for (io::LayerKind kind : c.layer_kinds) {
    const bool attention = kind == io::LayerKind::Attention;
    target->kv_slot_.push_back(attention ? target->attention_layers_++ : -1);
    target->conv_slot_.push_back(attention ? -1 : target->conv_layers_++);
  }
  LS_CUDA_TRY(cudaStreamCreateWithFlags(&target->stream_, cudaStreamNonBlocking));
  LS_ASSIGN_OR_RETURN(target->weights_, gpu::upload_weights(target->config_, weights));
  LS_RETURN_IF_ERROR(target->allocate(options));
  return target;
}

CudaTarget::~CudaTarget() {
  if (stream_) cudaStreamSynchronize(stream_);
  clear_graphs();
  for (auto& [event, label] : marks_) cudaEventDestroy(event);
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  if (meta_host_) cudaFreeHost(meta_host_);
  if (taps_host_) cudaFreeHost(taps_host_);
  if (draws_host_) cudaFreeHost(draws_host_);
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaTarget::allocate(const LoadOptions& options) {
  const io::ModelConfig& c = config_;
  const int64_t R = options.max_rows, D = c.hidden_size, V = c.vocab_size;
  const int64_t q_width = int64_t{c.num_heads} * c.head_dim, kv_width = int64_t{c.num_kv_heads} * c.head_dim;
  max_rows_ = R;
  max_streams_ = options.max_streams;
  head_group_ = static_cast<int>(std::min<int64_t>(R, kHeadGroupRows));
  kv_shape_ = gpu::KvShape{options.kv_page_size, c.num_heads, c.num_kv_heads, c.head_dim,
                           1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  // KV pages: every page holds page_size positions of every attention layer.
  const int64_t page_bytes = int64_t{attention_layers_} * 2 * options.kv_page_size * kv_width * sizeof(bf16);
  int64_t pages = options.kv_pages;
  if (pages == 0) {
    pages = int64_t{options.max_streams} * ((4096 + options.kv_page_size - 1) / options.kv_page_size);
    size_t free_bytes = 0, total_bytes = 0;
    LS_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (page_bytes > 0) pages = std::max<int64_t>(1, std::min<int64_t>(pages, free_bytes / 4 / page_bytes));
  }
  kv_pages_ = static_cast<int>(pages);
  facts_.kv_pages = kv_pages_;
  facts_.kv_page_size = options.kv_page_size;
  LS_RETURN_IF_ERROR(kv_pool_.allocate(static_cast<size_t>(std::max<int64_t>(1, pages * page_bytes / 2))));
  free_pages_.resize(kv_pages_);
  for (int i = 0; i < kv_pages_; ++i) free_pages_[i] = kv_pages_ - 1 - i;  // pop_back hands out page 0 first
  const int64_t history = int64_t{c.conv_kernel - 1} * D;
  LS_RETURN_IF_ERROR(conv_history_.allocate(std::max<int64_t>(1, int64_t{max_streams_} * conv_layers_ * history)));
  for (int i = max_streams_ - 1; i >= 0; --i) free_slots_.push_back(i);

  int64_t dense_ffn = 0;
  for (int l = 0; l < c.num_layers; ++l)
    if (!c.is_moe_layer(l)) dense_ffn = c.ffn_size;
  LS_RETURN_IF_ERROR(h_.allocate(R * D));
  LS_RETURN_IF_ERROR(h_alt_.allocate(std::min<int64_t>(R, 16) * D));
  LS_RETURN_IF_ERROR(u_.allocate(R * D));
  LS_RETURN_IF_ERROR(mix_.allocate(R * D));
  LS_RETURN_IF_ERROR(wide_.allocate(R * std::max<int64_t>(3 * D, 2 * dense_ffn)));
  LS_RETURN_IF_ERROR(act_.allocate(R * std::max<int64_t>(D, dense_ffn)));
  if (attention_layers_ > 0) {
    LS_RETURN_IF_ERROR(q_raw_.allocate(R * q_width));
    LS_RETURN_IF_ERROR(q_.allocate(R * q_width));
    LS_RETURN_IF_ERROR(attn_.allocate(R * q_width));
    // split decode attention: up to 64 rows x 64 chunks of keys (more rows or chunks walk unsplit, same bits)
    LS_RETURN_IF_ERROR(attn_states_.allocate(gpu::attention_scratch_floats(kv_shape_, std::min<int64_t>(R, 64), 64)));
    LS_RETURN_IF_ERROR(k_raw_.allocate(R * kv_width));
    LS_RETURN_IF_ERROR(k_.allocate(R * kv_width));
    LS_RETURN_IF_ERROR(v_.allocate(R * kv_width));
  }
  LS_RETURN_IF_ERROR(z_keep_.allocate(std::max<int64_t>(1, int64_t{conv_layers_} * R * D)));
  if (c.moe) {
    const int64_t E = c.moe->num_experts, k = c.moe->experts_per_token, I = c.moe->expert_ffn_size, S = R * k;
    LS_RETURN_IF_ERROR(router_logits_.allocate(R * E));
    LS_RETURN_IF_ERROR(chosen_.allocate(S));
    LS_RETURN_IF_ERROR(route_weights_.allocate(S));
    LS_RETURN_IF_ERROR(expert_offsets_.allocate(E + 1));
    LS_RETURN_IF_ERROR(expert_order_.allocate(S));
    LS_RETURN_IF_ERROR(expert_in_.allocate(S * D));
    LS_RETURN_IF_ERROR(expert_gate_up_.allocate(S * 2 * I));
    LS_RETURN_IF_ERROR(expert_act_.allocate(S * I));
    LS_RETURN_IF_ERROR(expert_out_.allocate(S * D));
    LS_RETURN_IF_ERROR(slots_.allocate(S * D));
    // the combine in the streamed down launch: its tickets start at zero and every launch leaves them at zero
    LS_RETURN_IF_ERROR(moe_tickets_.allocate(gpu::expert_combine_tickets(D)));
    LS_CUDA_TRY(cudaMemset(moe_tickets_.data(), 0, moe_tickets_.bytes()));
  }
  const int64_t G = head_group_;
  LS_RETURN_IF_ERROR(head_in_.allocate(G * D));
  LS_RETURN_IF_ERROR(head_normed_.allocate(G * D));
  LS_RETURN_IF_ERROR(head_f32_.allocate(G * D));
  LS_RETURN_IF_ERROR(logits_.allocate(G * V));
  LS_RETURN_IF_ERROR(draws_dev_.allocate(R));
  LS_RETURN_IF_ERROR(embed_tokens_.allocate(G));
  LS_RETURN_IF_ERROR(draw_scratch_.reserve(G, static_cast<int>(V)));
  meta_capacity_ = align16(R * sizeof(int32_t)) + align16(R * sizeof(int64_t)) + align16(R * sizeof(int32_t)) +
                   align16(R * sizeof(gpu::WindowInfo)) + align16(size_t(kv_pages_) * sizeof(int32_t)) +
                   align16(R * sizeof(int32_t)) + align16(R * sizeof(cuda::RowDraw)) +
                   align16(size_t(max_streams_) * sizeof(gpu::ConvCommit)) + 256;
  LS_RETURN_IF_ERROR(meta_dev_.allocate(meta_capacity_));
  LS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&meta_host_), meta_capacity_, cudaHostAllocDefault));
  LS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&draws_host_), R * sizeof(int32_t), cudaHostAllocDefault));
  return ok_status();
}

Status CudaTarget::set_taps(std::span<const int> layers) {
  for (int layer : layers)
    if (layer < 0 || layer >= facts_.num_layers)
      return Status(ErrorCode::InvalidArgument, "tap layer " + std::to_string(layer) + " is outside the model's " +
                                                    std::to_string(facts_.num_layers) + " layers");
  // The same layers again (a lanes made anew over this target, e.g. one per benchmark run): the buffers and the
  // graphs that copy into them stay (clearing them made every drafted run capture every shape again, plain's too).
  const bool buffers_held = taps_.empty() || taps_host_ != nullptr;
  if (buffers_held && std::equal(layers.begin(), layers.end(), taps_.begin(), taps_.end())) return ok_status();
  taps_.assign(layers.begin(), layers.end());
  clear_graphs();  // captured graphs copy taps into the old buffers
  const size_t count = static_cast<size_t>(max_rows_) * taps_.size() * facts_.hidden_size;
  LS_RETURN_IF_ERROR(taps_dev_.allocate(count));
  if (taps_host_) cudaFreeHost(taps_host_);
  taps_host_ = nullptr;
  if (count > 0) LS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&taps_host_), count * sizeof(bf16), 0));
  return ok_status();
}

}  // namespace ls::lfm2
