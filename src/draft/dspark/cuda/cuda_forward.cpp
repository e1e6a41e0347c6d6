// The CUDA drafter's forward (reference/dspark.md §2.4-2.9): the block pass and the Markov scan; GEMMs via cuBLAS.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/log.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/dspark/cuda/scan_pick.h"

namespace ls::dspark::cuda {
Status CudaDsparkDrafter::gemm(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t w_rows, int64_t w_cols, void* y,
                               bool y_f32, int64_t ldy, bool skinny) {
  if (rows == 0) return ok_status();
  const cudaStream_t stream = launch_stream();  // the drafter's stream, or the absorb branch (set_absorb_in_pass)
  if (const Int8Weights* codes = int8_for(w, rows, w_rows, w_cols)) {
    const Int8Epilogue epilogue = y_f32 ? Int8Epilogue::F32 : Int8Epilogue::Bf16;
    Int8Gemm args{x, static_cast<int>(rows), *codes, y, ldy, epilogue, {}, false};
    return launch_int8(args, stream);
  }
  if (skinny && (skinny_parts_ & kSkinnyPlain) && !engine_gemms_ &&
      skinny_gemm_supported(rows, w_cols)) {
    const SkinnyGemm args{x, static_cast<int>(rows), w_cols, w, w_rows, y, ldy,
                          y_f32 ? SkinnyEpilogue::F32 : SkinnyEpilogue::Bf16};
    return skinny_gemm(args, programmatic_, stream);
  }
  if (engine_gemms_ && rows <= 16 && ldy == w_rows && w_cols % 8 == 0) {
    static_assert(sizeof(bf16) == sizeof(bf16_t));
    const ls::cuda::DeviceMatrix matrix{reinterpret_cast<const bf16*>(w), nullptr, w_rows, w_cols};
    return engine_.gemm(reinterpret_cast<const bf16*>(x), rows, matrix,
                        y_f32 ? nullptr : static_cast<bf16*>(y), y_f32 ? static_cast<float*>(y) : nullptr,
                        stream);
  }
  if (tuned_gemms_ && tuned_.ready() &&
      tuned_.gemm(x, rows, w, w_rows, w_cols, y, y_f32, ldy, stream).ok()) {
    return ok_status();
  }
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major y [rows, N] = x [rows, K] W^T is column-major y^T [N, rows] = W [N, K] (as K x N, transposed) x^T.
  return cublas_status(
      cublasGemmEx(cublas_override_ ? cublas_override_ : cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N,
                   static_cast<int>(w_rows), static_cast<int>(rows),
                   static_cast<int>(w_cols), &alpha, w, CUDA_R_16BF, static_cast<int>(w_cols), x, CUDA_R_16BF,
                   static_cast<int>(w_cols), &beta, y, y_f32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(ldy),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

Status CudaDsparkDrafter::launch_int8(Int8Gemm& args, cudaStream_t stream) {
  args.planted_scale = int8_planted_;
  if (int8_splits_ > 0 && int8_.splits_ready() && int8_gemm_shape(args).m_tiles == 1) {
    args.shape = int8_.split_shape(int8_splits_, stream != stream_.get());
  }
  args.shape.x_l1 = int8_x_l1_;
  ++int8_gemms_;
  return int8_gemm(args, programmatic_, stream);
}

Status CudaDsparkDrafter::gemm_swiglu(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t ff, int64_t d,
                                      bf16_t* stacked, bf16_t* y) {
  if (rows == 0) return ok_status();
  if (const Int8Weights* codes = int8_for(w, rows, 2 * ff, d)) {
    Int8Gemm args{x, static_cast<int>(rows), *codes, y, ff, Int8Epilogue::Swiglu, {}, false};
    return launch_int8(args, stream_.get());
  }
  if ((skinny_parts_ & kSkinnySwiglu) && !engine_gemms_ && skinny_gemm_supported(rows, d)) {
    const SkinnyGemm args{x, static_cast<int>(rows), d, w, 2 * ff, y, ff, SkinnyEpilogue::Swiglu};
    return skinny_gemm(args, programmatic_, stream_.get());
  }
  LS_RETURN_IF_ERROR(gemm(x, rows, w, 2 * ff, d, stacked, false, 2 * ff));
  return swiglu_stacked(stacked, rows, ff, y, stream_.get());
}

Status CudaDsparkDrafter::gemm_residual_norm(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t d, int64_t k,
                                             bf16_t* projected, bf16_t* hidden, const float* weight, bf16_t* normed) {
  if (rows == 0) return ok_status();
  if (int8_for(w, rows, d, k) != nullptr) {
    LS_RETURN_IF_ERROR(gemm(x, rows, w, d, k, projected, false, d, false));  // the int8 copy (set_int8_rows)
  } else if ((skinny_parts_ & kSkinnyThenNorm) && !engine_gemms_ && skinny_gemm_supported(rows, k)) {
    const SkinnyGemm args{x, static_cast<int>(rows), k, w, d, projected, d, SkinnyEpilogue::Bf16};
    LS_RETURN_IF_ERROR(skinny_gemm(args, programmatic_, stream_.get()));
  } else {
    LS_RETURN_IF_ERROR(gemm(x, rows, w, d, k, projected, false, d, false));
  }
  return residual_norm(hidden, projected, rows, d, weight, config_.norm_eps, normed, stream_.get(), false,
                       batched_loads_);
}

BlockAttentionKernel CudaDsparkDrafter::attention_kernel(int count) const {
  const DsparkConfig& c = config_;
  const AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 0.0f};
  if (attention_pin_) return *attention_pin_;
  const BlockAttentionKernel automatic = choose_block_attention(count, c.block_size, dims);
  if (count <= row_attention_requests_ && !long_context_ && automatic == BlockAttentionKernel::Split &&
      block_attention_row_supported(c.block_size, dims)) {
    return BlockAttentionKernel::Row;  // session 12's switch: every step short (the split's bits)
  }
  // The head kernel from kHeadAttentionRequests up (the split's bits). Batch s9B, graphed block pass at depth 9,
  // one-launch split -> head: 16 streams 0.662 -> 0.552 ms at context 128, 1.114 -> 0.859 at 512, 2.862 -> 2.726 at
  // 2000; 64 streams 1.894 -> 1.641 at 128. Below that it loses at long contexts (one CTA per head does every key):
  // 1 stream 0.434 -> 0.468 at 512 and 0.523 -> 1.021 at 2000, 4 streams 1.000 -> 1.081 at 2000 (it wins at 128:
  // 0.423 -> 0.378 at 1 stream, 0.457 -> 0.402 at 4), and a graph cannot choose by context.
  // Fewer requests take it while every request's keys are few (session 10; the graph is keyed by long_context_).
  const bool head_pays = count >= kHeadAttentionRequests || (short_context_head_ && !long_context_);
  if (head_pays && automatic == BlockAttentionKernel::Split && block_attention_head_supported(c.block_size, dims)) {
    return BlockAttentionKernel::Head;
  }
  // The split in one cooperative launch wherever its grid is resident at once (the same bits; block pass at 1 stream
  // 0.481 vs 0.488 ms in batch s7A, 0.484 vs 0.491 in s7B).
  const bool fits =
      static_cast<size_t>(count) < cooperative_attention_fits_.size() && cooperative_attention_fits_[count];
  return automatic == BlockAttentionKernel::Split && fits ? BlockAttentionKernel::Cooperative : automatic;
}

Status CudaDsparkDrafter::attend(int count, const AttentionDims& dims, int layer) {
  DeviceBlockScratch& s = scratch_;
  const int gamma = config_.block_size;
  switch (attention_kernel(count)) {
    case BlockAttentionKernel::Head:
      if (block_attention_head_supported(gamma, dims)) {
        return block_attention_head(s.queries.data(), s.block_requests.data(), count, gamma, dims, layer,
                                    attention_chunks_, s.attended.data(), stream_.get(), head_stage_keys_);
      }
      break;  // the warp kernel takes every shape
    case BlockAttentionKernel::Row:
      if (row_group_heads_ > 1 && block_attention_row_group_supported(gamma, dims, row_group_heads_)) {
        return block_attention_row_group(s.queries.data(), s.block_requests.data(), count, gamma, dims, layer,
                                         attention_chunks_, row_group_heads_, s.attended.data(), stream_.get(),
                                         row_group_planted_);
      }
      if (block_attention_row_supported(gamma, dims)) {
        return block_attention_row(s.queries.data(), s.block_requests.data(), count, gamma, dims, layer,
                                   attention_chunks_, s.attended.data(), stream_.get());
      }
      break;  // the warp kernel takes every shape
    case BlockAttentionKernel::Tile:
      return block_attention_tile(s.queries.data(), s.block_requests.data(), count, gamma, dims, layer,
                                  s.attended.data(), stream_.get());
    case BlockAttentionKernel::Cooperative:
      if (s.attention_barriers.size() > 0 && static_cast<size_t>(count) < cooperative_attention_fits_.size() &&
          cooperative_attention_fits_[count]) {
        SplitAttentionScratch scratch{s.attention_stats.data(), s.attention_partials.data(), nullptr,
                                      attention_chunks_, s.attention_barriers.data()};
        scratch.batched_loads = batched_loads_;
        return block_attention_cooperative(s.queries.data(), s.block_requests.data(), count, gamma, dims, layer,
                                           scratch, s.attended.data(), stream_.get());
      }
      [[fallthrough]];  // not every CTA of this grid fits at once here: the three launches
    case BlockAttentionKernel::Split: {
      SplitAttentionScratch scratch{s.attention_stats.data(), s.attention_partials.data(), nullptr, attention_chunks_};
      scratch.batched_loads = batched_loads_;
      return block_attention_split(s.queries.data(), s.block_requests.data(), count, gamma, dims, layer, scratch,
                                   s.attended.data(), stream_.get());
    }
    case BlockAttentionKernel::Warp:
      break;
  }
  return block_attention_warp(s.queries.data(), s.block_requests.data(), count, gamma, dims, layer,
                              s.attended.data(), stream_.get());
}

Status CudaDsparkDrafter::block_pass(int count) {
  if (!fused_block_) return block_pass_unfused(count);
  const DsparkConfig& c = config_;
  DeviceBlockScratch& s = scratch_;
  const cudaStream_t stream = stream_.get();
  const int gamma = c.block_size;
  const int64_t rows = static_cast<int64_t>(count) * gamma;
  const int64_t d = c.hidden_size, q = c.q_size(), kv = c.kv_size(), ff = c.ffn_size, V = c.vocab_size;
  const AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  bool prefetching = false;  // a weight prefetch forked onto the side branch (joined before the head)
  // X0 = E[tokens]; u = input_layernorm(X0).
  LS_RETURN_IF_ERROR(embed_tokens(embedding_, s.tokens.data(), rows, d, s.hidden.data(), stream));
  mark("embed");
  LS_RETURN_IF_ERROR(residual_norm(s.hidden.data(), nullptr, rows, d, weights_.layers[0].input_norm.data(),
                                   c.norm_eps, s.normed.data(), stream, false, batched_loads_));
  mark("norms");
  for (int index = 0; index < c.num_layers; ++index) {
    const DeviceLayerWeights& layer = weights_.layers[index];
    // [q | k | v] = u [q_proj; k_proj; v_proj]^T in one GEMM (into the gate/up buffer, free until the FFN); the
    // heads kernel norms and rotates q and k, writes the block K/V into each cache after its context.
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.qkv_proj.values.data(), q + 2 * kv, d, s.up.data(), false,
                            q + 2 * kv));
    mark("q/k/v/o GEMMs");
    QkvHeads heads;
    heads.qkv = s.up.data();
    heads.rows = rows;
    heads.gamma = gamma;
    heads.heads = c.num_heads;
    heads.kv_heads = c.num_kv_heads;
    heads.head_dim = c.head_dim;
    heads.q_norm = layer.q_norm.data();
    heads.k_norm = layer.k_norm.data();
    heads.eps = c.norm_eps;
    heads.positions = s.positions.data();
    heads.inv_freq = weights_.inv_freq.data();
    heads.neox = neox(c);
    heads.requests = s.block_requests.data();
    heads.layer = index;
    heads.queries = s.queries.data();
    heads.batched = batched_loads_;
    LS_RETURN_IF_ERROR(qkv_heads(heads, stream));
    mark("q/k norm + RoPE");
    LS_ASSIGN_OR_RETURN(const bool forked, prefetch_layer_weights(count, index));
    prefetching = prefetching || forked;
    if (absorb_pass_.open) {
      // The absorb inside the pass (set_absorb_in_pass) has written the context rows this attention reads.
      absorb_pass_.open = false;
      LS_RETURN_IF_ERROR(absorb_pass_.branch.join(stream));
    }
    LS_RETURN_IF_ERROR(attend(count, dims, index));
    mark("attention");
    // X += o; v = post_attention_layernorm(X); X += down(silu(gate v) * up v) with gate/up as one GEMM.
    LS_RETURN_IF_ERROR(gemm_residual_norm(s.attended.data(), rows, layer.o_proj.values.data(), d, q,
                                          s.projected.data(), s.hidden.data(), layer.post_norm.data(),
                                          s.normed.data()));
    mark("o GEMM + residual norm");
    LS_RETURN_IF_ERROR(gemm_swiglu(s.normed.data(), rows, layer.gate_up_proj.values.data(), ff, d, s.up.data(),
                                   s.gate.data()));
    mark("gate/up GEMM + SwiGLU");
    // down, the residual, then the next layer's input norm (or the final norm: Hf).
    const bool last = index + 1 == c.num_layers;
    LS_RETURN_IF_ERROR(gemm_residual_norm(
        s.gate.data(), rows, layer.down_proj.values.data(), d, ff, s.projected.data(), s.hidden.data(),
        last ? weights_.final_norm.data() : weights_.layers[index + 1].input_norm.data(),
        last ? s.final_hidden.data() : s.normed.data()));
    mark("down GEMM + residual norm");
  }
  // The prefetches rejoin before the head (a capture must end on the main stream; they are long done by now).
  if (prefetching) LS_RETURN_IF_ERROR(prefetch_branch_.join(stream));
  // U = Hf @ E^T through the target's tied embedding, fp32.
  LS_RETURN_IF_ERROR(gemm(s.final_hidden.data(), rows, embedding_, V, d, s.base_logits.data(), true, V));
  mark("head GEMM (U)");
  return ok_status();
}

Result<bool> CudaDsparkDrafter::prefetch_layer_weights(int count, int layer) {
  // One request only: batch s10B's rounds, block pass at 40 MiB: 1 stream 0.4267 -> 0.4189 ms, but 4 streams (head
  // attention) 0.4346 -> 0.4563 and 16 streams 0.6520 -> 0.7053 (the prefetch then competes with the attention).
  if (count != 1 || l2_prefetch_bytes_ <= 0 || !prefetch_branch_.ready()) return false;
  const DeviceLayerWeights& w = weights_.layers[layer];
  // In the order the pass reads them after the attention: all of o_proj, then shares of gate_up and down_proj in
  // eighths of their rows, as far as the budget goes.
  int64_t budget = l2_prefetch_bytes_;
  std::vector<L2PrefetchSpan> spans;
  for (const DeviceWeightMatrix* matrix : {&w.o_proj, &w.gate_up_proj, &w.down_proj}) {
    // The int8 copy where the pass's GEMMs take it (set_int8_rows), else the bf16 weights.
    const Int8Weights* codes =
        int8_for(matrix->values.data(), static_cast<int64_t>(count) * config_.block_size, matrix->rows, matrix->cols);
    const int64_t row_bytes = matrix->cols * static_cast<int64_t>(codes ? 1 : sizeof(bf16_t));
    const int64_t bytes = matrix->rows * row_bytes;
    const int eighths = static_cast<int>(std::min<int64_t>(8, bytes > 0 ? budget * 8 / bytes : 0));
    if (eighths <= 0) break;
    const void* base = codes ? static_cast<const void*>(codes->codes) : matrix->values.data();
    spans.push_back(L2PrefetchSpan{base, matrix->rows, row_bytes, eighths});
    budget -= bytes * eighths / 8;
  }
  if (spans.empty()) return false;
  const cudaStream_t side = prefetch_branch_.fork(stream_.get());
  if (side == nullptr) return false;  // no fork: the pass runs without its prefetch (the same bits)
  LS_RETURN_IF_ERROR(prefetch_l2_spans(spans, l2_prefetch_planted_, side));
  return true;
}

// The unfused sequence (17 launches a layer), kept as the fused pass's reference.
Status CudaDsparkDrafter::block_pass_unfused(int count) {
  const DsparkConfig& c = config_;
  DeviceBlockScratch& s = scratch_;
  const cudaStream_t stream = stream_.get();
  const int gamma = c.block_size;
  const int64_t rows = static_cast<int64_t>(count) * gamma;
  const int64_t d = c.hidden_size, q = c.q_size(), kv = c.kv_size(), ff = c.ffn_size, V = c.vocab_size;
  const AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  // X0 = E[tokens] from the target's shared embedding.
  LS_RETURN_IF_ERROR(embed_tokens(embedding_, s.tokens.data(), rows, d, s.hidden.data(), stream));
  mark("embed");
  for (int index = 0; index < c.num_layers; ++index) {
    const DeviceLayerWeights& layer = weights_.layers[index];
    // Attention block: u = input_layernorm(X); Q = RoPE(q_norm(q_proj u)); K, V as the context's.
    LS_RETURN_IF_ERROR(rms_norm(s.hidden.data(), rows, d, layer.input_norm.data(), c.norm_eps, s.normed.data(), stream));
    mark("norms");
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.qkv_proj.values.data(), q, d, s.queries.data(), false, q));
    mark("q/k/v/o GEMMs");
    LS_RETURN_IF_ERROR(rms_norm(s.queries.data(), rows * c.num_heads, c.head_dim, layer.q_norm.data(), c.norm_eps,
                                s.queries.data(), stream));
    LS_RETURN_IF_ERROR(rope_rotate(s.queries.data(), rows, c.num_heads, c.head_dim, s.positions.data(), 0,
                                   weights_.inv_freq.data(), neox(c), stream));
    mark("q/k norm + RoPE");
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.k_proj.values.data(), kv, d, s.keys.data(), false, kv));
    mark("q/k/v/o GEMMs");
    LS_RETURN_IF_ERROR(rms_norm(s.keys.data(), rows * c.num_kv_heads, c.head_dim, layer.k_norm.data(), c.norm_eps,
                                s.keys.data(), stream));
    LS_RETURN_IF_ERROR(rope_rotate(s.keys.data(), rows, c.num_kv_heads, c.head_dim, s.positions.data(), 0,
                                   weights_.inv_freq.data(), neox(c), stream));
    mark("q/k norm + RoPE");
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.v_proj.values.data(), kv, d, s.values.data(), false, kv));
    mark("q/k/v/o GEMMs");
    // The block's K/V go right after each context (scratch rows, never kept): every slot attends to keys
    // 0 .. p+gamma-1, the whole context before the anchor and the whole block, with no causal mask.
    LS_RETURN_IF_ERROR(scatter_block_kv(s.keys.data(), s.values.data(), s.block_requests.data(), count, gamma,
                                        static_cast<int>(kv), index, stream));
    mark("scatter");
    LS_RETURN_IF_ERROR(attend(count, dims, index));
    mark("attention");
    LS_RETURN_IF_ERROR(gemm(s.attended.data(), rows, layer.o_proj.values.data(), d, q, s.projected.data(), false, d));
    mark("q/k/v/o GEMMs");
    LS_RETURN_IF_ERROR(add_residual(s.hidden.data(), s.projected.data(), rows * d, stream));
    mark("residuals");
    // FFN block: X += down(silu(gate v) * up v), v = post_attention_layernorm(X).
    LS_RETURN_IF_ERROR(rms_norm(s.hidden.data(), rows, d, layer.post_norm.data(), c.norm_eps, s.normed.data(), stream));
    mark("norms");
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.gate_up_proj.values.data(), ff, d, s.gate.data(), false, ff));
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.gate_up_proj.values.data() + ff * d, ff, d, s.up.data(), false, ff));
    mark("gate/up GEMMs");
    LS_RETURN_IF_ERROR(swiglu(s.gate.data(), s.up.data(), rows * ff, s.gate.data(), stream));
    mark("swiglu");
    LS_RETURN_IF_ERROR(gemm(s.gate.data(), rows, layer.down_proj.values.data(), d, ff, s.projected.data(), false, d));
    mark("down GEMM");
    LS_RETURN_IF_ERROR(add_residual(s.hidden.data(), s.projected.data(), rows * d, stream));
    mark("residuals");
  }
  // Hf = norm(X); U = Hf @ E^T through the target's tied embedding, fp32.
  LS_RETURN_IF_ERROR(rms_norm(s.hidden.data(), rows, d, weights_.final_norm.data(), c.norm_eps, s.final_hidden.data(),
                              stream));
  mark("norms");
  LS_RETURN_IF_ERROR(gemm(s.final_hidden.data(), rows, embedding_, V, d, s.base_logits.data(), true, V));
  mark("head GEMM (U)");
  return ok_status();
}

