// Weight prefetch into L2 (session 10): the block pass forks this onto a side stream while its attention runs (a
// chain of small steps that leaves DRAM idle), so the GEMMs after it find part of their weights in L2. It reads
// nothing back and writes nothing: the pass's bits cannot change (tested against the pass without it).
#include <algorithm>
#include <span>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {
namespace {

constexpr int kPrefetchThreads = 128;

struct PrefetchList {
  L2PrefetchSpan spans[kMaxL2PrefetchSpans];
  int count = 0;
  bool planted_store = false;
};

// Asks L2 for `bytes` at `address` (16-byte aligned, a multiple of 16): one bulk prefetch on sm_90, else a line at
// a time.
__device__ __forceinline__ void ask_l2(const char* address, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(address), "r"(static_cast<int>(bytes))
               : "memory");
#else
  constexpr int kLineBytes = 128;
  for (int64_t line = 0; line < bytes; line += kLineBytes) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(address + line));
  }
#endif
}

// A thread per selected row, over every span's rows in turn (grid-stride).
__global__ void __launch_bounds__(kPrefetchThreads) prefetch_l2_kernel(PrefetchList list) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int index = 0; index < list.count; ++index) {
    const L2PrefetchSpan& span = list.spans[index];
    // Rows r with r % 8 < eighths: an even share of every column tile a GEMM's CTA streams.
    const int64_t tail = span.rows % 8 < span.eighths ? span.rows % 8 : span.eighths;
    const int64_t picked = span.rows / 8 * span.eighths + tail;
    for (int64_t k = thread; k < picked; k += stride) {
      const int64_t row = k / span.eighths * 8 + k % span.eighths;
      const char* address = static_cast<const char*>(span.base) + row * span.row_bytes;
      if (list.planted_store && k == 0) {
        // Planted fault (tests only): a store into the weights, which the bit test must see.
        *const_cast<char*>(address) ^= 0x40;
        continue;
      }
      ask_l2(address, span.row_bytes);
    }
  }
}

}  // namespace

Status prefetch_l2_spans(std::span<const L2PrefetchSpan> spans, bool planted_store, cudaStream_t stream) {
  PrefetchList list;
  int64_t rows = 0;
  for (const L2PrefetchSpan& span : spans) {
    if (span.rows <= 0 || span.eighths <= 0) continue;
    if (list.count == kMaxL2PrefetchSpans || span.eighths > 8 || span.row_bytes % 16 != 0 ||
        reinterpret_cast<uintptr_t>(span.base) % 16 != 0) {
      return Status(ErrorCode::InvalidArgument, "L2 prefetch: at most 4 spans of 16-byte aligned rows, eighths 1..8");
    }
    list.spans[list.count++] = span;
    rows = std::max(rows, span.rows);
  }
  list.planted_store = planted_store;
  if (list.count == 0) return ok_status();
  // A few CTAs: each thread only issues its rows' prefetches, so the launch ends long before the data arrives.
  const int blocks = static_cast<int>(std::clamp<int64_t>((rows + kPrefetchThreads - 1) / kPrefetchThreads, 1, 16));
  prefetch_l2_kernel<<<blocks, kPrefetchThreads, 0, stream>>>(list);
  LS_CUDA_TRY_LAUNCH("prefetch_l2");
  return ok_status();
}

}  // namespace ls::dspark::cuda
