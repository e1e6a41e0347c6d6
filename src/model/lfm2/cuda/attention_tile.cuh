// The target's tensor-core attention tile kernel (a CTA per (tile of rows, KV head), online softmax over key blocks by
// absolute position, chunk states folded or stored for the split combine) and what it shares with the combine:
// the launch arguments, the split rule and the one chunk fold. Included by attention.cu only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "compute/cuda/pdl.cuh"
#include "model/lfm2/cuda/state_device.cuh"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2::gpu {
// Internal linkage and window_split's scalar arguments, as when this code was in attention.cu: with a named namespace
// and window_split(w, args) the plain (prefill) instance compiled to other code (3096 against 3064 instructions at
// head_dim 64; s11B's 1.2B prefill was 12.0 ms against 11.6 in s11A); as it is, its SASS equals d5e6372's.
namespace {

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
constexpr int kMaxSplits = 64;   // CTAs per (row tile, KV head) along the chunks, pinned
constexpr int kAutoSplits = 32;  // .. and automatic

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
  int tile_rows;     // query rows per CTA (each with the group's heads)
  bool fault;        // planted fault: the first two blocks swapped in CTAs of more than one row
  bool fault_edges;  // planted fault: chunk edges one block early in CTAs that walk every chunk
  int splits;        // CTAs per (row tile, KV head) along the chunks (gridDim.z); 1 = never split
  int chunk_cap;     // chunks per (row, head) the scratch holds
  float* states;     // [rows, heads, chunk_cap, HD + 2] fp32: (m, l, O) of each chunk of split windows
  bool early;        // launched programmatically: the first two blocks' committed keys staged before the wait
};

// Whether a window's rows are split over CTAs by chunk (the tile kernel and the combine decide alike).
__device__ __forceinline__ bool window_split(const WindowInfo& w, int splits, int chunk_cap) {
  const int64_t chunks = (w.committed + w.rows - 1) / kAttentionChunkKeys + 1;
  return splits > 1 && chunks > 1 && chunks <= chunk_cap;
}

// Folds a chunk state (m, l) into the running one (M, L); returns the factors of the old O and the chunk's O.
// The one fold of both paths: O = fma(O, a, o * b) with the factors from here.
__device__ __forceinline__ void fold_chunk(float& M, float& L, float m, float l, float& a, float& b) {
  const float top = fmaxf(M, m);
  a = expf(M - top);  // 0 when M is -inf (nothing folded yet)
  b = expf(m - top);
  L = __fmaf_rn(L, a, __fmul_rn(l, b));
  M = top;
}

// The combine's fold of one (row, head) pair's stored chunk states 0 .. chunks - 1 in chunk order (fold_chunk, as
// the walking CTA does), out = O / L; a warp per pair. Groups of 8 chunks: every load of the group issued before the
// first fold (the folds stay in chunk order).
template <int HD>
__device__ __forceinline__ void fold_states(const TileArgs& a, int64_t pair, int64_t chunks, int lane) {
  constexpr int PER_LANE = (HD + 31) / 32;
  const float* st = a.states + pair * a.chunk_cap * (HD + 2);
  float M = -INFINITY, L = 0.0f, O[PER_LANE];
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) O[i] = 0.0f;
  constexpr int G = 8;
  for (int64_t c0 = 0; c0 < chunks; c0 += G, st += G * (HD + 2)) {
    float m[G], l[G], o[G][PER_LANE];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const bool in = c0 + g < chunks;
      m[g] = in ? st[g * (HD + 2)] : 0.0f;
      l[g] = in ? st[g * (HD + 2) + 1] : 0.0f;
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) {
        const int d = lane + 32 * i;
        o[g][i] = in && d < HD ? st[g * (HD + 2) + 2 + d] : 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (c0 + g >= chunks) break;
      float fa, fb;
      fold_chunk(M, L, m[g], l[g], fa, fb);
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) O[i] = __fmaf_rn(O[i], fa, __fmul_rn(o[g][i], fb));
    }
  }
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d = lane + 32 * i;
    if (d < HD) store(a.out + pair * HD + d, __fdiv_rn(O[i], L));
  }
}

