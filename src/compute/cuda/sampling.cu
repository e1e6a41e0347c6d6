// The keyed sampler on the device: one block per row computes exactly compute::draw_token (greedy argmax, or Gumbel
// max over the top-k / top-p / min-p survivors with the same splitmix64 keys), doubles where the CPU uses doubles.
//
// Candidate order is the CPU's (larger logit first, ties to the lower id) as one 64-bit key per id; top-k and the
// top-p cut are found by block radix selection over those keys. Sums the CPU adds one by one (the top-p normaliser
// in id order, the kept mass in probability order) are added one by one here too, by one thread, so they round alike.
#include <cuda_bf16.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "compute/cuda/kernels.h"
#include "compute/cuda/keyed_draw.cuh"

namespace ls::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kChunk = 2048;  // candidates sorted / summed per round in shared memory
constexpr int kDefaultMode = 0;  // kLegacy until an H200 batch shows the fast machinery draws alike and wins

using keyed::Best;
using keyed::better;
using keyed::gumbel;
using keyed::order_key;

struct Shared {
  unsigned int histogram[256];
  unsigned int level_histogram[8][256];  // the walk's select histograms per digit, kept while the prefix repeats
  uint64_t level_prefix[8];
  int level_valid[8];
  Best best[kThreads / 32];
  double partial[kThreads / 32];
  uint64_t key_and[kThreads / 32];
  uint64_t key_or[kThreads / 32];
  uint64_t select_prefix;
  uint64_t select_rank;
  uint64_t bin_key[256];  // a key the last fresh select pass counted in each bin (the bin's only one when its count is 1)
  int select_done;
  unsigned int count;
  uint64_t chunk_keys[kChunk];
  double chunk_weights[kChunk];
  double scalar;
  int flag;
};

static_assert(sizeof(Shared) <= 48 * 1024, "the draw fits the default shared memory (no opt-in call)");

__device__ Best block_best(Best mine, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, mine.value, offset), __shfl_xor_sync(0xffffffffu, mine.id, offset)};
    mine = better(mine, other);
  }
  const int warp = threadIdx.x >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.best[warp] = mine;
  __syncthreads();
  Best all = s.best[0];
  for (int w = 1; w < kThreads / 32; ++w) all = better(all, s.best[w]);
  return all;
}

__device__ unsigned int block_count(bool mine, Shared& s) {
  unsigned int votes = __popc(__ballot_sync(0xffffffffu, mine));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.partial[threadIdx.x >> 5] = votes;
  __syncthreads();
  unsigned int total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += static_cast<unsigned int>(s.partial[w]);
  return total;
}

// The block's sum of one count per thread (one reduction, not one per 256 ids).
__device__ unsigned int block_sum(unsigned int mine, Shared& s) {
  mine = __reduce_add_sync(0xffffffffu, mine);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.partial[threadIdx.x >> 5] = mine;
  __syncthreads();
  unsigned int total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += static_cast<unsigned int>(s.partial[w]);
  return total;
}

// Bits every candidate key shares: the AND and the OR of the keys `keeps` admits (AND = ~0, OR = 0 when none).
struct KeyBits {
  uint64_t all_and = ~0ull;
  uint64_t all_or = 0;
};

// The row's filters so far: NaN never survives; then keys >= top-k cut and >= top-p cut; then min-p.
struct Filter {
  uint64_t min_key = 0;   // top-k and top-p cut
  bool use_min_p = false;
  double max_logit = 0;
  double temperature = 1;
  double min_p = 0;
  __device__ double weight(float logit) const { return exp((static_cast<double>(logit) - max_logit) / temperature); }
  __device__ bool keeps(float logit, int32_t id) const {
    if (isnan(logit) || order_key(logit, id) < min_key) return false;
    return !use_min_p || !(weight(logit) < min_p);
  }
};

template <typename F>
__device__ KeyBits block_key_bits(const float* row, int vocab, const F& filter, Shared& s) {
  uint64_t a = ~0ull, o = 0;
  for (int id = threadIdx.x; id < vocab; id += kThreads) {
    const float logit = row[id];
    if (!filter.keeps(logit, id)) continue;
    const uint64_t key = order_key(logit, id);
    a &= key;
    o |= key;
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    a &= __shfl_xor_sync(0xffffffffu, a, offset);
    o |= __shfl_xor_sync(0xffffffffu, o, offset);
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    s.key_and[threadIdx.x >> 5] = a;
    s.key_or[threadIdx.x >> 5] = o;
  }
  __syncthreads();
  KeyBits bits;
  for (int w = 0; w < kThreads / 32; ++w) {
    bits.all_and &= s.key_and[w];
    bits.all_or |= s.key_or[w];
  }
  return bits;
}

