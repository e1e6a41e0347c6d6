// Few-row fused steps of the CPU forward: a GEMM whose one pool call also runs the row-wise step after it on the
// columns each thread has just computed, instead of a GEMM call and then a serial pass on the calling thread.
// Each returns false, doing nothing, where it does not apply (more than a verify window's rows, one thread, no
// AVX-512, or fusion switched off): the caller then runs its unfused sequence. The bits of that sequence either way.
#pragma once

#include <cstdint>
#include <functional>

#include "compute/ops.h"

namespace ls::compute {

// Which fused steps run: LS_CPU_FUSED=<mask> at start or set_cpu_fusion_steps(mask) picks them (0 = the unfused
// sequences), for A/B timing in one process and for the tests that pin the bits. By default only the scan's slot step
// (ninth session, nano pair, 2 threads, interleaved 1-stream rounds: the pass 1-5 % cheaper in 4 of 4 runs, its add
// and pick no longer serial); the forward's steps lost there (verify 4 rows 0.88 -> 1.12 ms with 1 + 2 + 4), as on
// the loaded host of the seventh session (docs/lanes.md, cpu8).
constexpr unsigned kFuseSwiglu = 1, kFuseResidual = 2, kFuseConv = 4, kFuseScan = 8, kFuseAll = 15;
constexpr unsigned kFuseDefault = kFuseScan;
bool cpu_fusion();  // any step fused
unsigned cpu_fusion_steps();
void set_cpu_fusion(bool on);  // all or none
void set_cpu_fusion_steps(unsigned steps);
// Whether the drafter's Markov scan fuses its slot step (W2, the base logits' add, the greedy pick) into one call.
bool fuses_markov_scan();

// act [rows, F] = swiglu(x @ w1^T, x @ w3^T), with gate / up [rows, F] as scratch (act may be gate).
bool matmul_swiglu(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w1, const Matrix& w3,
                   float* gate, float* up, float* act);

// h [rows, N] = add_residual(h, y) with y [rows, N] = x @ w^T (y is scratch: it holds the product afterwards).
bool matmul_add_residual(const OpContext& ctx, const float* x, int64_t rows, const Matrix& w, float* y, float* h);

// bcx [rows, 3 * width] = u @ in_proj^T (the ShortConv's B | C | x, in_proj [3 * width, K]); then, on the thread that
// computed them, channels(begin, end) for each range of channels whose B, C and x are all done.
bool matmul_conv_in(const OpContext& ctx, const float* u, int64_t rows, const Matrix& in_proj, float* bcx,
                    const std::function<void(int64_t begin, int64_t end)>& channels);

// short_conv() of channels [begin, end) only, on the calling thread (z and y of other channels untouched): the bits
// short_conv gives those channels.
void short_conv_range(const OpContext& ctx, const ShortConvInput& input, int64_t begin, int64_t end, float* z,
                      float* y);

}  // namespace ls::compute
