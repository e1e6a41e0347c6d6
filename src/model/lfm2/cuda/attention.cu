// CUDA attention of the target: causal GQA over paged KV, keys in blocks by absolute position: the scalar row kernel
// and the tensor-core tile kernel (online softmax), chosen at run time.
#include "model/lfm2/cuda/state_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "compute/cuda/cuda_util.h"
#include "model/lfm2/cuda/state_device.cuh"

namespace ls::lfm2::gpu {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 128;
constexpr int kKeyStride = kMaxHeadDim + 2;  // bf16 per staged key row: 65 words, so lane l's row starts on bank l

// Stages the 32 rows of block b (keys or values, by absolute position) in shared memory with coalesced 16-byte
// loads; rows at or past key_count are left as they are.
__device__ void stage_block(const bf16* rows, const int32_t* pages, int64_t b, int64_t key_count, int page_size,
                            int kv_width, int kv_head, int hd, bf16 (*buf)[kKeyStride], int lane) {
  const int parts = hd / 8;
  for (int i = lane; i < 32 * parts; i += 32) {
    const int t = i / parts, part = i % parts;
    const int64_t j = b * 32 + t;
    if (j >= key_count) continue;
    const uint4 packed =
        *reinterpret_cast<const uint4*>(rows + key_row(pages, j, page_size) * kv_width + kv_head * hd + part * 8);
    const uint32_t* words = reinterpret_cast<const uint32_t*>(&packed);
    uint32_t* dst = reinterpret_cast<uint32_t*>(&buf[t][part * 8]);
    dst[0] = words[0];
    dst[1] = words[1];
    dst[2] = words[2];
    dst[3] = words[3];
  }
  __syncwarp();
}

// Stages the keys of block b, then lane l computes the score of key 32b + l: a dot over dims in ascending order,
// rounded as the CPU rounds.
__device__ float block_score(const bf16* keys, const int32_t* pages, int64_t b, int64_t key_count, int page_size,
                             int kv_width, int kv_head, int hd, const float* qs, bf16 (*kbuf)[kKeyStride], int lane,
                             float scale) {
  stage_block(keys, pages, b, key_count, page_size, kv_width, kv_head, hd, kbuf, lane);
  float dot = 0.0f;
  if (b * 32 + lane < key_count)
    for (int d = 0; d < hd; ++d) dot = __fmaf_rn(qs[d], load(&kbuf[lane][d]), dot);
  __syncwarp();
  return round_bf16(round_bf16(dot) * scale);
}

// Rows with at most this many keys keep their scores (bf16 values already) in shared memory after pass 1, so
// passes 2 and 3 read them instead of recomputing the same dots; longer rows recompute (same bits either way).
constexpr int kCachedKeys = 4096;

// One CTA per (row, head). Keys in blocks of 32 by absolute position; block b belongs to warp b % 4. Pass 1: max of
// the rounded scores; pass 2: sum of exp (lane order, butterfly, warps in order); pass 3: p rounded, p @ v with keys
// in ascending order inside each warp, warps summed in order.
__global__ void attention_rows_kernel(const bf16* q, const int32_t* row_window, const WindowInfo* windows,
                                 const int32_t* pages, KvShape shape, KvLayer layer, bf16* out) {
  const int64_t row = blockIdx.x;
  const int head = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = shape.head_dim, kv_width = shape.kv_heads * hd;
  const int kv_head = head / (shape.heads / shape.kv_heads);
  const WindowInfo w = windows[row_window[row]];
  const int64_t keys = w.committed + (row - w.first_row) + 1;
  const int32_t* stream_pages = pages + w.page_begin;
  __shared__ float qs[kMaxHeadDim];
  __shared__ float warp_max[kAttnWarps], warp_sum[kAttnWarps];
  __shared__ float partial[kAttnWarps][kMaxHeadDim];
  __shared__ __align__(16) bf16 kbuf[kAttnWarps][32][kKeyStride];
  __shared__ bf16 cached_scores[kCachedKeys];
  const bf16* q_row = q + (row * shape.heads + head) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = load(q_row + d);
  __syncthreads();
  auto score = [&](int64_t b) {
    return block_score(layer.keys, stream_pages, b, keys, shape.page_size, kv_width, kv_head, hd, qs, kbuf[warp],
                       lane, shape.scale);
  };
  const bool cached = keys <= kCachedKeys;  // the same for the whole CTA
  auto kept_score = [&](int64_t b) {
    return cached ? (b * 32 + lane < keys ? load(&cached_scores[b * 32 + lane]) : 0.0f) : score(b);
  };
  const int64_t blocks = (keys + 31) / 32;
  // pass 1: max
  float m = -INFINITY;
  for (int64_t b = warp; b < blocks; b += kAttnWarps) {
    const float s = score(b);
    if (b * 32 + lane < keys) {
      m = fmaxf(m, s);
      if (cached) store(&cached_scores[b * 32 + lane], s);  // s is a bf16 value: stored exactly
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  float max_score = warp_max[0];
  for (int i = 1; i < kAttnWarps; ++i) max_score = fmaxf(max_score, warp_max[i]);
  // pass 2: total
  float sum = 0.0f;
  for (int64_t b = warp; b < blocks; b += kAttnWarps) {
    const float s = kept_score(b);
    if (b * 32 + lane < keys) sum += expf(s - max_score);
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) warp_sum[warp] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kAttnWarps; ++i) total += warp_sum[i];
  // pass 3: p @ v; lane owns dims lane, lane+32, lane+64, lane+96
  float acc[kMaxHeadDim / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = warp; b < blocks; b += kAttnWarps) {
    const float s = kept_score(b);
    const float p = b * 32 + lane < keys ? round_bf16(expf(s - max_score) / total) : 0.0f;
    const int count = static_cast<int>(keys - b * 32 < 32 ? keys - b * 32 : 32);
    // the block's values staged like its keys (coalesced), then summed key by key in ascending order
    stage_block(layer.values, stream_pages, b, keys, shape.page_size, kv_width, kv_head, hd, kbuf[warp], lane);
    for (int t = 0; t < count; ++t) {
      const float pt = __shfl_sync(0xffffffffu, p, t);
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) acc[i] = __fmaf_rn(pt, load(&kbuf[warp][t][d]), acc[i]);
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) partial[warp][d] = acc[i];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < kAttnWarps; ++i) o += partial[i][d];
    store(out + (row * shape.heads + head) * hd + d, o);
  }
}


