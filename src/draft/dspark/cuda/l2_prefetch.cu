// Weight prefetch into L2 (session 10): the block pass forks this onto a side stream while its attention runs (a
// chain of small steps that leaves DRAM idle), so the GEMMs after it find part of their weights in L2. It reads
// nothing back and writes nothing: the pass's bits cannot change (tested against the pass without it).
#include <algorithm>
#include <span>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/draft_kernels.h"
#include "draft/dspark/cuda/l2_prefetch.cuh"

namespace ls::dspark::cuda {
namespace {

constexpr int kPrefetchThreads = 128;

// A thread per selected row, over every span's rows in turn (grid-stride).
__global__ void __launch_bounds__(kPrefetchThreads) prefetch_l2_kernel(L2PrefetchList list) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  issue_l2_prefetches(list, thread, stride);
}

}  // namespace

Status make_l2_prefetch_list(std::span<const L2PrefetchSpan> spans, int planted_span, L2PrefetchList& out) {
  out = L2PrefetchList{};
  for (const L2PrefetchSpan& span : spans) {
    if (span.rows <= 0 || span.eighths <= 0) continue;
    if (out.count == kMaxL2PrefetchSpans || span.eighths > 8 || span.row_bytes % 16 != 0 ||
        reinterpret_cast<uintptr_t>(span.base) % 16 != 0) {
      return Status(ErrorCode::InvalidArgument, "L2 prefetch: at most 4 spans of 16-byte aligned rows, eighths 1..8");
    }
    out.spans[out.count++] = span;
  }
  out.planted_span = planted_span < out.count ? planted_span : out.count - 1;
  return ok_status();
}

Status prefetch_l2_spans(std::span<const L2PrefetchSpan> spans, bool planted_store, cudaStream_t stream) {
  L2PrefetchList list;
  LS_RETURN_IF_ERROR(make_l2_prefetch_list(spans, planted_store ? 0 : -1, list));
  if (list.count == 0) return ok_status();
  int64_t rows = 0;
  for (int index = 0; index < list.count; ++index) rows = std::max(rows, list.spans[index].rows);
  // A few CTAs: each thread only issues its rows' prefetches, so the launch ends long before the data arrives.
  const int blocks = static_cast<int>(std::clamp<int64_t>((rows + kPrefetchThreads - 1) / kPrefetchThreads, 1, 16));
  prefetch_l2_kernel<<<blocks, kPrefetchThreads, 0, stream>>>(list);
  LS_CUDA_TRY_LAUNCH("prefetch_l2");
  return ok_status();
}

}  // namespace ls::dspark::cuda
