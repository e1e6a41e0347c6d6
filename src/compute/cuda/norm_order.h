// The RMSNorm's sum-of-squares order for rows wider than one slice (session 12, issue 8: the residual norm's 64-step
// chain on one warp): a switch until a batch's interleaved A/B decides it. The order itself is row_norm.cuh's.
#pragma once

namespace ls::cuda {

// On (LS_NORM_SLICED=1 at load, or the setter): every target norm of rows wider than kNormSlice (256) sums its
// squares in the sliced order (row_norm.cuh: 256-element slices, lane l chaining its 8 contiguous elements of a slice,
// the xor tree, then the slice sums in slice order), so that a CTA's warps each take slices and no warp walks the
// row; off (the default): lane l chains elements l, l + 32, .. of the whole row. Every path reads it at launch (the
// CTA-per-row norms, the norm prologues of the staged decode GEMMs, the MoE route's norm); drop captured graphs after
// a change. Rows of up to 256 (q / k heads) keep the one order.
void set_norm_sliced(bool on);
bool norm_sliced();
// Tests: the CTA-per-row norm adds its slice sums in reverse slice order (a planted order fault).
void set_norm_sliced_fault_for_test(bool on);
bool norm_sliced_fault_for_test();

}  // namespace ls::cuda
