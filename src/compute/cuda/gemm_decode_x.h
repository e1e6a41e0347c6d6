// The pipeline decode GEMM with its x made from the residual add + RMSNorm (session 12, issue 8): a switch until a
// batch's interleaved A/B decides it (gemm_decode_pipe.cu, gemm_decode_pipe_norm.cuh).
#pragma once

namespace ls::cuda {

// gemm_decode_norm (the norm fusion's mixer GEMMs: conv in_proj, q / k / v) on the pipeline where it fits, each CTA
// making its x once from the residual add + RMSNorm (add_rms_norm's bits, in the order set_norm_sliced picks; with the
// sliced order each warp sums its slices from registers), instead of the staged kernels (LS_DECODE_PIPE_NORM=1).
void set_decode_pipe_norm(bool on);
bool decode_pipe_norm();

}  // namespace ls::cuda