ScanShape CudaDsparkDrafter::scan_shape() const {
  const DsparkConfig& c = config_;
  return ScanShape{c.vocab_size, c.markov_rank, c.hidden_size, c.block_size, c.has_confidence};
}

bool CudaDsparkDrafter::persistent_scan(int count, bool all_greedy) const {
  const PersistentScanPlan& plan = scan_plans_[count <= 1 ? 0 : 1];
  if (!all_greedy || plan.grid == 0 || scratch_.persistent_partials.size() == 0) return false;
  // Automatic: a single request (the group kernel waits for the H200 A/B), unless the fused step is pinned.
  return persistent_scan_pin_.value_or(count == 1 && !fused_scan_pin_.has_value());
}

bool CudaDsparkDrafter::keyed_scan(int count) const {
  // The persistent scan with the plain Gumbel max for requests with a temperature and no cuts (the verified pick's
  // draw for them; the radix variant is not the verified one's bits).
  const PersistentScanPlan& plan = scan_plans_[count <= 1 ? 0 : 1];
  return keyed_scan_ && !scan_all_greedy_ && scan_all_plain_ && plan.keyed && persistent_scan(count, true) &&
         draft_pick_mode() != DraftPickMode::Radix;
}

bool CudaDsparkDrafter::fused_scan(int count) const {
  if (!fused_scan_supported(scan_shape())) return false;
  return fused_scan_pin_ ? *fused_scan_pin_ : count == 1;
}