// select_rank, faster: digits every candidate shares (per `bits`) take no pass, a warp with many candidates adds
// one count per distinct digit (flat rows put nearly every key in one bin, where one atomic per id serialises), and
// with `cache` a digit's histogram is reused while its prefix repeats (the walk's selects share one filter; the
// caller clears s.level_valid when the filter changes).
template <typename F>
__device__ uint64_t select_rank_fast(const float* row, int vocab, const F& filter, unsigned int rank, KeyBits bits,
                                     bool cache, Shared& s) {
  uint64_t prefix = 0, prefix_mask = 0;
  const uint64_t varying = bits.all_and ^ bits.all_or;
  for (int shift = 56; shift >= 0; shift -= 8) {
    if (((varying >> shift) & 0xff) == 0) {  // one digit for all: the rank stays
      prefix |= bits.all_and & (0xffull << shift);
      prefix_mask |= 0xffull << shift;
      continue;
    }
    const int level = shift >> 3;
    unsigned int* histogram = cache ? s.level_histogram[level] : s.histogram;
    const bool fresh = !(cache && s.level_valid[level] != 0 && s.level_prefix[level] == prefix);
    if (fresh) {
      for (int b = threadIdx.x; b < 256; b += kThreads) histogram[b] = 0;
      __syncthreads();
      for (int base = 0; base < vocab; base += kThreads) {
        const int id = base + threadIdx.x;
        bool in = false;
        unsigned int digit = 0;
        uint64_t key = 0;
        if (id < vocab) {
          const float logit = row[id];
          if (filter.keeps(logit, id)) {
            key = order_key(logit, id);
            in = (key & prefix_mask) == prefix;
            digit = static_cast<unsigned int>((key >> shift) & 0xff);
          }
        }
        const unsigned int active = __ballot_sync(0xffffffffu, in);
        if (!in) continue;
        if (__popc(active) < 8) {
          atomicAdd(&histogram[digit], 1u);
          s.bin_key[digit] = key;
        } else {
          const unsigned int group = __match_any_sync(active, digit);
          if ((threadIdx.x & 31) == static_cast<unsigned int>(__ffs(group) - 1)) {
            atomicAdd(&histogram[digit], __popc(group));
            s.bin_key[digit] = key;
          }
        }
      }
      __syncthreads();
      if (cache && threadIdx.x == 0) {
        s.level_prefix[level] = prefix;
        s.level_valid[level] = 1;
      }
    }
    if (threadIdx.x == 0) {
      unsigned int above = 0;
      int digit = 255;
      for (; digit > 0; --digit) {
        if (rank < above + histogram[digit]) break;
        above += histogram[digit];
      }
      // A bin of one counted in this pass: its key is the answer, the lower digits need no passes.
      s.select_done = fresh && histogram[digit] == 1u;
      s.select_prefix = s.select_done ? s.bin_key[digit] : prefix | (static_cast<uint64_t>(digit) << shift);
      s.select_rank = rank - above;
    }
    __syncthreads();
    prefix = s.select_prefix;
    rank = static_cast<unsigned int>(s.select_rank);
    prefix_mask |= 0xffull << shift;
    const bool done = s.select_done != 0;
    __syncthreads();
    if (done) return prefix;
  }
  return prefix;
}

// The key of the candidate with descending rank `rank` (0 = best) among those `filter` keeps (8 passes of 8 bits).
__device__ uint64_t select_rank(const float* row, int vocab, const Filter& filter, unsigned int rank, Shared& s) {
  uint64_t prefix = 0, prefix_mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) s.histogram[b] = 0;
    __syncthreads();
    for (int id = threadIdx.x; id < vocab; id += kThreads) {
      const float logit = row[id];
      if (!filter.keeps(logit, id)) continue;
      const uint64_t key = order_key(logit, id);
      if ((key & prefix_mask) == prefix) atomicAdd(&s.histogram[(key >> shift) & 0xff], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int above = 0;
      int digit = 255;
      for (; digit > 0; --digit) {
        if (rank < above + s.histogram[digit]) break;
        above += s.histogram[digit];
      }
      s.select_prefix = prefix | (static_cast<uint64_t>(digit) << shift);
      s.select_rank = rank - above;
    }
    __syncthreads();
    prefix = s.select_prefix;
    rank = static_cast<unsigned int>(s.select_rank);
    prefix_mask |= 0xffull << shift;
    __syncthreads();
  }
  return prefix;
}

