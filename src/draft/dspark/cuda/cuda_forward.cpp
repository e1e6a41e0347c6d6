// The CUDA drafter's forward (reference/dspark.md §2.4-2.9): the block pass and the Markov scan; GEMMs via cuBLAS.
#include <cmath>

#include "draft/dspark/cuda/cuda_drafter.h"

namespace ls::dspark::cuda {
Status CudaDsparkDrafter::gemm(const bf16_t* x, int64_t rows, const bf16_t* w, int64_t w_rows, int64_t w_cols, void* y,
                               bool y_f32, int64_t ldy) {
  if (rows == 0) return ok_status();
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major y [rows, N] = x [rows, K] W^T is column-major y^T [N, rows] = W [N, K] (as K x N, transposed) x^T.
  return cublas_status(
      cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w_rows), static_cast<int>(rows),
                   static_cast<int>(w_cols), &alpha, w, CUDA_R_16BF, static_cast<int>(w_cols), x, CUDA_R_16BF,
                   static_cast<int>(w_cols), &beta, y, y_f32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(ldy),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

Status CudaDsparkDrafter::block_pass(int count) {
  const DsparkConfig& c = config_;
  DeviceBlockScratch& s = scratch_;
  const cudaStream_t stream = stream_.get();
  const int gamma = c.block_size;
  const int64_t rows = static_cast<int64_t>(count) * gamma;
  const int64_t d = c.hidden_size, q = c.q_size(), kv = c.kv_size(), ff = c.ffn_size, V = c.vocab_size;
  const AttentionDims dims{c.num_heads, c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  // X0 = E[tokens] from the target's shared embedding.
  LS_RETURN_IF_ERROR(embed_tokens(embedding_, s.tokens.data(), rows, d, s.hidden.data(), stream));
  for (int index = 0; index < c.num_layers; ++index) {
    const DeviceLayerWeights& layer = weights_.layers[index];
    // Attention block: u = input_layernorm(X); Q = RoPE(q_norm(q_proj u)); K, V as the context's.
    LS_RETURN_IF_ERROR(rms_norm(s.hidden.data(), rows, d, layer.input_norm.data(), c.norm_eps, s.normed.data(), stream));
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.q_proj.values.data(), q, d, s.queries.data(), false, q));
    LS_RETURN_IF_ERROR(rms_norm(s.queries.data(), rows * c.num_heads, c.head_dim, layer.q_norm.data(), c.norm_eps,
                                s.queries.data(), stream));
    LS_RETURN_IF_ERROR(rope_rotate(s.queries.data(), rows, c.num_heads, c.head_dim, s.positions.data(), 0,
                                   weights_.inv_freq.data(), neox(c), stream));
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.k_proj.values.data(), kv, d, s.keys.data(), false, kv));
    LS_RETURN_IF_ERROR(rms_norm(s.keys.data(), rows * c.num_kv_heads, c.head_dim, layer.k_norm.data(), c.norm_eps,
                                s.keys.data(), stream));
    LS_RETURN_IF_ERROR(rope_rotate(s.keys.data(), rows, c.num_kv_heads, c.head_dim, s.positions.data(), 0,
                                   weights_.inv_freq.data(), neox(c), stream));
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.v_proj.values.data(), kv, d, s.values.data(), false, kv));
    // The block's K/V go right after each context (scratch rows, never kept): every slot attends to keys
    // 0 .. p+gamma-1, the whole context before the anchor and the whole block, with no causal mask.
    LS_RETURN_IF_ERROR(scatter_block_kv(s.keys.data(), s.values.data(), s.block_requests.data(), count, gamma,
                                        static_cast<int>(kv), index, stream));
    LS_RETURN_IF_ERROR(block_attention(s.queries.data(), s.block_requests.data(), count, gamma, dims, index,
                                       s.attended.data(), stream));
    LS_RETURN_IF_ERROR(gemm(s.attended.data(), rows, layer.o_proj.values.data(), d, q, s.projected.data(), false, d));
    LS_RETURN_IF_ERROR(add_residual(s.hidden.data(), s.projected.data(), rows * d, stream));
    // FFN block: X += down(silu(gate v) * up v), v = post_attention_layernorm(X).
    LS_RETURN_IF_ERROR(rms_norm(s.hidden.data(), rows, d, layer.post_norm.data(), c.norm_eps, s.normed.data(), stream));
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.gate_proj.values.data(), ff, d, s.gate.data(), false, ff));
    LS_RETURN_IF_ERROR(gemm(s.normed.data(), rows, layer.up_proj.values.data(), ff, d, s.up.data(), false, ff));
    LS_RETURN_IF_ERROR(swiglu(s.gate.data(), s.up.data(), rows * ff, s.gate.data(), stream));
    LS_RETURN_IF_ERROR(gemm(s.gate.data(), rows, layer.down_proj.values.data(), d, ff, s.projected.data(), false, d));
    LS_RETURN_IF_ERROR(add_residual(s.hidden.data(), s.projected.data(), rows * d, stream));
  }
  // Hf = norm(X); U = Hf @ E^T through the target's tied embedding, fp32.
  LS_RETURN_IF_ERROR(rms_norm(s.hidden.data(), rows, d, weights_.final_norm.data(), c.norm_eps, s.final_hidden.data(),
                              stream));
  return gemm(s.final_hidden.data(), rows, embedding_, V, d, s.base_logits.data(), true, V);
}

Status CudaDsparkDrafter::markov_scan(int count, int max_depth) {
  const DsparkConfig& c = config_;
  DeviceBlockScratch& s = scratch_;
  const cudaStream_t stream = stream_.get();
  const ScanShape shape{c.vocab_size, c.markov_rank, c.hidden_size, c.block_size, c.has_confidence};
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
  // Per slot a fixed sequence: gather e = W1[prev], W2 e for every request (one GEMM, fp32 out), then the pick.
  for (int slot = 0; slot < max_depth; ++slot) {
    LS_RETURN_IF_ERROR(markov_gather(weights_.markov_w1.data(), s.scan_requests.data(), s.records.data(), count,
                                     shape, slot, s.markov_embeddings.data(), stream));
    LS_RETURN_IF_ERROR(gemm(s.markov_embeddings.data(), count, weights_.markov_w2.values.data(), c.vocab_size,
                            c.markov_rank, s.markov_logits.data(), true, c.vocab_size));
    LS_RETURN_IF_ERROR(markov_pick(step, shape, slot, stream));
  }
  return ok_status();
}

}  // namespace ls::dspark::cuda