Status CudaDsparkDrafter::markov_scan(int count, int max_depth) {
  const DsparkConfig& c = config_;
  DeviceBlockScratch& s = scratch_;
  const cudaStream_t stream = stream_.get();
  const ScanShape shape = scan_shape();
  ScanStepInputs step;
  step.requests = s.scan_requests.data();
  step.records = s.records.data();
  step.count = count;
  step.markov = s.markov_logits.data();
  step.base_logits = s.base_logits.data();
  step.final_hidden = s.final_hidden.data();
  step.embeddings = s.markov_embeddings.data();
  step.confidence_weight = c.has_confidence ? weights_.confidence_weight.data() : nullptr;
  step.confidence_bias = weights_.confidence_bias;
  step.confidence_temperatures =
      weights_.confidence_temperatures.size() > 0 ? weights_.confidence_temperatures.data() : nullptr;
  const bool keyed = keyed_scan(count);
  if (persistent_scan(count, scan_all_greedy_) || keyed) {
    // One launch for every slot of every request (slots up to each request's depth, read on the device).
    step.w1 = weights_.markov_w1.data();
    step.w2 = weights_.markov_w2.values.data();
    step.partials = s.persistent_partials.data();
    step.planted_keyed_shift = keyed_scan_planted_;
    step.planted_odd_words = scan_planted_drop_;
    step.handoff_backoff_ns = scan_backoff_ns_;
    int groups = 0;
    const Status launched =
        markov_scan_persistent(step, shape, scan_plans_[count <= 1 ? 0 : 1], persistent_handoff_,
                               s.scan_barrier.data(), stream, &groups,
                               PersistentScanChoice{keyed, scan_broadcast_, scan_confidence_helpers_});
    if (launched.ok()) {
      mark("scan persistent");
      return ok_status();
    }
    if (groups > 0) return launched;  // some groups ran: their records moved on, no other scan may redo them
    // A refused launch enqueues no kernel: the persistent scan is off from now on and this scan takes the steps.
    log_warn("cuda drafter: the persistent Markov scan was refused (%s); the scan runs its steps from now on",
             launched.to_string().c_str());
    for (PersistentScanPlan& plan : scan_plans_) plan = PersistentScanPlan{};
    step.w1 = nullptr;
    step.w2 = nullptr;
    step.partials = nullptr;
  }
  if (fused_scan(count)) {
    // Per slot one launch: W1 gather + W2 product + U + chunk picks, the pick by each group's last CTA.
    step.w1 = weights_.markov_w1.data();
    step.w2 = weights_.markov_w2.values.data();
    step.partials = s.scan_partials.data();
    step.tickets = s.scan_tickets.data();
    step.keep_w2 = scan_keep_w2_;
    step.programmatic = programmatic_;
    if (sampled_split_ && !scan_all_greedy_ && count == 1) {
      // The same product, then the keyed draw spread over vocab chunks (its bits: markov_product_fused).
      for (int slot = 0; slot < max_depth; ++slot) {
        LS_RETURN_IF_ERROR(markov_product_fused(step, shape, slot, sampled_split_planted_, stream));
        mark("scan fused product");
        LS_RETURN_IF_ERROR(markov_pick_split(step, shape, slot, stream));
        mark("scan split pick");
      }
      return ok_status();
    }
    for (int slot = 0; slot < max_depth; ++slot) {
      LS_RETURN_IF_ERROR(markov_step_fused(step, shape, slot, stream));
      mark("scan fused step");
    }
    return ok_status();
  }
  // Per slot a fixed sequence: gather e = W1[prev], W2 e for every request (one GEMM, fp32 out), then the pick.
  for (int slot = 0; slot < max_depth; ++slot) {
    LS_RETURN_IF_ERROR(markov_gather(weights_.markov_w1.data(), s.scan_requests.data(), s.records.data(), count,
                                     shape, slot, s.markov_embeddings.data(), stream));
    LS_RETURN_IF_ERROR(gemm(s.markov_embeddings.data(), count, weights_.markov_w2.values.data(), c.vocab_size,
                            c.markov_rank, s.markov_logits.data(), true, c.vocab_size, false));
    mark("scan gather + W2 GEMM");
    if (split_pick_) {
      step.partials = s.scan_partials.data();  // [count, fused_scan_chunks(V)] holds [count, split_pick_chunks(V)]
      LS_RETURN_IF_ERROR(markov_pick_split(step, shape, slot, stream));
      mark("scan split pick");
    } else {
      LS_RETURN_IF_ERROR(markov_pick(step, shape, slot, stream));
      mark("scan pick");
    }
  }
  return ok_status();
}

}  // namespace ls::dspark::cuda
