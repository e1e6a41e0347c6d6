// The DSpark drafter: absorb taps into per-stream context caches, draft blocks for all requests in one pass.
#include "draft/dspark/dspark_drafter.h"

#include "draft/dspark/shared_steps.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <utility>

#include "base/log.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/matmul_amx.h"
#include "draft/dspark/markov_scan.h"

namespace ls::dspark {
namespace {

// The stream id the warm-up pass uses and releases (lanes never hand out this id).

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The rows of the target's tied embedding E [V, d], read through Target::embed 256 at a time; `status` holds the first
// failed read.
class EmbeddingRows {
 public:
  EmbeddingRows(const Target& target, int64_t vocab, int64_t width)
      : target_(target), vocab_(vocab), width_(width), ids_(kChunk), rows_(static_cast<size_t>(kChunk * width)) {}
  void operator()(int64_t row, float* values) {
    const int64_t first = row / kChunk * kChunk;
    if (first != held_ && status.ok()) {
      const int64_t count = std::min(kChunk, vocab_ - first);
      for (int64_t i = 0; i < count; ++i) ids_[i] = static_cast<int32_t>(first + i);
      status = target_.embed(std::span<const int32_t>(ids_.data(), static_cast<size_t>(count)),
                             std::span<float>(rows_.data(), static_cast<size_t>(count * width_)));
      held_ = first;
    }
    std::copy_n(rows_.data() + (row - first) * width_, width_, values);
  }
  Status status;

