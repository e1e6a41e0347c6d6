// The CUDA DSpark drafter: weight upload, per-stream device contexts, request validation, results back to the host.
#include "draft/dspark/cuda/cuda_drafter.h"

#include "draft/dspark/shared_steps.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <utility>

#include "compute/ops.h"

namespace ls::dspark::cuda {
namespace {

// The stream id the warm-up pass uses and releases (lanes never hand out this id).
// cuBLAS workspace set on the handle (graph capture needs one set; 32 MiB is cuBLAS's own default on Hopper).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// A host matrix as bf16 values (bf16 as stored; fp32-stored checkpoints are rounded: the device runs bf16).
std::vector<bf16_t> as_bf16(const compute::OwnedMatrix& matrix) {
  const size_t count = static_cast<size_t>(matrix.rows * matrix.cols);
  std::vector<bf16_t> values(count);
  const compute::Matrix view = matrix.view();
  for (size_t i = 0; i < count; ++i) {
    const bf16 value = view.b16 ? view.b16[i] : float_to_bf16(view.f32[i]);
    static_assert(sizeof(bf16) == sizeof(bf16_t));
    std::memcpy(static_cast<void*>(&values[i]), &value, sizeof(bf16));
  }
  return values;
}

Status upload_matrix(const DraftMatrix& host, const std::string& name, DeviceWeightMatrix& out, InitSteps& steps) {
  LS_CHECK(!host.quantized(), "the CUDA drafter is loaded from bf16 weights (int8 is refused before loading)");
  out.rows = host.rows;
  out.cols = host.cols;
  return out.values.upload(as_bf16(host.dense), name, steps);
}

// Matrices with the same column count stacked by rows, uploaded as one [sum of rows, cols] bf16 matrix.
Status upload_stacked(std::span<const DraftMatrix* const> parts, const std::string& name, DeviceWeightMatrix& out,
                      InitSteps& steps) {
  std::vector<bf16_t> values;
  out.rows = 0;
  out.cols = parts.front()->cols;
  for (const DraftMatrix* part : parts) {
    LS_CHECK(!part->quantized() && part->cols == out.cols, "stacked drafter matrices are bf16 with equal columns");
    const std::vector<bf16_t> rows = as_bf16(part->dense);
    values.insert(values.end(), rows.begin(), rows.end());
    out.rows += part->rows;
  }
  return out.values.upload(values, name, steps);
}

Status upload_floats(const std::vector<float>& host, const std::string& name, TrackedBuffer<float>& out,
                     InitSteps& steps) {
  return out.upload(host, name, steps);
}

}  // namespace

CudaDsparkDrafter::CudaDsparkDrafter(const DsparkConfig& config, const bf16_t* embedding,
                                     const DrafterOptions& options)
    : config_(config), options_(options), embedding_(embedding) {
  facts_.max_depth = config_.block_size;
  facts_.tap_layers = config_.target_layer_ids;
  facts_.stream_bytes_per_position = static_cast<int64_t>(config_.num_layers) * 2 * config_.kv_size() * 2;
  facts_.has_confidence = config_.has_confidence;
  facts_.restarts = true;
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) facts_.tap_device = device;
}

CudaDsparkDrafter::~CudaDsparkDrafter() {
  if (stream_.get()) cudaStreamSynchronize(stream_.get());
}

