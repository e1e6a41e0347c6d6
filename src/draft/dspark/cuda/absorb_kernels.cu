// The batched absorb's kernels: each row of a chunk's K and V to its own stream's context row (one launch a layer),
// or the fused heads (every layer's key norm + RoPE and value copy straight into the contexts, one launch).
#include <string>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/absorb_kernels.h"
#include "draft/dspark/cuda/device_steps.cuh"

namespace ls::dspark::cuda {
namespace {

// One block per row; threads stride over the row's width.
__global__ void scatter_rows_kernel(const bf16_t* keys, const bf16_t* values, int64_t width,
                                    bf16_t* const* key_rows, bf16_t* const* value_rows) {
  const int64_t row = blockIdx.x;
  bf16_t* key_row = key_rows[row];
  bf16_t* value_row = value_rows[row];
  for (int64_t column = threadIdx.x; column < width; column += blockDim.x) {
    key_row[column] = keys[row * width + column];
    value_row[column] = values[row * width + column];
  }
}

constexpr int kWarp = 32;
constexpr int kHeadWarps = 8;
constexpr int kMaxHeadDim = 128;

// One warp per (row, layer, K or V, head), lanes over the head (rms_norm_kernel's and rope_kernel's arithmetic).
template <bool kBatched>
__global__ void __launch_bounds__(kHeadWarps * kWarp) absorb_heads_kernel(AbsorbHeads a) {
  __shared__ float staged[kHeadWarps][kMaxHeadDim];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int per_row = a.layers * 2 * a.kv_heads;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kHeadWarps + warp;
  if (item >= a.rows * per_row) return;
  const int64_t row = item / per_row;
  const int within = static_cast<int>(item % per_row);
  const int layer = within / (2 * a.kv_heads), kind = within / a.kv_heads % 2, head = within % a.kv_heads;
  const int hd = a.head_dim;
  const bf16_t* in = a.kv + item * hd;
  bf16_t* out = a.row_pointers[(static_cast<int64_t>(kind) * a.layers + layer) * a.rows + row] +
                static_cast<int64_t>(head) * hd;
  if (kind == 1) {  // a value head: copied as is
    for (int i = lane; i < hd; i += kWarp) out[i] = in[i];
    return;
  }
  const float* norm = a.k_norms + static_cast<int64_t>(layer) * hd;
  if constexpr (kBatched) {
    norm_rope_head_batched(in, norm, hd, a.eps, static_cast<float>(a.positions[row]), a.inv_freq, a.neox,
                           staged[warp], out, lane);
  } else {
    norm_rope_head(in, norm, hd, a.eps, static_cast<float>(a.positions[row]), a.inv_freq, a.neox, staged[warp], out,
                   lane);
  }
}

// One block per chunk row: its tap row copied 16 bytes a thread at a time, or zeros for a padding row.
__global__ void gather_rows_kernel(const AbsorbGather* gather, int64_t row_values, bf16_t* features) {
  const int64_t row = blockIdx.x;
  const int64_t source = gather->sources[row];
  uint4* to = reinterpret_cast<uint4*>(features + row * row_values);
  const int64_t pieces = row_values / 8;
  if (source < 0) {
    for (int64_t piece = threadIdx.x; piece < pieces; piece += blockDim.x) to[piece] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* from = reinterpret_cast<const uint4*>(gather->taps + source * row_values);
  for (int64_t piece = threadIdx.x; piece < pieces; piece += blockDim.x) to[piece] = from[piece];
}

}  // namespace

Status gather_tap_rows(const AbsorbGather* gather, int64_t row_values, int64_t rows, bf16_t* features,
                       cudaStream_t stream) {
  if (rows == 0) return ok_status();
  if (rows > kAbsorbPassRows || row_values % 8 != 0) {
    return Status(ErrorCode::InvalidArgument, "gather_tap_rows takes up to " + std::to_string(kAbsorbPassRows) +
                                                  " rows of a multiple of 8 values, not " + std::to_string(rows) +
                                                  " of " + std::to_string(row_values));
  }
  gather_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(gather, row_values, features);
  LS_CUDA_TRY_LAUNCH("gather_tap_rows");
  return ok_status();
}

Status absorb_heads(const AbsorbHeads& args, cudaStream_t stream) {
  if (args.rows == 0) return ok_status();
  if (args.head_dim > kMaxHeadDim || args.head_dim % 2 != 0) {
    return Status(ErrorCode::UnsupportedDraftShape, "absorb_heads takes an even head_dim up to " +
                                                        std::to_string(kMaxHeadDim) + ", not " +
                                                        std::to_string(args.head_dim));
  }
  const int64_t items = args.rows * args.layers * 2 * args.kv_heads;
  const unsigned blocks = static_cast<unsigned>((items + kHeadWarps - 1) / kHeadWarps);
  const auto kernel = args.batched ? absorb_heads_kernel<true> : absorb_heads_kernel<false>;
  kernel<<<blocks, kHeadWarps * kWarp, 0, stream>>>(args);
  LS_CUDA_TRY_LAUNCH("absorb_heads");
  return ok_status();
}

Status scatter_context_rows(const bf16_t* keys, const bf16_t* values, int64_t rows, int64_t width,
                            bf16_t* const* key_rows, bf16_t* const* value_rows, cudaStream_t stream) {
  if (rows == 0) return ok_status();
  scatter_rows_kernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(keys, values, width, key_rows, value_rows);
  LS_CUDA_TRY_LAUNCH("scatter_context_rows");
  return ok_status();
}

}  // namespace ls::dspark::cuda
