// SwiGLU over a GEMM's gate / up outputs: out [rows, width] = round(silu_bf16(gate) * up) (silu.cuh). One arithmetic,
// three kernels: 8 outputs a thread with 16-byte loads and stores and silu looked up in a table of every bf16 gate's
// silu (Table, the default: 65536 entries, filled by silu_bf16 itself), the same kernel computing silu (Vector: until
// the table is filled) and an output a thread (Rows: other shapes).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

#include "compute/cuda/kernels.h"
#include "compute/cuda/silu.cuh"

namespace ls::cuda {
namespace {

using b16 = __nv_bfloat16;

__device__ __forceinline__ float to_f(b16 v) { return __bfloat162float(v); }

__global__ void swiglu_kernel(const b16* gate, const b16* up, int64_t rows, int width, int64_t in_stride, b16* out) {
  const int64_t count = rows * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, col = i % width;
    const float silu = silu_bf16(to_f(gate[row * in_stride + col]));
    out[i] = __float2bfloat16_rn(__fmul_rn(silu, to_f(up[row * in_stride + col])));
  }
}

// silu_bf16 of every bf16 g, indexed by g's bits (a function of 16 bits: 128 KB), filled once per device by
// silu_bf16 itself, so a lookup gives that arithmetic's bits.
__device__ b16 silu_table[1 << 16];

__global__ void silu_table_kernel(int planted_bits) {
  const int bits = blockIdx.x * blockDim.x + threadIdx.x;
  if (bits >= (1 << 16)) return;
  b16 silu = __float2bfloat16_rn(silu_bf16(to_f(__ushort_as_bfloat16(static_cast<unsigned short>(bits)))));
  if (bits == planted_bits) silu = __ushort_as_bfloat16(__bfloat16_as_ushort(silu) + 1);  // tests: one ulp off
  silu_table[bits] = silu;
}

union Chunk {
  uint4 raw;
  __nv_bfloat162 pairs[4];
};

// 8 outputs a thread, grid (rows, column blocks of 8 x kThreads): no division per output. TABLE: silu from
// silu_table.
constexpr int kThreads = 256;

template <bool TABLE>
__global__ void __launch_bounds__(kThreads)
    swiglu_vector_kernel(const b16* gate, const b16* up, int width, int64_t in_stride, b16* out) {
  const int col = (blockIdx.y * kThreads + threadIdx.x) * 8;
  if (col >= width) return;
  const int64_t row = blockIdx.x;
  Chunk g, u, y;
  g.raw = __ldcs(reinterpret_cast<const uint4*>(gate + row * in_stride + col));  // read once: evict first
  u.raw = __ldcs(reinterpret_cast<const uint4*>(up + row * in_stride + col));
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    float silu[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const b16 gv = e ? g.pairs[p].y : g.pairs[p].x;
      silu[e] = TABLE ? to_f(silu_table[__bfloat16_as_ushort(gv)]) : silu_bf16(to_f(gv));
    }
    y.pairs[p] = __floats2bfloat162_rn(__fmul_rn(silu[0], __low2float(u.pairs[p])),
                                       __fmul_rn(silu[1], __high2float(u.pairs[p])));
  }
  *reinterpret_cast<uint4*>(out + row * width + col) = y.raw;
}

// Table: H200 batch s12A, synth 1.2B prefill 2048, three alternated rounds: 10.5 / 10.5 / 10.5 ms against 11.5 /
// 11.5 / 11.5 with the row kernel (swiglu 2048 x 8192: 26.8 us, Vector 43.1, Rows 88.8); s12B: 10.3 / 10.3 / 10.3
// (with conv_rows) against 11.5 / 11.6 / 11.5.
std::atomic<int> swiglu_mode{static_cast<int>(SwigluKernel::Table)};
constexpr int kPlantedSiluBits = 0x3f80;  // g = 1.0

// Whether silu_table holds silu_bf16 (one entry off where planted_bits >= 0) on this device: filled here once, on
// `stream`, synchronously; never while `stream` is capturing (false: the caller computes silu instead).
bool silu_table_ready(cudaStream_t stream, int planted_bits) {
  static std::mutex mutex;
  static std::map<int, int> filled;  // device -> the planted bits its table holds (-1: none)
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = filled.find(device);
  if (found != filled.end() && found->second == planted_bits) return true;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) return false;
  silu_table_kernel<<<(1 << 16) / 256, 256, 0, stream>>>(planted_bits);
  if (cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess) return false;
  filled[device] = planted_bits;
  return true;
}

// The table where the process's swiglu kernel is the table one and it is filled on this device; null otherwise.
const b16* silu_table_for(cudaStream_t stream) {
  const SwigluKernel mode = swiglu_kernel_mode();
  if (mode != SwigluKernel::Table && mode != SwigluKernel::TablePlantedOneOff) return nullptr;
  if (!silu_table_ready(stream, mode == SwigluKernel::TablePlantedOneOff ? kPlantedSiluBits : -1)) return nullptr;
  void* table = nullptr;
  return cudaGetSymbolAddress(&table, silu_table) == cudaSuccess ? static_cast<const b16*>(table) : nullptr;
}

const b16* dev(const bf16* p) { return reinterpret_cast<const b16*>(p); }
b16* dev(bf16* p) { return reinterpret_cast<b16*>(p); }

}  // namespace

void set_swiglu_kernel(SwigluKernel kernel) { swiglu_mode.store(static_cast<int>(kernel)); }

SwigluKernel swiglu_kernel_mode() { return static_cast<SwigluKernel>(swiglu_mode.load()); }

Status swiglu(const bf16* gate, const bf16* up, int64_t rows, int width, int64_t in_stride, bf16* out,
              cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return ok_status();
  const SwigluKernel mode = swiglu_kernel_mode();
  const uintptr_t addresses =
      reinterpret_cast<uintptr_t>(gate) | reinterpret_cast<uintptr_t>(up) | reinterpret_cast<uintptr_t>(out);
  if (mode == SwigluKernel::Rows || rows > 0x7fffffff || width % 8 != 0 || in_stride % 8 != 0 || addresses % 16 != 0) {
    const int64_t blocks = std::min<int64_t>((rows * width + 255) / 256, 4096);
    swiglu_kernel<<<static_cast<int>(blocks), 256, 0, stream>>>(dev(gate), dev(up), rows, width, in_stride, dev(out));
    return cuda_status(cudaGetLastError(), "swiglu_kernel");
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((width + 8 * kThreads - 1) / (8 * kThreads)));
  if (silu_table_for(stream) != nullptr)
    swiglu_vector_kernel<true><<<grid, kThreads, 0, stream>>>(dev(gate), dev(up), width, in_stride, dev(out));
  else
    swiglu_vector_kernel<false><<<grid, kThreads, 0, stream>>>(dev(gate), dev(up), width, in_stride, dev(out));
  return cuda_status(cudaGetLastError(), "swiglu_vector_kernel");
}

}  // namespace ls::cuda