Result<std::unique_ptr<CudaDsparkDrafter>> CudaDsparkDrafter::create(const DsparkConfig& config,
                                                                     const DsparkWeights& host,
                                                                     const bf16_t* embedding,
                                                                     const DrafterOptions& options, InitSteps& steps) {
  LS_RETURN_IF_ERROR(steps.step("drafter device state"));
  std::unique_ptr<CudaDsparkDrafter> drafter(new CudaDsparkDrafter(config, embedding, options));
  CudaDsparkDrafter& d = *drafter;
  LS_RETURN_IF_ERROR(d.stream_.create());
  LS_RETURN_IF_ERROR(d.cublas_.create(d.stream_.get()));
  // After cublasSetStream (which resets the workspace): graphs on or off, every GEMM runs with this workspace.
  LS_RETURN_IF_ERROR(d.cublas_workspace_.allocate(kCublasWorkspaceBytes, "cublas workspace", steps));
  LS_RETURN_IF_ERROR(cublas_status(
      cublasSetWorkspace(d.cublas_.get(), d.cublas_workspace_.data(), kCublasWorkspaceBytes), "cublasSetWorkspace"));
  LS_RETURN_IF_ERROR(d.tuned_.create(d.cublas_workspace_.data(), kCublasWorkspaceBytes));
  LS_RETURN_IF_ERROR(d.prefetch_branch_.create());
  // The session-10 switches' A/B pins at load: "0" off, "1" on (LS_DRAFTER_HEAD_STAGE: 128 or 256).
  auto pin = [](const char* name, bool& value) {
    if (const char* text = std::getenv(name); text && *text) value = std::strcmp(text, "0") != 0;
  };
  pin("LS_DRAFTER_SHORT_HEAD", d.short_context_head_);
  pin("LS_DRAFTER_SAMPLED_SPLIT", d.sampled_split_);
  pin("LS_DRAFTER_KEYED_SCAN", d.keyed_scan_);
  if (const char* most = std::getenv("LS_DRAFTER_ROW_ATTENTION"); most && *most) {
    d.row_attention_requests_ = std::max(0, std::atoi(most));
  }
  if (const char* heads = std::getenv("LS_DRAFTER_ROW_GROUP"); heads && *heads) {
    d.set_row_group(std::max(0, std::atoi(heads)));
  }
  if (const char* stage = std::getenv("LS_DRAFTER_HEAD_STAGE"); stage && *stage) {
    d.head_stage_keys_ = std::strcmp(stage, "256") == 0 ? 256 : 128;
  }
  pin("LS_DRAFTER_SCAN_BROADCAST", d.scan_broadcast_);
  pin("LS_DRAFTER_SCAN_HELPERS", d.scan_confidence_helpers_);
  pin("LS_DRAFTER_ONE_GRAPH", d.one_graph_);
  pin("LS_DRAFTER_ABSORB_IN_PASS", d.absorb_in_pass_);
  if (const char* kind = std::getenv("LS_DRAFTER_INT8_SPLIT"); kind && *kind) {
    d.int8_splits_ = std::clamp(std::atoi(kind), 0, 2);
  }
  pin("LS_DRAFTER_INT8_X_L1", d.int8_x_l1_);
  if (const char* rows = std::getenv("LS_DRAFTER_INT8_ROWS"); rows && *rows) {
    d.int8_rows_ = std::max(0, std::atoi(rows));
  }
  if (const char* ns = std::getenv("LS_DRAFTER_SCAN_BACKOFF_NS"); ns && *ns) {
    d.scan_backoff_ns_ = std::max(0, std::atoi(ns));
  }
  if (const char* megabytes = std::getenv("LS_DRAFTER_L2_PREFETCH_MB"); megabytes && *megabytes) {
    d.l2_prefetch_bytes_ = std::max<int64_t>(0, std::atoll(megabytes)) << 20;
  }
  LS_RETURN_IF_ERROR(d.block_timer_.create());
  LS_RETURN_IF_ERROR(d.scan_timer_.create());
  DeviceDraftWeights& w = d.weights_;
  LS_RETURN_IF_ERROR(upload_matrix(host.fc, "fc.weight", w.fc, steps));
  LS_RETURN_IF_ERROR(upload_floats(host.hidden_norm, "hidden_norm.weight", w.hidden_norm, steps));
  w.layers.resize(config.num_layers);
  for (int index = 0; index < config.num_layers; ++index) {
    const DraftLayerWeights& from = host.layers[index];
    DeviceLayerWeights& to = w.layers[index];
    const std::string prefix = "layers." + std::to_string(index) + ".";
    LS_RETURN_IF_ERROR(upload_floats(from.input_norm, prefix + "input_layernorm", to.input_norm, steps));
    const DraftMatrix* qkv[] = {&from.q_proj, &from.k_proj, &from.v_proj};
    LS_RETURN_IF_ERROR(upload_stacked(qkv, prefix + "qkv_proj", to.qkv_proj, steps));
    LS_RETURN_IF_ERROR(upload_matrix(from.k_proj, prefix + "k_proj", to.k_proj, steps));
    LS_RETURN_IF_ERROR(upload_matrix(from.v_proj, prefix + "v_proj", to.v_proj, steps));
    LS_RETURN_IF_ERROR(upload_matrix(from.o_proj, prefix + "o_proj", to.o_proj, steps));
    LS_RETURN_IF_ERROR(upload_floats(from.q_norm, prefix + "q_norm", to.q_norm, steps));
    LS_RETURN_IF_ERROR(upload_floats(from.k_norm, prefix + "k_norm", to.k_norm, steps));
    LS_RETURN_IF_ERROR(upload_floats(from.post_norm, prefix + "post_attention_layernorm", to.post_norm, steps));
    const DraftMatrix* gate_up[] = {&from.gate_proj, &from.up_proj};
    LS_RETURN_IF_ERROR(upload_stacked(gate_up, prefix + "gate_up_proj", to.gate_up_proj, steps));
    LS_RETURN_IF_ERROR(upload_matrix(from.down_proj, prefix + "down_proj", to.down_proj, steps));
  }
  LS_RETURN_IF_ERROR(upload_floats(host.final_norm, "norm.weight", w.final_norm, steps));
  {
    std::vector<const DraftMatrix*> kv;
    std::vector<float> k_norms;
    for (const DraftLayerWeights& layer : host.layers) {
      kv.push_back(&layer.k_proj);
      kv.push_back(&layer.v_proj);
      k_norms.insert(k_norms.end(), layer.k_norm.begin(), layer.k_norm.end());
    }
    LS_RETURN_IF_ERROR(upload_stacked(kv, "context kv_proj (every layer)", w.context_kv_proj, steps));
    LS_RETURN_IF_ERROR(upload_floats(k_norms, "context k_norms (every layer)", w.context_k_norms, steps));
  }
  {
    DraftMatrix w1;
    w1.dense.f32 = host.markov_w1.f32;
    w1.dense.b16 = host.markov_w1.b16;
    w1.dense.rows = w1.rows = host.markov_w1.rows;
    w1.dense.cols = w1.cols = host.markov_w1.cols;
    DeviceWeightMatrix table;
    LS_RETURN_IF_ERROR(upload_matrix(w1, "markov_w1", table, steps));
    w.markov_w1 = std::move(table.values);
  }
  LS_RETURN_IF_ERROR(upload_matrix(host.markov_w2, "markov_w2", w.markov_w2, steps));
  if (config.has_confidence) {
    LS_RETURN_IF_ERROR(upload_floats(host.confidence_weight, "confidence_head.proj", w.confidence_weight, steps));
    w.confidence_bias = host.confidence_bias;
    if (!config.confidence_temperatures.empty()) {
      LS_RETURN_IF_ERROR(upload_floats(config.confidence_temperatures, "confidence temperatures",
                                       w.confidence_temperatures, steps));
    }
  }
  if (options.bits == 8) LS_RETURN_IF_ERROR(d.quantize_weights(steps));
  const compute::RopeTable rope = compute::make_rope_table(config.head_dim, config.rope_theta);
  LS_RETURN_IF_ERROR(upload_floats(rope.inv_freq, "rope inv_freq", w.inv_freq, steps));
  LS_RETURN_IF_ERROR(d.reserve_scratch(std::max(options.max_streams, 1), &steps));
  {
    // The persistent scan's plans (none where the shape or the device cannot take it) and their scratch.
    const ScanShape shape = d.scan_shape();
    d.scan_plans_[0] = persistent_scan_plan(shape, 1);
    d.scan_plans_[1] = persistent_scan_plan(shape, kPersistentScanGroup);
    int64_t partials = 0;
    for (const PersistentScanPlan& plan : d.scan_plans_) {
      // The counter handoff's 16-byte partials, or the flagged handoff's 8-byte words (one more slot's worth).
      partials = std::max<int64_t>(
          partials, static_cast<int64_t>(config.block_size + 1) * plan.group * (plan.grid + plan.helpers) + 1);
    }
    if (partials > 0) {
      LS_RETURN_IF_ERROR(d.scratch_.persistent_partials.allocate(static_cast<size_t>(partials),
                                                                 "persistent scan partials", steps));
      LS_RETURN_IF_ERROR(d.scratch_.scan_barrier.upload({0u, 0u}, "persistent scan barrier", steps));
    }
  }
  LS_RETURN_IF_ERROR(d.reserve_device_absorb(&steps));
  LS_RETURN_IF_ERROR(steps.step("warm-up"));
  LS_RETURN_IF_ERROR(d.warm_up());
  d.capture_bucket_graphs();  // every bucket's graphs (and the absorb's) now, so no timed round captures one
  return drafter;
}