 private:
  static constexpr int64_t kChunk = 256;
  const Target& target_;
  int64_t vocab_, width_;
  std::vector<int32_t> ids_;
  std::vector<float> rows_;
  int64_t held_ = -1;  // the first id whose row rows_ holds
};

// weights.head = the target's tied embedding E [V, d] quantized, so that with int8 weights the block's head runs on the
// int8 kernel too.
Status quantize_target_head(DsparkWeights& weights, const DsparkConfig& config, const Target& target,
                            InitSteps& steps) {
  EmbeddingRows embedding(target, config.vocab_size, config.hidden_size);
  LS_RETURN_IF_ERROR(quantize_draft_matrix(config.vocab_size, config.hidden_size, "head (the target's embedding)",
                                           weights.head, steps, std::ref(embedding)));
  return embedding.status;
}

// weights.head = a bf16 copy of the target's tied embedding E [V, d] in the drafter's layout, when the drafter's
// matrices take the B-tiles: the block's head (up to 7 rows a request) then runs on the tile unit instead of the
// target's panels. Left empty (the block keeps the target's head) when a value of E is not a bf16 value.
Status copy_target_head(DsparkWeights& weights, const DsparkConfig& config, const Target& target, InitSteps& steps) {
  const int64_t V = config.vocab_size, d = config.hidden_size;
  compute::OwnedMatrix& head = weights.head.dense;
  LS_RETURN_IF_ERROR(steps.allocate(head.b16, static_cast<size_t>(V * d), "head (the target's embedding, bf16)"));
  EmbeddingRows embedding(target, V, d);
  std::vector<float> values(static_cast<size_t>(d));
  bool exact = true;
  for (int64_t row = 0; row < V && exact; ++row) {
    embedding(row, values.data());
    for (int64_t col = 0; col < d; ++col) {
      head.b16[row * d + col] = float_to_bf16(values[col]);
      exact = exact && bf16_to_float(head.b16[row * d + col]) == values[col];
    }
  }
  LS_RETURN_IF_ERROR(embedding.status);
  if (!exact) {
    steps.drop(static_cast<int64_t>(head.b16.size() * sizeof(bf16)));
    std::vector<bf16>().swap(head.b16);
    return ok_status();
  }
  weights.head.rows = head.rows = V;
  weights.head.cols = head.cols = d;
  compute::pack_for_cpu(head, compute::PackedLayout::AmxTiles);
  return ok_status();
}

// The target's CPU pool when it has `threads` threads (more than one): the drafter runs on it instead of a pool of
// its own. Two pools on a 2-core host left three threads on two cores at every switch between forward and pass (each
// idle worker spins before it sleeps): in one process, 1-stream rounds (3-row verify, absorb, depth-7 pass)
// alternating between a drafter with its own pool and one sharing: 2.028 -> 1.972 ms median (load 1.5), and on a
// busy host 4.20 -> 4.09 ms, the fastest tenth 3.14 -> 2.06.
ThreadPool* shared_pool(const Target& target, int threads) {
  ThreadPool* pool = target.cpu_pool();
  return threads > 1 && pool != nullptr && pool->size() == threads ? pool : nullptr;
}

}  // namespace

DsparkDrafter::DsparkDrafter(DsparkConfig config, DsparkWeights weights, const Target& target,
                             const DrafterOptions& options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      target_(target),
      options_(options),
      pool_(options.threads > 1 && !shared_pool(target, options.threads) ? std::make_unique<ThreadPool>(options.threads)
                                                                          : nullptr),
      ops_{pool_ ? pool_.get() : shared_pool(target, options.threads), options.mode},
      rope_(compute::make_rope_table(config_.head_dim, config_.rope_theta)),
      cache_(config_.num_layers, config_.kv_size()) {
  facts_.max_depth = config_.block_size;
  facts_.tap_layers = config_.target_layer_ids;
  facts_.stream_bytes_per_position = cache_.bytes_per_position();
  facts_.has_confidence = config_.has_confidence;
  facts_.restarts = true;
}

Result<std::unique_ptr<DsparkDrafter>> DsparkDrafter::create(DsparkConfig config, DsparkWeights weights,
                                                             const Target& target, const DrafterOptions& asked,
                                                             InitSteps& steps) {
  DrafterOptions options = asked;
  options.bits = resolve_draft_bits(asked.bits, Device::Cpu, asked.mode);
  LS_RETURN_IF_ERROR(check_draft_bits(options.bits));
  LS_RETURN_IF_ERROR(check_draft_fits_target(config, target.facts()));
  // Only where the w8a8 kernel runs: elsewhere the int8 GEMM widens codes to fp32 and the bf16 head is faster.
  if (options.bits == 8 && compute::cpu_features().avx512_vnni)
    LS_RETURN_IF_ERROR(quantize_target_head(weights, config, target, steps));
  // Bf16 mode only: the head's rows are then bf16-exact, so they run on the tiles (fp32 rows read the row-major copy).
  if (options.bits == 0 && options.mode == compute::NumericMode::Bf16 && compute::drafter_amx())
    LS_RETURN_IF_ERROR(copy_target_head(weights, config, target, steps));
  pack_draft_weights(weights);  // the panels or B-tiles the kernels stream (no-op without AVX-512 and for int8)
  LS_RETURN_IF_ERROR(steps.step("drafter state"));
  std::unique_ptr<DsparkDrafter> drafter(new DsparkDrafter(std::move(config), std::move(weights), target, options));
  const int64_t rows = static_cast<int64_t>(std::max(options.max_streams, 1)) * drafter->config_.block_size;
  LS_RETURN_IF_ERROR(reserve_block_scratch(drafter->scratch_, drafter->config_, rows, &steps));
  LS_RETURN_IF_ERROR(steps.step("warm-up"));
  LS_RETURN_IF_ERROR(drafter->warm_up());
  return drafter;
}

Result<std::unique_ptr<DsparkDrafter>> DsparkDrafter::load(const std::string& directory, const Target& target,
                                                           const DrafterOptions& asked) {
  // Refusals first: bits (auto made 0 or 8 for this CPU), then the config against the target, then the manifest; no
  // weight is read before.
  DrafterOptions options = asked;
  options.bits = resolve_draft_bits(asked.bits, Device::Cpu, asked.mode);
  LS_RETURN_IF_ERROR(check_draft_bits(options.bits));
  LS_ASSIGN_OR_RETURN(DsparkConfig config, read_dspark_config(directory));
  LS_RETURN_IF_ERROR(check_draft_fits_target(config, target.facts()));
  InitSteps steps(options.fail_init_step);
  Result<DsparkWeights> weights = [&]() -> Result<DsparkWeights> {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<io::Checkpoint> checkpoint, io::Checkpoint::open(directory));
    return load_draft_weights(*checkpoint, config, options.bits, steps);
  }();
  if (!weights.ok()) return weights.status();
  const int64_t weight_bytes = weights->bytes();
  const int64_t loader_peak = steps.peak_bytes();
  LS_ASSIGN_OR_RETURN(std::unique_ptr<DsparkDrafter> drafter,
                      create(config, std::move(weights).value(), target, options, steps));
  drafter->loader_peak_bytes_ = loader_peak;
  const bool amx = options.bits == 0 && compute::cpu_features().avx512 && compute::drafter_amx();
  log_info("drafter: DSpark %d layers, block %d, markov rank %d, %s weights (%.1f MiB), loader peak %.1f MiB%s",
           config.num_layers, config.block_size, config.markov_rank,
           options.bits == 8 ? (asked.bits == 8 ? "int8 per-row (--drafter-bits 8)" : "int8 per-row (--drafter-bits auto)")
                             : (asked.bits == 0 ? "bf16 as stored (--drafter-bits 0)" : "bf16 as stored (--drafter-bits auto)"),
           weight_bytes / 1048576.0, loader_peak / 1048576.0,
           amx ? ", on AMX tiles (LS_CPU_DRAFTER_AMX=0 for the panels)" : "");
  return drafter;
}

Status DsparkDrafter::warm_up() {
  return warm_up_drafter(*this, config_);
}

Status DsparkDrafter::absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) {
  const int64_t width = static_cast<int64_t>(config_.tap_count()) * config_.hidden_size;
  if (rows < 0 || start < 0 || static_cast<int64_t>(taps.size()) != rows * width) {
    return Status(ErrorCode::InvalidArgument, "absorb of stream " + std::to_string(stream) + ": " +
                                                  std::to_string(rows) + " rows at " + std::to_string(start) +
                                                  " need " + std::to_string(rows * width) + " tap values, got " +
                                                  std::to_string(taps.size()));
  }
  StreamContext& context = cache_.open(stream);
  if (start > context.length || start < context.resumed_at) {
    return Status(ErrorCode::InvalidArgument, "absorb of stream " + std::to_string(stream) + " at position " +
                                                  std::to_string(start) + " would leave a gap or rewrite rows before a" +
                                                  " restart: the drafter holds " + std::to_string(context.length) +
                                                  " positions (restarted at " + std::to_string(context.resumed_at) +
                                                  ")");
  }
  // Room for the rows plus one block of scratch K/V after them.
  LS_RETURN_IF_ERROR(cache_.reserve(context, start - context.skipped + rows + config_.block_size));
  const ForwardContext forward{config_, weights_, ops_, rope_};
  project_context(forward, taps.data(), rows, start, context);
  context.length = start + rows;
  return ok_status();
}