// Stages keys/values of block b ([BN, HD] each) with cp.async, those in [from, to); keys at or past key_count
// become zeros. page_shift: log2 of a power-of-two page size (a shift and a mask instead of a 64-bit division), else
// -1.
template <int HD, int BN>
__device__ void stage_tile(const TileArgs& a, const int32_t* pages, int page_shift, int64_t key_count, int kv_head,
                           int64_t b, bf16 (*kdst)[HD + 8], bf16 (*vdst)[HD + 8], int64_t from = 0,
                           int64_t to = INT64_MAX) {
  constexpr int parts = HD / 8;
  const int kv_width = a.shape.kv_heads * HD;
  for (int i = threadIdx.x; i < BN * parts; i += blockDim.x) {
    const int t = i / parts, part = i % parts;
    const int64_t j = b * BN + t;
    if (j < key_count) {
      if (j < from || j >= to) continue;
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

// Grid (row tiles, kv heads, splits); 64 (row, head) pairs per CTA, pair m = local row * group + head in group, 16
// per warp. The CTA walks the windows its rows belong to one after another. Per window, keys in blocks of BN inside
// chunks of kAttentionChunkKeys: online softmax from a fresh state per chunk; at each chunk's end the chunk state is
// folded into the running one (unsplit window: z = 0 walks every chunk, writes out) or stored (split window: z
// walks chunks z, z + splits, ..; the combine folds them).
// EARLY is a template parameter, not a run-time flag: with the flag, the plain kernel's code made the 1.2B's 2048-row
// prefill 4 % slower (11.6 -> 12.1 ms, bisected on the H200 to ed0dfce); the plain instance is the old kernel.
template <int HD, bool EARLY>
__global__ void __launch_bounds__(kTileWarps * 32) attention_tile_kernel(TileArgs a) {
  constexpr int BN = tile_block_keys<HD>();
  constexpr int KS = HD / 16;  // k steps of q . k
  constexpr int NT = BN / 8;   // score tiles of 8 keys
  constexpr int DT = HD / 8;   // output tiles of 8 dims
  constexpr int CB = kAttentionChunkKeys / BN;  // blocks per chunk
  static_assert(kAttentionChunkKeys % BN == 0 && CB >= 2, "a chunk is whole blocks, at least two");
  __shared__ __align__(16) bf16 kbuf[2][BN][HD + 8];
  __shared__ __align__(16) bf16 vbuf[2][BN][HD + 8];
  ls::cuda::let_next_kernel_start();  // the combine, or the output GEMM staging its weights (both wait for us)
  // early: the wait comes after the first two blocks' committed keys are staged (keys of earlier forwards, into both
  // buffers; the window records are staged before the forward's first kernel); q and this forward's keys after it
  if constexpr (!EARLY) ls::cuda::wait_for_previous_kernel();  // a no-op after a plain launch
  const int group = a.shape.heads / a.shape.kv_heads;
  const int kv_head = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int quad_row = lane >> 2, quad_col = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * a.tile_rows;
  const int64_t r_end = r0 + a.tile_rows < a.rows ? r0 + a.tile_rows : a.rows;
  const int ps = a.shape.page_size;
  const int page_shift = (ps & (ps - 1)) == 0 ? __ffs(ps) - 1 : -1;
  for (int64_t seg = r0; seg < r_end;) {
    const int64_t seg_begin = seg;
    const WindowInfo w = a.windows[a.row_window[seg]];
    const int64_t seg_end = w.first_row + w.rows < r_end ? w.first_row + w.rows : r_end;
    seg = seg_end;
    const bool split = window_split(w, a.splits, a.chunk_cap);  // CTA-uniform
    const int64_t blocks = (w.committed + (seg_end - 1 - w.first_row)) / BN + 1;
    const int64_t chunks = (blocks + CB - 1) / CB;
    const int64_t step = split ? a.splits : 1;
    const int64_t first_chunk = split ? blockIdx.z : (blockIdx.z == 0 ? 0 : chunks);
    if (first_chunk >= chunks) continue;
    const int64_t key_count = w.committed + w.rows;
    const int32_t* pages = a.pages + w.page_begin;
    // this thread's two (row, head) pairs: slot quad_row + 8 i of warp `warp` holds pair m = slot * 4 + warp, so the
    // few pairs of a decode row spread over the four warps
    int64_t pos[2], row_of[2];
    int head_of[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int m = (quad_row + 8 * i) * kTileWarps + warp;
      const int local = m / group;
      row_of[i] = r0 + local;
      head_of[i] = kv_head * group + m % group;
      const bool valid = local < a.tile_rows && row_of[i] >= seg_begin && row_of[i] < seg_end;
      pos[i] = valid ? w.committed + (row_of[i] - w.first_row) : -1;
    }
    // a half (slots 0-7 or 8-15) without a pair in any lane skips its softmax (its mma rows are discarded)
    const bool live[2] = {__any_sync(0xffffffffu, pos[0] >= 0) != 0, __any_sync(0xffffffffu, pos[1] >= 0) != 0};
    long long warp_pos = pos[0] > pos[1] ? pos[0] : pos[1];
    for (int offset = 16; offset > 0; offset >>= 1) {
      const long long other = __shfl_xor_sync(0xffffffffu, warp_pos, offset);
      warp_pos = other > warp_pos ? other : warp_pos;
    }
    const bool swap = a.fault && a.tile_rows > 1 && blocks >= 2;
    auto block_at = [&](int64_t it) { return swap && it < 2 ? 1 - it : it; };
    // the chunk of block b (planted fault: edges one block early on the unsplit path)
    const int64_t shift = a.fault_edges && !split ? 1 : 0;
    auto chunk_of = [&](int64_t b) { return (b + shift) / CB; };
    // the block walked after b: the next of its chunk, else the first of the CTA's next chunk; -1 at the end
    auto next_block = [&](int64_t b) -> int64_t {
      if (b + 1 < blocks && (!split || chunk_of(b + 1) == chunk_of(b))) return b + 1;
      if (!split) return -1;
      const int64_t c = chunk_of(b) + step;
      return c < chunks ? c * CB : -1;
    };
    int64_t b = first_chunk * CB;
    bool next_staged = false;  // early: the second block is staged too (both buffers), before and after the wait
    if constexpr (!EARLY) {
      stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(b), kbuf[0], vbuf[0]);
    } else {
      const int64_t nb = next_block(b);
      stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(b), kbuf[0], vbuf[0], 0, w.committed);
      if (nb >= 0)
        stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(nb), kbuf[1], vbuf[1], 0, w.committed);
      ls::cuda::wait_for_previous_kernel();
      stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(b), kbuf[0], vbuf[0], w.committed);
      if (nb >= 0)
        stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(nb), kbuf[1], vbuf[1], w.committed);
      next_staged = nb >= 0;
    }
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
    // the chunk's state (o, run_max, this thread's part of run_sum) and the folded one (fo, fold_max, fold_sum)
    float o[DT][4], fo[DT][4];