Status CudaDsparkDrafter::quantize_weights(InitSteps& steps) {
  // The block pass's and the absorb's GEMMs that stream the most bytes, and the head U (the target's embedding).
  const cudaStream_t stream = stream_.get();
  DeviceDraftWeights& w = weights_;
  auto add = [&](const DeviceWeightMatrix& matrix, const std::string& name) {
    return int8_.add(matrix.values.data(), matrix.rows, matrix.cols, name, steps, stream);
  };
  LS_RETURN_IF_ERROR(add(w.fc, "fc.weight"));
  for (size_t index = 0; index < w.layers.size(); ++index) {
    const DeviceLayerWeights& layer = w.layers[index];
    const std::string prefix = "layers." + std::to_string(index) + ".";
    LS_RETURN_IF_ERROR(add(layer.qkv_proj, prefix + "qkv_proj"));
    LS_RETURN_IF_ERROR(add(layer.o_proj, prefix + "o_proj"));
    LS_RETURN_IF_ERROR(add(layer.gate_up_proj, prefix + "gate_up_proj"));
    LS_RETURN_IF_ERROR(add(layer.down_proj, prefix + "down_proj"));
  }
  LS_RETURN_IF_ERROR(add(w.context_kv_proj, "context kv_proj (every layer)"));
  LS_RETURN_IF_ERROR(int8_.add(embedding_, config_.vocab_size, config_.hidden_size, "head (the target's embedding)",
                               steps, stream));
  LS_RETURN_IF_ERROR(int8_.reserve_splits(steps));
  LS_CUDA_TRY(cudaStreamSynchronize(stream));
  return ok_status();
}

