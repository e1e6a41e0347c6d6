// The row attention's steps, shared by the row kernel (attention_row.cu: a CTA of kThreads per query head and block
// row) and the grouped one (attention_row_group.cu: kGroupHeads such groups in one CTA). Each is the split's arithmetic
// (attention_split.cu), so both kernels give the split's bits: fp32 products added in dimension order from zero for a
// score, each (chunk, 4 dims) value task adding its chunk's keys in key order from zero, the chunks' partials added in
// chunk order.
#pragma once

#include "draft/dspark/cuda/device_steps.cuh"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda::row_steps {

template <int kHeadDim>
constexpr int kStageStride = kHeadDim + 8;  // padded rows: a quarter warp's 16-byte reads of 8 rows hit 8 bank groups
constexpr int kValueTasks = 2;              // (chunk, 4 dims) tasks a thread: 32 chunks x 16 quads over 256 threads
constexpr int kValueBatch = 4;              // V rows a task loads before its multiply-adds

// Key `key`'s K (or V) row: from the stage when it holds it, else from the cache.
template <int kHeadDim>
__device__ __forceinline__ const bf16_t* staged_row(const bf16_t* cache, int kv_size, const bf16_t* stage, int staged,
                                                    int key) {
  return key < staged ? stage + key * kStageStride<kHeadDim> : cache + static_cast<int64_t>(key) * kv_size;
}

// scores [k - first] = bf16(bf16(q . key_k) x scale) for keys [first, last), thread t of kThreads per key, the key's
// 16-byte loads issued together.
template <int kHeadDim, int kThreads>
__device__ __forceinline__ void score_keys(const float* query, float* scores, const bf16_t* keys, int kv_size,
                                           const bf16_t* staged_keys, int staged, float scale, int first, int last,
                                           int t) {
  constexpr int kEights = kHeadDim / 8;
  for (int key = first + t; key < last; key += kThreads) {
    asm volatile("" ::: "memory");  // the query is read from shared memory per key, not hoisted into 64 registers
    const bf16_t* from = staged_row<kHeadDim>(keys, kv_size, staged_keys, staged, key);
    uint4 raw[kEights];
#pragma unroll
    for (int e = 0; e < kEights; ++e) raw[e] = *reinterpret_cast<const uint4*>(from + 8 * e);
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < kEights; ++e) {
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[e]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 k = __bfloat1622float2(pairs[i]);
        sum += query[8 * e + 2 * i] * k.x;
        sum += query[8 * e + 2 * i + 1] * k.y;
      }
    }
    scores[key - first] = round_bf16(round_bf16(sum) * scale);
  }
}

// A thread's value tasks: chunks t / quads and (t + kThreads) / quads, dimensions d4..d4+3, their key ranges and sums.
struct ValueTasks {
  int chunk[kValueTasks], begin[kValueTasks], end[kValueTasks];
  int d4;
  float acc[kValueTasks][4];
};

template <int kHeadDim, int kThreads>
__device__ __forceinline__ ValueTasks value_tasks(int t, int chunks, int chunk_keys, int key_count) {
  constexpr int kQuads = kHeadDim / 4;
  ValueTasks v;
  v.d4 = (t % kQuads) * 4;
#pragma unroll
  for (int k = 0; k < kValueTasks; ++k) {
    v.chunk[k] = (t + k * kThreads) / kQuads;
    v.begin[k] = min(key_count, v.chunk[k] * chunk_keys);
    v.end[k] = v.chunk[k] < chunks ? min(key_count, v.begin[k] + chunk_keys) : v.begin[k];
#pragma unroll
    for (int i = 0; i < 4; ++i) v.acc[k][i] = 0.0f;
  }
  return v;
}

// Adds the window [first, last)'s probabilities (scores[j - first]) times V to the tasks' sums, each task's keys in
// order; a thread's two tasks load their next kValueBatch V rows together.
template <int kHeadDim>
__device__ __forceinline__ void add_window_values(ValueTasks& v, const float* scores, const bf16_t* values,
                                                  int kv_size, const bf16_t* staged_values, int staged, int first,
                                                  int last) {
  int low[kValueTasks], high[kValueTasks], most = 0;
#pragma unroll
  for (int k = 0; k < kValueTasks; ++k) {
    low[k] = max(v.begin[k], first);
    high[k] = min(v.end[k], last);
    most = max(most, high[k] - low[k]);
  }
  for (int step = 0; step < most; step += kValueBatch) {
    uint2 raw[kValueTasks][kValueBatch];
    float p[kValueTasks][kValueBatch];
#pragma unroll
    for (int k = 0; k < kValueTasks; ++k) {
#pragma unroll
      for (int b = 0; b < kValueBatch; ++b) {
        const int j = low[k] + step + b;
        if (j < high[k]) {
          raw[k][b] = *reinterpret_cast<const uint2*>(
              staged_row<kHeadDim>(values, kv_size, staged_values, staged, j) + v.d4);
          p[k][b] = scores[j - first];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kValueTasks; ++k) {
#pragma unroll
      for (int b = 0; b < kValueBatch; ++b) {
        if (low[k] + step + b < high[k]) {
          const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[k][b]);
          const float2 v01 = __bfloat1622float2(pairs[0]), v23 = __bfloat1622float2(pairs[1]);
          v.acc[k][0] += p[k][b] * v01.x;
          v.acc[k][1] += p[k][b] * v01.y;
          v.acc[k][2] += p[k][b] * v23.x;
          v.acc[k][3] += p[k][b] * v23.y;
        }
      }
    }
  }
}

// The tasks' sums into partials [chunk][kHeadDim].
template <int kHeadDim>
__device__ __forceinline__ void store_partials(const ValueTasks& v, float* partials, int chunks) {
#pragma unroll
  for (int k = 0; k < kValueTasks; ++k) {
    if (v.chunk[k] < chunks) {
      *reinterpret_cast<float4*>(partials + v.chunk[k] * kHeadDim + v.d4) =
          make_float4(v.acc[k][0], v.acc[k][1], v.acc[k][2], v.acc[k][3]);
    }
  }
}

// Output dimension t (< kHeadDim): the chunks' partials added from zero in chunk order (an empty chunk's zero changes
// nothing), eight loads at a time. `planted` (tests only) leaves out the first chunk (never empty).
template <int kHeadDim>
__device__ __forceinline__ void sum_partials(const float* partials, int chunks, int planted, int t, bf16_t* out_row) {
  float sum = 0.0f;
  for (int base = 0; base < chunks; base += 8) {
    float held[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) held[k] = base + k < chunks ? partials[(base + k) * kHeadDim + t] : 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (base + k < chunks && base + k >= planted) sum += held[k];
    }
  }
  out_row[t] = __float2bfloat16_rn(sum);
}

}  // namespace ls::dspark::cuda::row_steps
