// ThreadPool: a generation counter publishes each task; workers spin briefly on it, then sleep on a condition
// variable. Sleeping is announced through an atomic flag checked after every publish (seq_cst on both sides), so a
// wake-up is never lost and the fast path takes no lock.
#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "base/check.h"

namespace ls {
namespace {
void part_range(int64_t count, int parts, int part, int64_t& begin, int64_t& end) {
  const int64_t base = count / parts, extra = count % parts;
  begin = part * base + std::min<int64_t>(part, extra);
  end = begin + base + (part < extra ? 1 : 0);
}

// Spins until `ready()` or the spin budget runs out; returns ready().
template <typename Ready>
bool spin_until(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicroseconds);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  LS_CHECK(threads >= 1, "a thread pool needs at least one thread");
  for (int worker = 1; worker < threads; ++worker) workers_.emplace_back([this, worker] { worker_loop(worker); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int, int64_t, int64_t)>& task) {
  if (count <= 0) return;
  const int parts = size();
  if (parts == 1 || count == 1) {
    task(0, 0, count);
    return;
  }
  task_ = &task;
  count_ = count;
  pending_.store(parts - 1);
  generation_.fetch_add(1);  // seq_cst: publishes task_/count_, ordered before the sleepers check
  if (sleeping_workers_.load() > 0) {
    std::lock_guard lock(mutex_);  // a worker between its check and its wait holds the lock: it cannot miss this
    wake_.notify_all();
  }
  int64_t begin, end;
  part_range(count, parts, 0, begin, end);
  if (begin < end) task(0, begin, end);
  if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lock(mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, [this] { return pending_.load() == 0; });
    caller_sleeping_.store(false);
  }
  task_ = nullptr;
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stopping_.load(); })) {
      std::unique_lock lock(mutex_);
      sleeping_workers_.fetch_add(1);
      wake_.wait(lock, [&] { return stopping_.load() || generation_.load() != seen; });
      sleeping_workers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    const std::function<void(int, int64_t, int64_t)>* task = task_;
    const int64_t count = count_;
    int64_t begin, end;
    part_range(count, size(), worker, begin, end);
    if (begin < end) (*task)(worker, begin, end);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard lock(mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace ls
