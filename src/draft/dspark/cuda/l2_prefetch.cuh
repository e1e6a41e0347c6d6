// Weight prefetch into L2, the device side (session 10's side launch, and since session 19 the grouped row attention's
// threads after their K / V copies): each selected row of each span asked for once, or the planted store.
#pragma once

#include <cstdint>

#include "draft/dspark/cuda/draft_kernels.h"

namespace ls::dspark::cuda {

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

// Thread `thread` of `stride` issues its share of the list: rows r with r % 8 < eighths of each span (an even share
// of every column tile a GEMM streams).
__device__ __forceinline__ void issue_l2_prefetches(const L2PrefetchList& list, int64_t thread, int64_t stride) {
  for (int index = 0; index < list.count; ++index) {
    const L2PrefetchSpan& span = list.spans[index];
    const int64_t tail = span.rows % 8 < span.eighths ? span.rows % 8 : span.eighths;
    const int64_t picked = span.rows / 8 * span.eighths + tail;
    for (int64_t k = thread; k < picked; k += stride) {
      const int64_t row = k / span.eighths * 8 + k % span.eighths;
      const char* address = static_cast<const char*>(span.base) + row * span.row_bytes;
      if (index == list.planted_span && k == 0) {
        // Planted fault (tests only): a store into the weights, which the bit test must see.
        *const_cast<char*>(address) ^= 0x40;
        continue;
      }
      ask_l2(address, span.row_bytes);
    }
  }
}

}  // namespace ls::dspark::cuda