#pragma unroll
    for (int t = 0; t < DT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[t][e] = fo[t][e] = 0.0f;
    float run_max[2] = {-INFINITY, -INFINITY}, run_sum[2] = {0.0f, 0.0f};
    float fold_max[2] = {-INFINITY, -INFINITY}, fold_sum[2] = {0.0f, 0.0f};
    for (int buf = 0; b >= 0; buf ^= 1) {
      const int64_t nb = next_block(b);
      if (nb >= 0 && !next_staged)
        stage_tile<HD, BN>(a, pages, page_shift, key_count, kv_head, block_at(nb), kbuf[buf ^ 1], vbuf[buf ^ 1]);
      else
        asm volatile("cp.async.commit_group;\n" ::);
      next_staged = false;
      asm volatile("cp.async.wait_group 1;\n" ::);
      __syncthreads();
      const int64_t kb = block_at(b);
      if (kb * BN <= warp_pos) {  // warp-uniform: a block fully masked for all of the warp's pairs is skipped
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
              const int64_t j = kb * BN + 8 * t + 2 * quad_col + e;
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
      if (nb < 0 || chunk_of(nb) != chunk_of(b)) {
        // the chunk ends: its state is folded (unsplit) or stored (split) for the pairs that see one of its keys
        const int64_t c = chunk_of(b);
        const int64_t chunk_key = c * CB * BN - shift * BN;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float l = run_sum[i] + __shfl_xor_sync(0xffffffffu, run_sum[i], 1);
          l = l + __shfl_xor_sync(0xffffffffu, l, 2);
          if (pos[i] >= chunk_key) {
            if (split) {
              float* st = a.states + ((row_of[i] * a.shape.heads + head_of[i]) * a.chunk_cap + c) * (HD + 2);
              if (quad_col == 0) {
                st[0] = run_max[i];
                st[1] = l;
              }
#pragma unroll
              for (int t = 0; t < DT; ++t)
                *reinterpret_cast<float2*>(st + 2 + 8 * t + 2 * quad_col) = make_float2(o[t][2 * i], o[t][2 * i + 1]);
            } else {
              float fa, fb;
              fold_chunk(fold_max[i], fold_sum[i], run_max[i], l, fa, fb);
#pragma unroll
              for (int t = 0; t < DT; ++t)
#pragma unroll
                for (int e = 2 * i; e < 2 * i + 2; ++e) fo[t][e] = __fmaf_rn(fo[t][e], fa, __fmul_rn(o[t][e], fb));
            }
          }
          run_max[i] = -INFINITY;
          run_sum[i] = 0.0f;
        }
#pragma unroll
        for (int t = 0; t < DT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
      }
      __syncthreads();  // the buffer is staged again two blocks on
      b = nb;
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    if (!split) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (pos[i] < 0) continue;
        bf16* dst = a.out + (row_of[i] * a.shape.heads + head_of[i]) * HD + 2 * quad_col;
#pragma unroll
        for (int t = 0; t < DT; ++t)
          *reinterpret_cast<uint32_t*>(dst + 8 * t) =
              pack_bf16(__fdiv_rn(fo[t][2 * i], fold_sum[i]), __fdiv_rn(fo[t][2 * i + 1], fold_sum[i]));
      }
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace ls::lfm2::gpu
