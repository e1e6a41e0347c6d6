// Host-side seams between the MoE expert files of the CUDA target (experts.cu, expert_scalar.cu, expert_stream.cu,
// expert_lean.cu, expert_ffn.cu): the picks, the test fault and the launches of each path. Not a public header.
#pragma once

#include <cstdint>

#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {

constexpr int kMaxTensorExperts = 1024;  // the tensor-core and streamed kernels keep a per-expert prefix in shared memory

// What an expert GEMM of this K runs: the pin, else the automatic pick (K below 256 keeps the scalar kernel).
ExpertKernel expert_kernel_for(int64_t max_rows_per_expert, int experts, int64_t k);
// The planted K-order fault (set_expert_fault_for_test).
bool expert_fault_for_test();

// The scalar fp32 expert GEMM (expert_scalar.cu).
Status launch_expert_scalar(const bf16* x, const int32_t* offsets, int experts, int64_t max_rows_per_expert,
                            const bf16* w, int64_t n, int64_t k, bf16* y, cudaStream_t stream);

// The streamed experts (expert_stream.cu): gate|up + SwiGLU, then down with its weights staged before it waits (4-warp
// CTAs of 8 stages, down items of 16 columns); combine: also the combine into f.y in the down launch, by tickets
// (expert_stream_combine_fits).
Status expert_ffn_streamed(const ExpertFfn& f, bool combine, int fault, cudaStream_t stream);
// Whether the down launch can combine this many slots (its slot -> plan position table).
bool expert_stream_combine_fits(int64_t rows, int top_k);
// The streamed kernels' shared-memory opt-ins (once, eagerly: expert_launch_setup).
void allow_expert_stream_shared();

// The lean streamed experts (expert_lean.cu): the streamed items and bits with the address arithmetic out of the K
// loop; combine (where expert_lean_combine_fits): a down CTA per column group runs its row chunks and combines them
// into f.y.
Status expert_ffn_lean(const ExpertFfn& f, bool combine, int fault, cudaStream_t stream);
// Whether the lean down launch can combine: y and weights set, at most one row chunk a warp (1 row at top-4).
bool expert_lean_combine_fits(const ExpertFfn& f);
void allow_expert_lean_shared();

// Device facts and every expert kernel's shared-memory opt-in, once per process (experts.cu; call before capture).
void expert_launch_setup();

}  // namespace ls::lfm2::gpu