Status DsparkDrafter::restart(StreamId stream, int64_t position) {
  StreamContext& context = cache_.open(stream);
  return restart_context(context, stream, position);
}

std::vector<Draft> DsparkDrafter::draft(std::span<const DraftRequest> requests) {
  std::vector<Draft> results(requests.size());
  std::vector<size_t> chosen;  // indices of the requests that pass validation
  std::vector<StreamContext*> contexts;
  std::vector<int32_t> anchors;
  for (size_t index = 0; index < requests.size(); ++index) {
    const DraftRequest& request = requests[index];
    StreamContext* context = cache_.find(request.stream);
    const int64_t held = context ? context->length : 0;
    Status& status = results[index].status;
    status = check_draft_request(request, config_.block_size, config_.vocab_size, context != nullptr, held);
    if (status.ok()) status = cache_.reserve(*context, held - context->skipped + config_.block_size);
    if (!status.ok()) continue;
    chosen.push_back(index);
    contexts.push_back(context);
    anchors.push_back(request.anchor_token);
  }
  last_rows_ = 0;
  if (chosen.empty()) return results;

  const int64_t rows = static_cast<int64_t>(chosen.size()) * config_.block_size;
  Status status = reserve_block_scratch(scratch_, config_, rows, nullptr);
  const ForwardContext forward{config_, weights_, ops_, rope_};
  const auto block_start = std::chrono::steady_clock::now();
  int deepest = 0;  // the head runs only up to the deepest request's slots
  std::vector<int> widths;  // each request's block slots under the short-block switch (empty: the trained width)
  for (size_t index : chosen) {
    deepest = std::max(deepest, requests[index].depth);
    if (short_block().on) widths.push_back(block_width(requests[index].depth, config_.block_size));
  }
  if (status.ok()) status = block_pass(forward, target_, contexts, anchors, scratch_, deepest, widths);
  last_block_ms_ = milliseconds_since(block_start);
  if (!status.ok()) {
    for (size_t index : chosen) results[index].status = status;
    return results;
  }
  last_rows_ = rows;

  std::vector<ScanRequest> scans(chosen.size());
  std::vector<Draft> scanned(chosen.size());
  const int64_t d = config_.hidden_size, V = config_.vocab_size, gamma = config_.block_size;
  for (size_t k = 0; k < chosen.size(); ++k) {
    const DraftRequest& request = requests[chosen[k]];
    scans[k] = ScanRequest{request.stream,
                           request.anchor_token,
                           request.anchor_position,
                           request.depth,
                           request.sampling,
                           scratch_.final_hidden.data() + k * gamma * d,
                           scratch_.logits.data() + k * gamma * V};
  }
  const auto scan_start = std::chrono::steady_clock::now();
  markov_scan(config_, weights_, ops_, scans, options_.faults, scanned);
  last_scan_ms_ = milliseconds_since(scan_start);
  for (size_t k = 0; k < chosen.size(); ++k) {
    if (scanned[k].status.code() == ErrorCode::DraftNonfinite) ++nonfinite_drafts_;
    results[chosen[k]] = std::move(scanned[k]);
  }
  return results;
}

int64_t DsparkDrafter::context_length(StreamId stream) {
  StreamContext* context = cache_.find(stream);
  return context ? context->length : 0;
}

std::span<const float> DsparkDrafter::last_final_hidden() const {
  return std::span<const float>(scratch_.final_hidden.data(), static_cast<size_t>(last_rows_ * config_.hidden_size));
}

std::span<const float> DsparkDrafter::last_base_logits() const {
  return std::span<const float>(scratch_.logits.data(), static_cast<size_t>(last_rows_) * config_.vocab_size);
}

}  // namespace ls::dspark
