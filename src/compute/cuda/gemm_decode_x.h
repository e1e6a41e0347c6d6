// How the pipeline decode GEMM's x arrives when copied once (session 12, issue 8: verify windows of 2..16 rows wait
// for all of x, m bulk row copies, before their first mma): switches until a batch's interleaved A/B decides them
// (gemm_decode_pipe.cu).
#pragma once

namespace ls::cuda {

// Launches that copy x once copy it in pieces of `tiles` K tiles (64 columns each), each piece on its own barrier,
// raised so that no launch has more than 16 pieces; 0 (the default, or LS_DECODE_PIPE_X_PIECES unset): whole, one
// barrier. The same mma order, so the same bits; drop captured graphs after a change.
void set_decode_pipe_x_pieces(int tiles);
int decode_pipe_x_pieces();
// Launches that copy x once fill it with 16-byte loads by every thread of the CTA (all in flight), then a CTA barrier,
// instead of one bulk copy a row (LS_DECODE_PIPE_X_LOADS=1; before the pieces when both are set). Same bits.
void set_decode_pipe_x_loads(bool on);
bool decode_pipe_x_loads();
// gemm_decode_norm (the norm fusion's mixer GEMMs) on the pipeline where it fits, each CTA making its x once from the
// residual add + RMSNorm (add_rms_norm's bits, in the order set_norm_sliced picks), instead of the staged kernels
// (LS_DECODE_PIPE_NORM=1). Same bits.
void set_decode_pipe_norm(bool on);
bool decode_pipe_norm();

}  // namespace ls::cuda