// Sorts s.chunk_keys[0, kChunk) descending (bitonic; unused slots hold 0 and sink to the end).
__device__ void sort_chunk_descending(Shared& s) {
  for (int size = 2; size <= kChunk; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < kChunk; i += kThreads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const bool descending = (i & size) == 0;
        const uint64_t a = s.chunk_keys[i], b = s.chunk_keys[j];
        if (descending ? a < b : a > b) {
          s.chunk_keys[i] = b;
          s.chunk_keys[j] = a;
        }
      }
    }
  __syncthreads();
}

__device__ int32_t key_id(uint64_t key) { return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key)); }

__device__ int32_t greedy_row(const float* row, int vocab, Shared& s) {
  Best mine{0.0, -1};
  if ((vocab & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int q = threadIdx.x; q < vocab / 4; q += kThreads) {
      const float4 v = row4[q];
      const float values[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!isnan(values[e])) mine = better(mine, Best{values[e], q * 4 + e});
    }
  } else {
    for (int id = threadIdx.x; id < vocab; id += kThreads)
      if (!isnan(row[id])) mine = better(mine, Best{row[id], id});
  }
  const Best all = block_best(mine, s);
  return all.id < 0 ? 0 : all.id;
}

// Kernel variants (LS_SAMPLER): the original counting / selecting machinery, the faster one, and the faster one
// with a planted fault (the top-p cut one candidate late) that the flat-row tests must catch.
enum Mode : int { kLegacy = 0, kFast = 1, kFastPlantedFault = 2 };

