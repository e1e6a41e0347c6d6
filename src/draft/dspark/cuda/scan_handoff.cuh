// The persistent Markov scan's handoffs (scan_persistent.cu): the spin bound both share and the flagged handoff's
// 64-bit words (session 8), each CTA's slot pick stored whole with no fence and read by spinning on it; and the
// asynchronous copies it stages W2 rows and U with. Included by CUDA sources only; internal linkage per file.
#pragma once

#include <cstdint>

#include "compute/cuda/keyed_draw.cuh"

namespace ls::dspark::cuda {
namespace {

using ls::cuda::keyed::Best;

constexpr long long kBarrierSpinCycles = 200'000'000;  // ~0.1 s at 2 GHz

__device__ __forceinline__ void copy_async_16(void* shared, const void* global) {
  const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global) : "memory");
}

__device__ __forceinline__ void copy_async_4(void* shared, const void* global) {
  const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address), "l"(global) : "memory");
}

// Asks L2 for `bytes` at `address`, a 128-byte line at a time (no register result: nothing waits for it).
__device__ __forceinline__ void prefetch_l2_lines(const void* address, int bytes) {
  for (int line = 0; line < bytes; line += 128) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(static_cast<const char*>(address) + line));
  }
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits for every committed group but the newest one.
__device__ __forceinline__ void wait_all_but_newest_copy() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* address) {
  unsigned int value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// The counter handoff, thread 0: waits until the barrier counter reaches `target` (bounded: a CTA that never
// arrives, which a cooperative launch rules out, fails the scan by name instead of hanging the device; barrier[1] is
// the flag).
__device__ __forceinline__ void wait_for_count(unsigned int* barrier, unsigned int target) {
  const long long start = clock64();
  while (load_acquire(barrier) < target) {
    if (load_acquire(barrier + 1) != 0 || clock64() - start > kBarrierSpinCycles) {
      atomicExch(barrier + 1, 1u);
      break;
    }
  }
  __threadfence();
}

// The flagged handoff's word: bit 63 arrived, bit 62 a non-finite logit, bits 32..61 the best id + 1 (0: none),
// bits 0..31 the best value (a float's bits: the logits are floats, so Best's double round-trips exactly).
constexpr uint64_t kWordArrived = 1ull << 63;

__device__ __forceinline__ uint64_t pack_partial(Best best, int nonfinite) {
  uint64_t word = kWordArrived | (nonfinite ? 1ull << 62 : 0);
  if (best.id >= 0) {
    word |= static_cast<uint64_t>(static_cast<uint32_t>(best.id) + 1u) << 32;
    word |= __float_as_uint(static_cast<float>(best.value));
  }
  return word;
}

__device__ __forceinline__ Best unpack_partial(uint64_t word) {
  const int32_t id = static_cast<int32_t>((word >> 32) & 0x3fffffffu) - 1;
  if (id < 0) return Best{0.0, -1};
  return Best{static_cast<double>(__uint_as_float(static_cast<uint32_t>(word))), id};
}

__device__ __forceinline__ void store_relaxed(uint64_t* address, uint64_t value) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(address), "l"(value) : "memory");
}

__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(value) : "l"(address) : "memory");
  return value;
}

// Spins until the word has arrived (bounded like the counter barrier: past ~0.1 s, or once another thread timed
// out, it raises the timed-out word and gives up: the word then reads as no pick). `backoff_ns` (session 14): a
// sleep between polls, fewer loads queued at L2 while 256 threads of 256 CTAs wait.
__device__ __forceinline__ uint64_t wait_for_word(const uint64_t* address, uint64_t* timeout, int backoff_ns = 0) {
  uint64_t word = load_relaxed(address);
  if (word & kWordArrived) return word;
  const long long start = clock64();
  for (unsigned int spin = 1; !(word & kWordArrived); ++spin) {
    if (spin % 64 == 0 && (load_relaxed(timeout) != 0 || clock64() - start > kBarrierSpinCycles)) {
      store_relaxed(timeout, 1);
      return 0;
    }
    if (backoff_ns > 0) __nanosleep(backoff_ns);
    word = load_relaxed(address);
  }
  return word;
}

}  // namespace
}  // namespace ls::dspark::cuda
