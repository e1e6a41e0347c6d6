// The thread pool the CPU ops run on: parallel_chunks runs every chunk once, steals a late worker's share, and mixes
// with parallel_for across the spinning and sleeping paths.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace ls {
namespace {

TEST(OpsPool, ParallelChunksRunsEveryChunkExactlyOnceWhateverTheThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t count : {1, 2, 3, 7, 100, 1000}) {
      std::vector<std::atomic<int>> runs(count);
      std::atomic<int> bad_range{0};
      pool.parallel_chunks(count, [&](int worker, int64_t chunk, int64_t end) {
        if (end != chunk + 1 || worker < 0 || worker >= threads) bad_range.fetch_add(1);
        runs[chunk].fetch_add(1);
      });
      EXPECT_EQ(bad_range.load(), 0) << threads << " threads, " << count << " chunks";
      for (int64_t chunk = 0; chunk < count; ++chunk)
        ASSERT_EQ(runs[chunk].load(), 1) << "chunk " << chunk << " of " << count << " at " << threads << " threads";
    }
  }
}

TEST(OpsPool, ALateWorkersShareIsTakenByTheOthersInsteadOfWaitedFor) {
  ThreadPool pool(2);
  constexpr int64_t kCount = 64;
  int joined = 0;  // attempts in which the worker took a chunk (and stalled in it)
  // Attempts until the worker has joined once: on a loaded host it may wake only after the caller ran every chunk.
  for (int attempt = 0; attempt < 20 && joined == 0; ++attempt) {
    std::vector<std::atomic<int>> runs(kCount);
    std::atomic<int> by_worker[2] = {0, 0};
    std::atomic<int64_t> done{0};
    pool.parallel_chunks(kCount, [&](int worker, int64_t chunk, int64_t) {
      // The worker stalls inside the first chunk it takes (as if preempted) until the caller has run every other
      // chunk; a static split would leave it 32 chunks after the stall (the 2 s bound keeps that case finite).
      if (worker == 1 && by_worker[1].load() == 0) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (done.load() < kCount - 1 && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      // Each chunk takes ~0.5 ms, so the worker usually wakes and joins before the caller could finish alone.
      const auto busy_until = std::chrono::steady_clock::now() + std::chrono::microseconds(500);
      while (std::chrono::steady_clock::now() < busy_until) {
      }
      by_worker[worker].fetch_add(1);
      runs[chunk].fetch_add(1);
      done.fetch_add(1);
    });
    for (int64_t chunk = 0; chunk < kCount; ++chunk) ASSERT_EQ(runs[chunk].load(), 1) << "chunk " << chunk;
    // A static split would leave 32 chunks to the stalled worker.
    EXPECT_LE(by_worker[1].load(), 1) << "attempt " << attempt;
    EXPECT_GE(by_worker[0].load(), kCount - 1) << "attempt " << attempt;
    joined += by_worker[1].load();
  }
  EXPECT_GE(joined, 1) << "the worker never joined: the stall was not exercised";
}

// `calls` calls on `pool`, alternating parallel_chunks and parallel_for over 1 + call % `widths` items, with a nap
// every `nap_every` calls (the workers go to sleep); succeeds iff every call ran each of its items exactly once.
::testing::AssertionResult mixed_calls_run_every_item_once(ThreadPool& pool, int calls, int widths, int nap_every,
                                                          std::chrono::microseconds nap) {
  int64_t expected = 0;
  std::atomic<int64_t> total{0};
  for (int call = 0; call < calls; ++call) {
    const int64_t count = 1 + call % widths;
    if (call % nap_every == 0) std::this_thread::sleep_for(nap);
    if (call % 2 == 0) {
      pool.parallel_chunks(count, [&](int, int64_t chunk, int64_t) { total.fetch_add(chunk + 1); });
    } else {
      pool.parallel_for(count, [&](int, int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) total.fetch_add(i + 1);
      });
    }
    expected += count * (count + 1) / 2;
    if (total.load() != expected)
      return ::testing::AssertionFailure() << "call " << call << ": sum " << total.load() << ", want " << expected;
  }
  return ::testing::AssertionSuccess();
}

TEST(OpsPool, ChunkedAndStaticCallsMixBackToBackAndAfterIdleGaps) {
  ThreadPool pool(3);
  EXPECT_TRUE(mixed_calls_run_every_item_once(pool, 600, 37, 50, std::chrono::microseconds(300)));
}

// The spin budget (LS_POOL_SPIN_US / set_spin_microseconds): with none every call wakes sleeping workers through the
// condition variable, with a long one they never sleep; both run every chunk exactly once, and the setter hands back
// the previous budget.
TEST(OpsPool, AnySpinBudgetFromNoneToLongRunsEveryCallAndTheSetterReturnsThePreviousOne) {
  const int before = ThreadPool::spin_microseconds();
  for (int spin : {0, 1000}) {
    const int previous = ThreadPool::set_spin_microseconds(spin);
    EXPECT_EQ(ThreadPool::spin_microseconds(), spin);
    ThreadPool pool(3);
    EXPECT_TRUE(mixed_calls_run_every_item_once(pool, 200, 11, 20, std::chrono::microseconds(200)))
        << "spin " << spin << " us";
    EXPECT_EQ(ThreadPool::set_spin_microseconds(previous), spin);
  }
  EXPECT_EQ(ThreadPool::spin_microseconds(), before);
}

}  // namespace
}  // namespace ls