template <int kMode>
__global__ void __launch_bounds__(kThreads) draw_kernel(const float* logits, int vocab, const RowDraw* draws,
                                                        int32_t* out_tokens) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  Shared& s = *reinterpret_cast<Shared*>(shared_raw);
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  const RowDraw draw = draws[r];
  if (draw.temperature <= 0.0f) {
    const int32_t token = greedy_row(row, vocab, s);
    if (threadIdx.x == 0) out_tokens[r] = token;
    return;
  }
  const bool use_top_k = draw.top_k > 0 && draw.top_k < vocab;
  const bool use_top_p = draw.top_p < 1.0f;
  const bool use_min_p = draw.min_p > 0.0f;
  Filter filter;
  filter.temperature = draw.temperature;
  constexpr bool fast = kMode != kLegacy;
  if (use_top_k) {
    const unsigned int alive = [&] {
      if constexpr (fast) {
        unsigned int mine = 0;
        for (int id = threadIdx.x; id < vocab; id += kThreads) mine += !isnan(row[id]);
        return block_sum(mine, s);
      }
      unsigned int n = 0;
      for (int base = 0; base < vocab; base += kThreads) {
        const int id = base + threadIdx.x;
        n += block_count(id < vocab && !isnan(row[id]), s);
      }
      return n;
    }();
    if (alive > static_cast<unsigned int>(draw.top_k)) {
      if constexpr (fast)
        filter.min_key = select_rank_fast(row, vocab, filter, static_cast<unsigned int>(draw.top_k - 1),
                                          block_key_bits(row, vocab, filter, s), false, s);
      else
        filter.min_key = select_rank(row, vocab, filter, static_cast<unsigned int>(draw.top_k - 1), s);
    }
  }
  if (use_top_p || use_min_p) {
    Best mine{0.0, -1};
    for (int id = threadIdx.x; id < vocab; id += kThreads)
      if (filter.keeps(row[id], id)) mine = better(mine, Best{row[id], id});
    const Best top = block_best(mine, s);
    filter.max_logit = top.id < 0 ? 0.0 : top.value;
  }
  if (use_top_p) {
    unsigned int alive = 0;
    if constexpr (fast) {
      unsigned int mine = 0;
      for (int id = threadIdx.x; id < vocab; id += kThreads) mine += filter.keeps(row[id], id);
      alive = block_sum(mine, s);
    } else {
      for (int base = 0; base < vocab; base += kThreads) {
        const int id = base + threadIdx.x;
        alive += block_count(id < vocab && filter.keeps(row[id], id), s);
      }
    }
    // Normaliser: survivors' weights added in ascending id order by one thread. Few survivors (top-k) are first
    // packed in id order so the one thread adds only them.
    double total = 0;
    if (alive <= static_cast<unsigned int>(kChunk)) {
      unsigned int packed = 0;
      for (int base = 0; base < vocab; base += kThreads) {
        const int id = base + threadIdx.x;
        const bool keep = id < vocab && filter.keeps(row[id], id);
        const unsigned int votes = __ballot_sync(0xffffffffu, keep);
        __syncthreads();
        if ((threadIdx.x & 31) == 0) s.partial[threadIdx.x >> 5] = __popc(votes);
        __syncthreads();
        unsigned int before = packed;
        for (int w = 0; w < (threadIdx.x >> 5); ++w) before += static_cast<unsigned int>(s.partial[w]);
        if (keep) {
          const unsigned int at = before + __popc(votes & ((1u << (threadIdx.x & 31)) - 1u));
          s.chunk_weights[at] = filter.weight(row[id]);
        }
        for (int w = 0; w < kThreads / 32; ++w) packed += static_cast<unsigned int>(s.partial[w]);
      }
      __syncthreads();
      if (threadIdx.x == 0)
        for (unsigned int i = 0; i < alive; ++i) total += s.chunk_weights[i];
    } else {
      for (int base = 0; base < vocab; base += kChunk) {
        __syncthreads();
        for (int i = threadIdx.x; i < kChunk; i += kThreads) {
          const int id = base + i;
          s.chunk_weights[i] = id < vocab && filter.keeps(row[id], id) ? filter.weight(row[id]) : -1.0;
        }
        __syncthreads();
        if (threadIdx.x == 0)
          for (int i = 0; i < kChunk; ++i)
            if (s.chunk_weights[i] >= 0) total += s.chunk_weights[i];
      }
    }
    if (threadIdx.x == 0) {
      s.scalar = static_cast<double>(draw.top_p) * total;
      s.flag = 0;
      for (int level = 0; level < 8; ++level) s.level_valid[level] = 0;  // the walk's filter is new
    }
    __syncthreads();
    const double target = s.scalar;
    // Walk the survivors best-first, kChunk at a time, adding weights one by one until the mass reaches target.
    double mass = 0;  // thread 0's running sum
    uint64_t upper = ~0ull, cut = 0;
    bool done = false;
    KeyBits bits;
    if constexpr (fast) {
      if (alive > static_cast<unsigned int>(kChunk)) bits = block_key_bits(row, vocab, filter, s);
    }
    for (unsigned int first = 0; first < alive && !done; first += kChunk) {
      const unsigned int last = min(alive, first + kChunk) - 1;
      uint64_t lower = 0;
      if constexpr (fast) {
        // One chunk holds every survivor: its lower bound is the smallest key, no selection needed.
        lower = alive <= static_cast<unsigned int>(kChunk) ? 0 : select_rank_fast(row, vocab, filter, last, bits, true, s);
      } else {
        lower = select_rank(row, vocab, filter, last, s);
      }
      for (int i = threadIdx.x; i < kChunk; i += kThreads) s.chunk_keys[i] = 0;
      if (threadIdx.x == 0) s.count = 0;
      __syncthreads();
      if constexpr (fast) {
        for (int base = 0; base < vocab; base += kThreads) {  // one slot reservation per warp
          const int id = base + threadIdx.x;
          uint64_t key = 0;
          bool in = false;
          if (id < vocab && filter.keeps(row[id], id)) {
            key = order_key(row[id], id);
            in = key >= lower && (first == 0 || key < upper);
          }
          const unsigned int votes = __ballot_sync(0xffffffffu, in);
          if (votes == 0) continue;
          const unsigned int lane = threadIdx.x & 31;
          const unsigned int leader = __ffs(votes) - 1;
          unsigned int at = 0;
          if (lane == leader) at = atomicAdd(&s.count, static_cast<unsigned int>(__popc(votes)));
          at = __shfl_sync(0xffffffffu, at, leader);
          if (in) s.chunk_keys[at + __popc(votes & ((1u << lane) - 1u))] = key;
        }
      } else {
        for (int id = threadIdx.x; id < vocab; id += kThreads) {
          if (!filter.keeps(row[id], id)) continue;
          const uint64_t key = order_key(row[id], id);
          if (key >= lower && (first == 0 || key < upper)) s.chunk_keys[atomicAdd(&s.count, 1u)] = key;
        }
      }
      sort_chunk_descending(s);
      const int n = static_cast<int>(last - first + 1);
      for (int i = threadIdx.x; i < n; i += kThreads) s.chunk_weights[i] = filter.weight(row[key_id(s.chunk_keys[i])]);
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int i = 0; i < n; ++i) {
          mass += s.chunk_weights[i];
          if (mass >= target) {
            s.chunk_keys[0] = s.chunk_keys[kMode == kFastPlantedFault ? min(i + 1, n - 1) : i];
            s.flag = 1;
            break;
          }
        }
      }
      __syncthreads();
      done = s.flag != 0;
      if (done) cut = s.chunk_keys[0];
      upper = lower;
      __syncthreads();
    }
    if (done) filter.min_key = cut;
  }
  filter.use_min_p = use_min_p;
  filter.min_p = draw.min_p;
  // Gumbel max over the survivors (every non-NaN id when no filter is on), ties to the lower id.
  Best mine{0.0, -1};
  for (int id = threadIdx.x; id < vocab; id += kThreads) {
    const float logit = row[id];
    if (!filter.keeps(logit, id)) continue;
    const double scaled = static_cast<double>(logit) / static_cast<double>(draw.temperature);
    mine = better(mine, Best{scaled + gumbel(draw.seed, draw.position, id), id});
  }
  const Best all = block_best(mine, s);
  const int32_t token = all.id >= 0 ? all.id : greedy_row(row, vocab, s);
  if (threadIdx.x == 0) out_tokens[r] = token;
}

