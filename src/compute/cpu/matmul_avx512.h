// AVX-512 GEMM entry points chosen at run time by matmul(): bf16 dot products (vdpbf16ps) and fp32 FMA.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "compute/ops.h"

namespace ls::compute {

// Runs matmul() on the AVX-512 kernels when this CPU has AVX-512 F/BW/VL; returns false (and does nothing) when
// it does not, so the caller falls back to its AVX2/portable kernels. Same contract as matmul().
bool matmul_avx512(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, float* y);

// matmul_avx512 of up to 4 matrices sharing K (and the input x) in one pool call; false without AVX-512.
bool matmul_group_avx512(const OpContext& ctx, const float* x, int64_t rows, std::span<const Matrix> ws,
                         std::span<float* const> ys);

// ys[i] = x @ ws[i]^T (row stride ldy, or ws[i].rows when 0) for up to 4 matrices of the same shape, in one pool call
// whose chunks are the same columns of every matrix; the thread that finished columns [col_begin, col_end) of all of
// them then runs then(col_begin, col_end). The bits of matmul(). Only few-row calls (a verify window, a draft block)
// on a pool of 2+ threads with AVX-512: false (nothing done) otherwise, and the caller runs its unfused sequence.
bool matmul_columns_then_avx512(const OpContext& ctx, const float* x, int64_t rows, std::span<const Matrix> ws,
                                std::span<float* const> ys, int64_t ldy,
                                const std::function<void(int64_t col_begin, int64_t col_end)>& then);

// Sets the weight bytes per chunk that few-row calls hand out (default 128 KiB, or LS_CPU_CHUNK_KB at start; 0 =
// the default) and returns the previous setting: for A/B timing and for tests that need many chunks. Same bits.
int64_t set_stream_chunk_bytes(int64_t bytes);

// The few-row verify path's software prefetch, for A/B timing (same bits): windows of up to `unprefetched_rows` rows
// (default 6; -1 = default) take none, wider ones prefetch `groups` 8-column groups ahead (default 2; 0 = default).
void set_verify_prefetch(int64_t unprefetched_rows, int64_t groups);

// The few-row kernel's options, a mask for A/B timing (the same bits): 1 = verify windows of r rows claim chunks r
// times smaller (r up to 8) and prefetch past a chunk's end, 2 = rows against packed weights run whole panels in one
// call (no tile call per panel); 0 = none (the eighth session's kernel); -1 = the default (3). Returns the previous
// mask. LS_CPU_SMALL_M=<mask> at start sets it too.
int set_small_m_kernel(int arm);

// Whether many-row calls (more than a verify window's rows) split their column chunks statically per matrix (default)
// or claim them one at a time (LS_CPU_CHUNKED_ROWS=1): for A/B timing; the same bits either way.
void set_many_rows_chunked(bool on);

// Output columns [begin, end) of w (its rows begin .. end-1) as a matrix of their own, sharing the weights (and the
// packed panels: begin must be a multiple of kPackedColumns).
Matrix column_slice(const Matrix& w, int64_t begin, int64_t end);

// matmul_argmax on the AVX-512 kernels; false (nothing done) without AVX-512.
bool matmul_argmax_avx512(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, int32_t* best);

// The kernel family matmul_avx512 uses on this CPU ("avx512-bf16", "avx512f"), or null when it is not available.
const char* matmul_avx512_name();

}  // namespace ls::compute
