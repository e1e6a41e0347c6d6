// Block attention, tile variant: one CTA per (request, KV head) serves all block slots x query heads of that group
// from K/V tiles in shared memory (the warp variant reads every key once per slot and head).
//
// Three sweeps over keys 0 .. p+gamma-1 in 32-key tiles: row maxima, sums of exponentials, then probabilities times
// values. Every sum over keys runs one key after another in key order (the CPU's order); each score is the CPU's
// (raw and scaled scores rounded to bf16), probabilities are rounded to bf16, the output once. The split variant
// (attention_split.cu) spreads one such CTA over key chunks; choose_block_attention() picks it where the tile shapes fit.
#include <algorithm>
#include <cmath>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/attention_tile.cuh"
#include "draft/dspark/cuda/device_steps.cuh"

namespace ls::dspark::cuda {
namespace {

using namespace attention_tiles;

template <int kHeadDim>
__global__ void __launch_bounds__(kTileThreads) attention_tile_kernel(const bf16_t* q, const DeviceBlockRequest* requests,
                                                                      int gamma, AttentionDims dims, int layer,
                                                                      bf16_t* out) {
  let_next_kernel_start();  // the next GEMM may start loading its weights
  constexpr int kStride = kHeadDim + 1;
  constexpr int kOutputsPerThread = kMaxTileRows * kHeadDim / kTileThreads;
  extern __shared__ float shared[];
  const int group = dims.heads / dims.kv_heads;
  const int rows = gamma * group;  // row r = slot * group + g, query head kv_head * group + g
  float* query = shared;
  float* keys_tile = query + rows * kHeadDim;
  float* values_tile = keys_tile + kTileKeys * kStride;
  float* probabilities = values_tile + kTileKeys * kStride;
  float* row_max = probabilities + rows * kTileKeys;
  float* row_total = row_max + rows;
  const int request_index = blockIdx.x / dims.kv_heads;
  const int kv_head = blockIdx.x % dims.kv_heads;
  const DeviceBlockRequest request = requests[request_index];
  const int kv_size = dims.kv_heads * kHeadDim;
  const int64_t layer_offset = static_cast<int64_t>(layer) * request.capacity * kv_size + kv_head * kHeadDim;
  const bf16_t* keys = request.keys + layer_offset;
  const bf16_t* values = request.values + layer_offset;
  const int64_t key_count = request.length + gamma;
  auto global_row = [&](int r) {  // index of (block row, query head) in q / out, in units of head_dim
    const int slot = r / group, g = r % group;
    return (static_cast<int64_t>(request_index) * gamma + slot) * dims.heads + kv_head * group + g;
  };
  for (int index = threadIdx.x; index < rows * kHeadDim; index += blockDim.x) {
    query[index] = __bfloat162float(q[global_row(index / kHeadDim) * kHeadDim + index % kHeadDim]);
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    row_max[r] = -INFINITY;
    row_total[r] = 0.0f;
  }
  float accumulated[kOutputsPerThread];
  for (int k = 0; k < kOutputsPerThread; ++k) accumulated[k] = 0.0f;
  for (int sweep = 0; sweep < 3; ++sweep) {
    for (int64_t first = 0; first < key_count; first += kTileKeys) {
      const int count = key_count - first < kTileKeys ? static_cast<int>(key_count - first) : kTileKeys;
      __syncthreads();  // the last tile's readers are done; row statistics of the last sweep are complete
      for (int index = threadIdx.x; index < count * kHeadDim; index += blockDim.x) {
        const int j = index / kHeadDim, dim = index % kHeadDim;
        const int64_t at = (first + j) * kv_size + dim;
        keys_tile[j * kStride + dim] = __bfloat162float(keys[at]);
        if (sweep == 2) values_tile[j * kStride + dim] = __bfloat162float(values[at]);
      }
      __syncthreads();
      for (int pair = threadIdx.x; pair < rows * kTileKeys; pair += blockDim.x) {
        const int r = pair / kTileKeys, j = pair % kTileKeys;
        float value = sweep == 0 ? -INFINITY : 0.0f;
        if (j < count) {
          float sum = 0.0f;
#pragma unroll
          for (int dim = 0; dim < kHeadDim; ++dim) sum += query[r * kHeadDim + dim] * keys_tile[j * kStride + dim];
          const float score = round_bf16(round_bf16(sum) * dims.scale);
          if (sweep == 0) value = score;
          else if (sweep == 1) value = expf(score - row_max[r]);
          else value = round_bf16(expf(score - row_max[r]) / row_total[r]);
        }
        probabilities[pair] = value;
      }
      __syncthreads();
      if (sweep < 2) {
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
          float running = sweep == 0 ? row_max[r] : row_total[r];
          for (int j = 0; j < count; ++j) {
            const float value = probabilities[r * kTileKeys + j];
            running = sweep == 0 ? fmaxf(running, value) : running + value;
          }
          if (sweep == 0) row_max[r] = running;
          else row_total[r] = running;
        }
      } else {
        add_tile_values<kHeadDim>(accumulated, rows, count, probabilities, values_tile);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kOutputsPerThread; ++k) {
    const int output = threadIdx.x + k * kTileThreads;
    if (output >= rows * kHeadDim) break;
    out[global_row(output / kHeadDim) * kHeadDim + output % kHeadDim] = __float2bfloat16_rn(accumulated[k]);
  }
}

}  // namespace

bool block_attention_tile_supported(int gamma, AttentionDims dims) {
  const int rows = gamma * (dims.heads / dims.kv_heads);
  return rows <= kMaxTileRows && (dims.head_dim == 32 || dims.head_dim == 64) &&
         tile_shared_bytes(rows, dims.head_dim) <= 48 * 1024;
}

Status block_attention_tile(const bf16_t* q, const DeviceBlockRequest* requests, int count, int gamma,
                            AttentionDims dims, int layer, bf16_t* out, cudaStream_t stream) {
  if (count == 0) return ok_status();
  if (!block_attention_tile_supported(gamma, dims)) {
    return Status(ErrorCode::UnsupportedDraftShape, "the tile attention kernel does not take block " +
                                                        std::to_string(gamma) + " x group " +
                                                        std::to_string(dims.heads / dims.kv_heads) + " at head_dim " +
                                                        std::to_string(dims.head_dim));
  }
  const int rows = gamma * (dims.heads / dims.kv_heads);
  const size_t bytes = tile_shared_bytes(rows, dims.head_dim);
  const dim3 grid(count * dims.kv_heads), block(kTileThreads);
  if (dims.head_dim == 32) {
    attention_tile_kernel<32><<<grid, block, bytes, stream>>>(q, requests, gamma, dims, layer, out);
  } else {
    attention_tile_kernel<kMaxTileHeadDim><<<grid, block, bytes, stream>>>(q, requests, gamma, dims, layer, out);
  }
  LS_CUDA_TRY_LAUNCH("block_attention_tile");
  return ok_status();
}

}  // namespace ls::dspark::cuda