// The kernel variant from LS_SAMPLER ("legacy", "fast", "fast-planted-fault"), read at every launch so tests and
// benches can switch it; unset = the default.
int sampler_mode() {
  const char* value = std::getenv("LS_SAMPLER");
  if (value == nullptr) return kDefaultMode;
  if (std::strcmp(value, "legacy") == 0) return kLegacy;
  if (std::strcmp(value, "fast-planted-fault") == 0) return kFastPlantedFault;
  return kFast;
}

}  // namespace

size_t DrawScratch::bytes_needed(int64_t, int) { return 0; }  // the draw keeps everything in shared memory

Status DrawScratch::reserve(int64_t rows, int vocab) {
  if (rows < 0 || vocab < 0) return Status(ErrorCode::InvalidArgument, "DrawScratch::reserve of negative size");
  const size_t needed = bytes_needed(rows, vocab);
  if (needed > buffer_.bytes()) return buffer_.allocate(needed);
  return ok_status();
}

Status draw_rows(const float* logits, int64_t rows, int vocab, const RowDraw* draws, int32_t* out_tokens,
                 const DrawScratch& scratch, cudaStream_t stream) {
  (void)scratch;
  if (rows <= 0) return ok_status();
  if (vocab <= 0 || rows > 0x7fffffff)
    return Status(ErrorCode::InvalidArgument,
                  "draw_rows: rows " + std::to_string(rows) + ", vocab " + std::to_string(vocab));
  switch (sampler_mode()) {
    case kLegacy:
      draw_kernel<kLegacy><<<static_cast<unsigned>(rows), kThreads, sizeof(Shared), stream>>>(logits, vocab, draws,
                                                                                              out_tokens);
      break;
    case kFastPlantedFault:
      draw_kernel<kFastPlantedFault><<<static_cast<unsigned>(rows), kThreads, sizeof(Shared), stream>>>(
          logits, vocab, draws, out_tokens);
      break;
    default:
      draw_kernel<kFast><<<static_cast<unsigned>(rows), kThreads, sizeof(Shared), stream>>>(logits, vocab, draws,
                                                                                            out_tokens);
  }
  LS_CUDA_TRY_LAUNCH("draw_kernel");
  return ok_status();
}

}  // namespace ls::cuda
