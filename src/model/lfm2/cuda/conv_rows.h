// The ShortConv of windows of many rows (prefill; session 12): short_conv's arithmetic, bit for bit, with 8 channels
// and a run of rows a thread (each row's z = B * X computed once and reused by the next rows' taps) and 16-byte loads
// and stores, where short_conv's kernels take an output a thread (a 64-bit division and 3 taps' B, X loads each).
#pragma once

#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {

// Whether conv_rows takes these arguments: kernel 2..4, width a multiple of 8, bcx / history 16-byte aligned.
bool conv_rows_fits(const ConvArgs& args);
// z [rows, width] and y [rows, width] as short_conv writes them (args.fault_reversed_taps_for_test honoured).
Status conv_rows(const ConvArgs& args, const int32_t* row_window, const WindowInfo* windows, bf16* z, bf16* y,
                 cudaStream_t stream);
// Whether the target runs its ShortConv through conv_rows for these arguments (since batch s12A): at least 128 rows
// (fewer keep short_conv's programmatic early kernel) and conv_rows_fits.
bool conv_rows_takes(const ConvArgs& args);

}  // namespace ls::lfm2::gpu