std::vector<Draft> CudaDsparkDrafter::draft(std::span<const DraftRequest> requests) {
  std::vector<Draft> results(requests.size());
  std::vector<size_t> chosen;  // indices of the requests that pass validation
  std::vector<DeviceBlockRequest> blocks;
  std::vector<DeviceScanRequest> scans;
  const int gamma = config_.block_size;
  int max_depth = 0;
  int64_t most_keys = 0;  // the longest request's keys (context rows + block): the attention's choice below 16
  for (size_t index = 0; index < requests.size(); ++index) {
    const DraftRequest& request = requests[index];
    auto found = streams_.find(request.stream);
    DeviceStreamContext* context = found == streams_.end() ? nullptr : found->second.get();
    const int64_t held = context ? context->length : 0;
    Status& status = results[index].status;
    status = check_draft_request(request, gamma, config_.vocab_size, context != nullptr, held);
    if (status.ok()) status = reserve_context(*context, context->rows() + gamma);
    if (!status.ok()) continue;
    chosen.push_back(index);
    most_keys = std::max(most_keys, context->rows() + gamma);
    blocks.push_back(
        DeviceBlockRequest{context->keys.data(), context->values.data(), context->rows(), context->capacity});
    DeviceScanRequest scan;
    scan.anchor = request.anchor_token;
    scan.depth = request.depth;
    scan.anchor_position = request.anchor_position;
    scan.temperature = request.sampling.temperature;
    scan.top_k = request.sampling.top_k;
    scan.top_p = request.sampling.top_p;
    scan.min_p = request.sampling.min_p;
    scan.seed = request.sampling.seed;
    const PlantedFaults& faults = options_.faults;
    if (faults.enabled && faults.stream == request.stream) {
      scan.nan_logit_slot = faults.nan_logit_slot;
      scan.inf_confidence_slot = faults.inf_confidence_slot;
      scan.out_of_range_pick_slot = faults.out_of_range_pick_slot;
    }
    scans.push_back(scan);
    max_depth = std::max(max_depth, request.depth);
  }
  last_rows_ = 0;
  if (chosen.empty()) return results;
  const int count = static_cast<int>(chosen.size());
  // The pass runs the count's bucket: padding requests (depth 0, each with its own block-long cache) fill it.
  const int padded = request_buckets_ ? request_bucket(count) : count;
  const bool grows = padded > scratch_.requests;
  Status status = reserve_scratch(padded, nullptr);
  if (!status.ok()) {
    for (size_t index : chosen) results[index].status = status;
    return results;
  }
  if (grows) capture_bucket_graphs();  // the new scratch dropped every graph
  {
    const int64_t pad_stride = static_cast<int64_t>(config_.num_layers) * gamma * config_.kv_size();
    for (int pad = 0; count + pad < padded; ++pad) {
      blocks.push_back(DeviceBlockRequest{scratch_.pad_keys.data() + pad * pad_stride,
                                          scratch_.pad_values.data() + pad * pad_stride, 0, gamma});
      DeviceScanRequest scan;
      scan.depth = 0;
      scans.push_back(scan);
    }
  }

  auto fail_all = [&](const Status& status) {
    for (size_t index : chosen) results[index].status = status;
    return results;
  };
  // Session 19: an absorb left for the next pass runs inside this pass's graph where it is of one request, else first.
  const bool absorb_here = absorb_pending() && padded == 1;
  if (absorb_here) {
    if (Status ready = ready_absorb_branch(); !ready.ok()) return fail_all(ready);
  } else if (Status flushed = flush_pending_absorb(); !flushed.ok()) {
    return fail_all(flushed);
  }
  // Block tokens [anchor, mask x (gamma-1)] per request and their absolute positions p_i + slot.
  std::vector<int32_t> tokens(static_cast<size_t>(padded) * gamma, config_.mask_token_id);
  std::vector<int32_t> positions(tokens.size());
  records_.assign(padded, DeviceScanRecord{});
  for (int i = 0; i < padded; ++i) {
    tokens[i * gamma] = scans[i].anchor;
    // Rows held may be fewer than the positions covered (a restart): the block sits at the anchor's positions.
    for (int slot = 0; slot < gamma; ++slot)
      positions[i * gamma + slot] = static_cast<int32_t>(scans[i].anchor_position + slot);
    records_[i].previous = scans[i].anchor;
  }
  const cudaStream_t stream = stream_.get();
  // The five inputs into pinned staging in the device layout, then one copy up to the end of the records used.
  const struct {
    const void* from;
    size_t bytes;
  } uploads[] = {{tokens.data(), tokens.size() * sizeof(int32_t)},
                 {positions.data(), positions.size() * sizeof(int32_t)},
                 {blocks.data(), blocks.size() * sizeof(DeviceBlockRequest)},
                 {scans.data(), scans.size() * sizeof(DeviceScanRequest)},
                 {records_.data(), records_.size() * sizeof(DeviceScanRecord)}};
  constexpr int kUploaded[5] = {DeviceBlockScratch::kTokens, DeviceBlockScratch::kPositions,
                                DeviceBlockScratch::kBlockRequests, DeviceBlockScratch::kScanRequests,
                                DeviceBlockScratch::kRecords};
  for (int part = 0; part < 5; ++part) {
    std::memcpy(staging_.data() + scratch_.offsets[kUploaded[part]], uploads[part].from, uploads[part].bytes);
  }
  // The absorb inside the pass: its sources, positions and row pointers in the upload too; its graphs are keyed by
  // its rows' bucket.
  const int absorb_bucket =
      absorb_here ? stage_absorb_pass(staging_.data() + scratch_.offsets[DeviceBlockScratch::kAbsorbPass]) : 0;
  const int key_first = absorb_here ? absorb_pass_first(padded, absorb_bucket) : padded;
  // The one upload up to the end of the records used.
  if (Status uploaded = upload_inputs(padded); !uploaded.ok()) return fail_all(uploaded);
  profile_.begin(stream);
  last_pass_requests_ = padded;
  long_context_ = most_keys > context_bound(padded);
  scan_all_greedy_ = std::all_of(scans.begin(), scans.end(), [](const DeviceScanRequest& scan) {
    return scan.temperature <= 0.0f;
  });
  const int64_t vocab = config_.vocab_size;
  scan_all_plain_ = std::all_of(scans.begin(), scans.end(), [&](const DeviceScanRequest& scan) {
    return scan.temperature <= 0.0f || plain_gumbel_draw(scan, vocab);
  });
  // The persistent scan reads each request's depth on the device: one graph for every depth.
  const int block_key = block_pass_key(padded, long_context_);
  const int scan_key = persistent_scan(padded, scan_all_greedy_) ? kPersistentScanKey
                       : keyed_scan(padded)                      ? kKeyedScanKey
                                                                 : max_depth;
  if (one_graph_pass(scan_key)) {
    // Session 16: both in one graph, timed as one.
    block_timer_.start(stream);
    status = run_shape({key_first, one_graph_key(block_key, scan_key)},
                       [&] { return one_graph_body(padded, absorb_bucket, max_depth); });
    block_timer_.stop(stream);
  } else {
    block_timer_.start(stream);
    status = run_shape({key_first, block_key}, [&] { return block_graph(padded, absorb_bucket); });
    block_timer_.stop(stream);
    if (status.ok()) {
      scan_timer_.start(stream);
      status = run_shape({padded, scan_key}, [&] { return scan_graph(padded, max_depth); });
      scan_timer_.stop(stream);
    }
  }
  if (absorb_here) absorb_pass_.clear();  // enqueued inside the pass (or failed with it)
  // The one copy back: every request's tokens, chances and failure flags.
  if (status.ok()) status = download_records(count);
  const Status synced = ls::cuda::cuda_status(cudaStreamSynchronize(stream), "draft pass");
  if (status.ok()) status = synced;
  if (status.ok()) {
    std::memcpy(records_.data(), staging_.data() + scratch_.offsets[DeviceBlockScratch::kRecords],
                count * sizeof(DeviceScanRecord));
  }
  if (!status.ok()) return fail_all(status);
  last_block_ms_ = block_timer_.elapsed_ms();
  last_scan_ms_ = one_graph_pass(scan_key) ? 0.0 : scan_timer_.elapsed_ms();
  last_rows_ = static_cast<int64_t>(count) * gamma;

  for (int i = 0; i < count; ++i) {
    const DeviceScanRecord& record = records_[i];
    const DraftRequest& request = requests[chosen[i]];
    Draft& draft = results[chosen[i]];
    const std::string where =
        " at draft slot " + std::to_string(record.failed_slot) + " of stream " + std::to_string(request.stream);
    switch (record.status) {
      case kScanOk:
        draft.tokens.assign(record.tokens, record.tokens + request.depth);
        draft.chances.assign(record.chances, record.chances + request.depth);
        continue;
      case kScanNonfiniteLogit:
        draft.status = Status(ErrorCode::DraftNonfinite, "non-finite draft logit" + where);
        break;
      case kScanBarrierTimeout:
        draft.status = Status(ErrorCode::DeviceError, "the persistent Markov scan's grid barrier timed out" + where);
        continue;
      case kScanNonfiniteConfidence:
        draft.status = Status(ErrorCode::DraftNonfinite, "non-finite draft confidence" + where);
        break;
      default:
        draft.status = Status(ErrorCode::DraftNonfinite, "draft pick " + std::to_string(record.failed_pick) +
                                                             " outside vocabulary " +
                                                             std::to_string(config_.vocab_size) + where);
        break;
    }
    ++nonfinite_drafts_;
  }
  return results;
}

Status CudaDsparkDrafter::warm_up() {
  return warm_up_drafter(*this, config_);
}

int64_t CudaDsparkDrafter::context_length(StreamId stream) const {
  auto found = streams_.find(stream);
  return found == streams_.end() ? 0 : found->second->length;
}

}  // namespace ls::dspark::cuda
