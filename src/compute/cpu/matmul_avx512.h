// AVX-512 GEMM entry points chosen at run time by matmul(): bf16 dot products (vdpbf16ps) and fp32 FMA.
#pragma once

#include <cstdint>
#include <span>

#include "compute/ops.h"

namespace ls::compute {

// Runs matmul() on the AVX-512 kernels when this CPU has AVX-512 F/BW/VL; returns false (and does nothing) when
// it does not, so the caller falls back to its AVX2/portable kernels. Same contract as matmul().
bool matmul_avx512(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, float* y);

// matmul_avx512 of up to 4 matrices sharing K (and the input x) in one pool call; false without AVX-512.
bool matmul_group_avx512(const OpContext& ctx, const float* x, int64_t rows, std::span<const Matrix> ws,
                         std::span<float* const> ys);

// matmul_argmax on the AVX-512 kernels; false (nothing done) without AVX-512.
bool matmul_argmax_avx512(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, int32_t* best);

// The kernel family matmul_avx512 uses on this CPU ("avx512-bf16", "avx512f"), or null when it is not available.
const char* matmul_avx512_name();

}  // namespace ls::compute