// ---- the tile kernel: tensor cores, a CTA per (tile of rows, KV head) ----

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy_16_async(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// d [16 x 8] fp32 += a [16 x 16] bf16 @ b [16 x 8] bf16 (one warp).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

constexpr int kTileWarps = 4;
constexpr int kTileRowsMax = 16 * kTileWarps;  // (row, head) pairs per CTA

// Key block size by head_dim: two stages of K and V fit in 48 KB of static shared memory.
template <int HD>
constexpr int tile_block_keys() {
  return HD <= 64 ? 64 : 32;
}

struct TileArgs {
  const bf16* q;
  int64_t rows;
  const int32_t* row_window;
  const WindowInfo* windows;
  const int32_t* pages;
  KvShape shape;
  KvLayer layer;
  bf16* out;
  int tile_rows;  // query rows per CTA (each with the group's heads)
  bool fault;     // planted fault: the first two blocks swapped in CTAs of more than one row
};

// Stages keys/values of block b ([BN, HD] each) with cp.async; keys at or past key_count become zeros. page_shift:
// log2 of a power-of-two page size (a shift and a mask instead of a 64-bit division), else -1.
template <int HD, int BN>
__device__ void stage_tile(const TileArgs& a, const int32_t* pages, int page_shift, int64_t key_count, int kv_head,
                           int64_t b, bf16 (*kdst)[HD + 8], bf16 (*vdst)[HD + 8]) {
  constexpr int parts = HD / 8;
  const int kv_width = a.shape.kv_heads * HD;
  for (int i = threadIdx.x; i < BN * parts; i += blockDim.x) {
    const int t = i / parts, part = i % parts;
    const int64_t j = b * BN + t;
    if (j < key_count) {
      const int32_t jj = static_cast<int32_t>(j);  // positions fit in 31 bits
      const int64_t slot = page_shift >= 0 ? (static_cast<int64_t>(pages[jj >> page_shift]) << page_shift) +
                                                 (jj & (a.shape.page_size - 1))
                                           : key_row(pages, j, a.shape.page_size);
      const int64_t offset = slot * kv_width + kv_head * HD + part * 8;
      copy_16_async(&kdst[t][part * 8], a.layer.keys + offset);
      copy_16_async(&vdst[t][part * 8], a.layer.values + offset);
    } else {
      *reinterpret_cast<uint4*>(&kdst[t][part * 8]) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(&vdst[t][part * 8]) = make_uint4(0, 0, 0, 0);
    }
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

// Grid (row tiles, kv heads); 64 (row, head) pairs per CTA, pair m = local row * group + head in group, 16 per warp.
// The CTA walks the windows its rows belong to one after another (state reset per window).
template <int HD>
__global__ void __launch_bounds__(kTileWarps * 32) attention_tile_kernel(TileArgs a) {
  constexpr int BN = tile_block_keys<HD>();
  constexpr int KS = HD / 16;  // k steps of q . k
  constexpr int NT = BN / 8;   // score tiles of 8 keys
  constexpr int DT = HD / 8;   // output tiles of 8 dims
  __shared__ __align__(16) bf16 kbuf[2][BN][HD + 8];
  __shared__ __align__(16) bf16 vbuf[2][BN][HD + 8];
  const int group = a.shape.heads / a.shape.kv_heads;
  const int kv_head = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int quad_row = lane >> 2, quad_col = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * a.tile_rows;
  const int64_t r_end = r0 + a.tile_rows < a.rows ? r0 + a.tile_rows : a.rows;
  const int ps = a.shape.page_size;
  const int page_shift = (ps & (ps - 1)) == 0 ? __ffs(ps) - 1 : -1;
  for (int64_t seg = r0; seg < r_end;) {
    const WindowInfo w = a.windows[a.row_window[seg]];
    const int64_t seg_end = w.first_row + w.rows < r_end ? w.first_row + w.rows : r_end;
    const int64_t key_count = w.committed + w.rows;
    const int32_t* pages = a.pages + w.page_begin;
    // this thread's two (row, head) pairs: slot quad_row + 8 i of warp `warp` holds pair m = slot * 4 + warp, so the
    // few pairs of a decode row spread over the four warps
    int64_t pos[2], row_of[2];
    int head_of[2];
    for (int i = 0; i < 2; ++i) {
      const int m = (quad_row + 8 * i) * kTileWarps + warp;
      const int local = m / group;
      row_of[i] = r0 + local;
      head_of[i] = kv_head * group + m % group;
      const bool valid = local < a.tile_rows && row_of[i] >= seg && row_of[i] < seg_end;
      pos[i] = valid ? w.committed + (row_of[i] - w.first_row) : -1;
    }
    // a half (slots 0-7 or 8-15) without a pair in any lane skips its softmax (its mma rows are discarded)
    const bool live[2] = {__any_sync(0xffffffffu, pos[0] >= 0) != 0, __any_sync(0xffffffffu, pos[1] >= 0) != 0};
    long long warp_pos = pos[0] > pos[1] ? pos[0] : pos[1];
    for (int offset = 16; offset > 0; offset >>= 1) {
      const long long other = __shfl_xor_sync(0xffffffffu, warp_pos, offset);
      warp_pos = other > warp_pos ? other : warp_pos;
    }
    const int64_t blocks = (w.committed + (seg_end - 1 - w.first_row)) / BN + 1;
    const bool swap = a.fault && a.tile_rows > 1 && blocks >= 2;
    auto block_at = [&](int64_t it) { return swap && it < 2 ? 1 - it : it; };
    // q fragments (A operand): rows quad_row / quad_row + 8, dims 2 quad_col (+8) of each 16-dim step
    uint32_t qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = r & 1;
        qf[ks][r] = pos[i] < 0 ? 0u
                               : *reinterpret_cast<const uint32_t*>(
                                     a.q + (row_of[i] * a.shape.heads + head_of[i]) * HD + ks * 16 + 2 * quad_col +
                                     (r >> 1) * 8);
      }
    float o[DT][4];
#pragma unroll
    for (int t = 0; t < DT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    float run_max[2] = {-INFINITY, -INFINITY}, run_sum[2] = {0.0f, 0.0f};
    stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(0), kbuf[0], vbuf[0]);
    for (int64_t it = 0; it < blocks; ++it) {
      const int buf = static_cast<int>(it & 1);
      if (it + 1 < blocks)
        stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(it + 1), kbuf[buf ^ 1], vbuf[buf ^ 1]);
      else
        asm volatile("cp.async.commit_group;\n" ::);
      asm volatile("cp.async.wait_group 1;\n" ::);
      __syncthreads();
      const int64_t b = block_at(it);
      if (b * BN <= warp_pos) {  // warp-uniform: a block fully masked for all of the warp's pairs is skipped
        // scores: s [16 x BN] = q [16 x HD] k^T
        float s[NT][4];
#pragma unroll
        for (int t = 0; t < NT; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
#pragma unroll
          for (int t = 0; t < NT; t += 2) {
            uint32_t kf[4];  // keys 8t.. and 8t+8.., dims 16ks.. and 16ks+8..
            ldmatrix_x4(kf, &kbuf[buf][8 * t + (lane & 7) + ((lane >> 4) << 3)][16 * ks + ((lane >> 3) & 1) * 8]);
            mma_bf16(s[t], qf[ks], kf[0], kf[1]);
            mma_bf16(s[t + 1], qf[ks], kf[2], kf[3]);
          }
        // online softmax per pair, in a fixed order: own values by key, then the quad (xor 1, xor 2)
        float alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          alpha[i] = 1.0f;
          if (!live[i]) continue;  // warp-uniform
          float block_max = -INFINITY;
#pragma unroll
          for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t j = b * BN + 8 * t + 2 * quad_col + e;
              const float score = round_bf16(round_bf16(s[t][2 * i + e]) * a.shape.scale);
              s[t][2 * i + e] = j <= pos[i] ? score : -INFINITY;
              block_max = fmaxf(block_max, s[t][2 * i + e]);
            }
          block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
          block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
          const float new_max = fmaxf(run_max[i], block_max);
          alpha[i] = new_max == -INFINITY ? 1.0f : expf(run_max[i] - new_max);  // exactly 1 when the max holds
          float block_sum = 0.0f;
#pragma unroll
          for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float v = s[t][2 * i + e];
              const float p = v == -INFINITY ? 0.0f : round_bf16(expf(v - new_max));
              s[t][2 * i + e] = p;
              block_sum += p;
            }
          run_sum[i] = __fmaf_rn(run_sum[i], alpha[i], block_sum);
          run_max[i] = new_max;
        }
        // p [16 x BN] as A fragments, 16 keys per step
        uint32_t pf[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          pf[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
          pf[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
          pf[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
          pf[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
        // o = o * alpha + p v, the block's p v summed from zero over its keys in order
#pragma unroll
        for (int t = 0; t < DT; t += 2) {
          float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t vf[4];  // keys 16kk.. (+8), dims 8t.. and 8t+8..
            ldmatrix_x4_trans(vf, &vbuf[buf][16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8][8 * t + (lane >> 4) * 8]);
            mma_bf16(d0, pf[kk], vf[0], vf[1]);
            mma_bf16(d1, pf[kk], vf[2], vf[3]);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            o[t][e] = __fmaf_rn(o[t][e], alpha[e >> 1], d0[e]);
            o[t + 1][e] = __fmaf_rn(o[t + 1][e], alpha[e >> 1], d1[e]);
          }
        }
      }
      __syncthreads();  // the buffer is staged again two blocks on
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float total = run_sum[i] + __shfl_xor_sync(0xffffffffu, run_sum[i], 1);
      total = total + __shfl_xor_sync(0xffffffffu, total, 2);
      if (pos[i] < 0) continue;
      bf16* dst = a.out + (row_of[i] * a.shape.heads + head_of[i]) * HD + 2 * quad_col;
#pragma unroll
      for (int t = 0; t < DT; ++t)
        *reinterpret_cast<uint32_t*>(dst + 8 * t) = pack_bf16(o[t][2 * i] / total, o[t][2 * i + 1] / total);
    }
    __syncthreads();
    seg = seg_end;
  }
}

int sm_count() {
  static const int count = [] {
    int device = 0, value = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount,
                                                                       device) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return value;
  }();
  return count;
}

// Tiles since it passed on the H200 (batch A: fp64 reference, one-row bits, target splits; prefill 33x faster).
std::atomic<int> chosen_kernel{static_cast<int>(AttentionKernel::Tiles)};

}  // namespace

void set_attention_kernel(AttentionKernel kernel) { chosen_kernel.store(static_cast<int>(kernel)); }

AttentionKernel attention_kernel() { return static_cast<AttentionKernel>(chosen_kernel.load()); }

bool attention_tiles_supported(const KvShape& shape) {
  const int hd = shape.head_dim;
  return (hd == 16 || hd == 32 || hd == 64 || hd == 128) && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0 &&
         shape.heads / shape.kv_heads <= kTileRowsMax;
}

Status attention_tiles(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                       const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream,
                       const AttentionTiling& tiling) {
  if (!attention_tiles_supported(shape))
    return Status(ErrorCode::InvalidArgument, "attention tiles: head_dim " + std::to_string(shape.head_dim) +
                                                  " not 16/32/64/128, or " + std::to_string(shape.heads) +
                                                  " heads not a multiple of " + std::to_string(shape.kv_heads) +
                                                  " KV heads, or more than 64 heads per KV head");
  const int group = shape.heads / shape.kv_heads;
  const int most = kTileRowsMax / group;
  if (tiling.tile_rows < 0 || tiling.tile_rows > most)
    return Status(ErrorCode::InvalidArgument, "attention tiles: " + std::to_string(tiling.tile_rows) +
                                                  " rows per CTA, at most " + std::to_string(most) + " at group " +
                                                  std::to_string(group));
  if (rows == 0) return ok_status();
  // Rows per CTA: the most that still gives two waves of CTAs (fewer rows per CTA read the keys more often but run
  // in parallel). Any choice gives the same bits. Four warps always: those without pairs help stage the blocks.
  int tile = tiling.tile_rows;
  if (tile == 0) {
    tile = most;
    while (tile > 1 && ((rows + tile - 1) / tile) * shape.kv_heads < 2LL * sm_count()) tile = tile / 2;
  }
  const TileArgs args{q, rows, row_window, windows, pages, shape, layer, out, tile, tiling.fault_swap_first_blocks};
  const dim3 grid(static_cast<unsigned>((rows + tile - 1) / tile), static_cast<unsigned>(shape.kv_heads));
  switch (shape.head_dim) {
    case 16: attention_tile_kernel<16><<<grid, kTileWarps * 32, 0, stream>>>(args); break;
    case 32: attention_tile_kernel<32><<<grid, kTileWarps * 32, 0, stream>>>(args); break;
    case 64: attention_tile_kernel<64><<<grid, kTileWarps * 32, 0, stream>>>(args); break;
    default: attention_tile_kernel<128><<<grid, kTileWarps * 32, 0, stream>>>(args); break;
  }
  LS_CUDA_TRY_LAUNCH("attention tiles");
  return ok_status();
}

Status attention(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                 const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream) {
  if (attention_kernel() == AttentionKernel::Tiles && attention_tiles_supported(shape))
    return attention_tiles(q, rows, row_window, windows, pages, shape, layer, out, stream);
  return attention_rows(q, rows, row_window, windows, pages, shape, layer, out, stream);
}

Status attention_rows(const bf16* q, int64_t rows, const int32_t* row_window, const WindowInfo* windows,
                      const int32_t* pages, const KvShape& shape, KvLayer layer, bf16* out, cudaStream_t stream) {
  if (shape.head_dim > kMaxHeadDim || shape.head_dim % 8 != 0 || shape.heads % shape.kv_heads != 0)
    return Status(ErrorCode::InvalidArgument, "attention: head_dim " + std::to_string(shape.head_dim) +
                                                  " above 128 or not a multiple of 8, or heads not a multiple of kv_heads");
  if (rows == 0) return ok_status();
  attention_rows_kernel<<<dim3(static_cast<unsigned>(rows), shape.heads), kAttnWarps * 32, 0, stream>>>(
      q, row_window, windows, pages, shape, layer, out);
  LS_CUDA_TRY_LAUNCH("attention rows");
  return ok_status();
}

}  // namespace ls::lfm2::gpu
