// ThreadPool: the caller publishes each call as an open generation; workers spin briefly on it, then sleep on a
// condition variable. A worker joins a generation by counting itself active and then checking it is still open; the
// caller closes it and waits for the active count to drop to zero (seq_cst on both sides: one of them sees the
// other), so a worker never touches a finished call and the fast path takes no lock. Sleeping is announced through
// atomic flags checked after every publish / finish, so a wake-up is never lost.
#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "base/check.h"

namespace ls {
namespace {
void part_range(int64_t count, int parts, int part, int64_t& begin, int64_t& end) {
  const int64_t base = count / parts, extra = count % parts;
  begin = part * base + std::min<int64_t>(part, extra);
  end = begin + base + (part < extra ? 1 : 0);
}

std::atomic<int>& spin_setting() {
  static std::atomic<int> microseconds{[] {
    const char* text = std::getenv("LS_POOL_SPIN_US");
    return text && std::atoi(text) >= 0 ? std::atoi(text) : ThreadPool::kSpinMicroseconds;
  }()};
  return microseconds;
}

// Spins until `ready()` or the spin budget runs out; returns ready().
template <typename Ready>
bool spin_until(Ready ready) {
  const int budget = spin_setting().load(std::memory_order_relaxed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(budget);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

uint64_t pack_bounds(uint64_t front, uint64_t back) { return front << 32 | back; }

// LS_POOL_STATS=1 at start: every pool's calls of the process timed (when a worker first joins a call after its
// publication, how long the caller waits for the workers at the end, how many parallel_chunks chunks the caller ran
// itself) and printed to stderr at exit, to see what a 2-thread forward loses per call. Off: one relaxed load a call.
const bool g_stats_on = [] {
  const char* text = std::getenv("LS_POOL_STATS");
  return text && text[0] == '1';
}();
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
struct PoolStats {
  std::atomic<int64_t> calls{0}, joins{0}, join_ns{0}, wait_ns{0}, chunks{0}, caller_chunks{0};
  std::atomic<int64_t> published_ns{0};  // the current call's publication (one call at a time per process here)
  ~PoolStats() {
    if (calls.load() == 0) return;
    const double n = static_cast<double>(calls.load());
    std::fprintf(stderr,
                 "pool stats (LS_POOL_STATS): %lld calls; a worker joined %.2f us after publication (%lld joins), "
                 "the caller waited %.2f us at the end; the caller ran %.1f %% of the chunks\n",
                 static_cast<long long>(calls.load()), joins.load() ? join_ns.load() / 1e3 / joins.load() : 0.0,
                 static_cast<long long>(joins.load()), wait_ns.load() / 1e3 / n,
                 chunks.load() ? 100.0 * caller_chunks.load() / chunks.load() : 0.0);
  }
};
PoolStats g_stats;

// Claims one chunk of a share: its front (the owner) or its back (a thief); -1 when the share is empty.
int64_t claim(std::atomic<uint64_t>& bounds, bool from_front) {
  uint64_t current = bounds.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t front = current >> 32, back = current & 0xffffffffu;
    if (front >= back) return -1;
    const uint64_t next = from_front ? pack_bounds(front + 1, back) : pack_bounds(front, back - 1);
    if (bounds.compare_exchange_weak(current, next, std::memory_order_acq_rel, std::memory_order_relaxed))
      return static_cast<int64_t>(from_front ? front : back - 1);
  }
}
}  // namespace

int ThreadPool::set_spin_microseconds(int microseconds) {
  return spin_setting().exchange(std::max(microseconds, 0), std::memory_order_relaxed);
}

int ThreadPool::spin_microseconds() { return spin_setting().load(std::memory_order_relaxed); }

ThreadPool::ThreadPool(int threads) : shares_(std::max(threads, 1)) {
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

uint64_t ThreadPool::publish() {
  if (g_stats_on) g_stats.published_ns.store(now_ns(), std::memory_order_relaxed);
  const uint64_t generation = generation_.fetch_add(1) + 1;
  open_.store(generation);  // seq_cst: publishes task_ / count_ / shares_, ordered before the sleepers check
  if (sleeping_workers_.load() > 0) {
    std::lock_guard lock(mutex_);  // a worker between its check and its wait holds the lock: it cannot miss this
    wake_.notify_all();
  }
  return generation;
}

void ThreadPool::close(uint64_t generation) {
  LS_CHECK(open_.load() == generation, "only the open call can be closed");
  const int64_t closing = g_stats_on ? now_ns() : 0;
  open_.store(0);  // seq_cst: a worker that joins after this sees it closed and leaves without touching the task
  auto idle = [this] { return active_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(idle)) {
    std::unique_lock lock(mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, idle);
    caller_sleeping_.store(false);
  }
  task_ = nullptr;
  if (g_stats_on) {
    g_stats.calls.fetch_add(1, std::memory_order_relaxed);
    g_stats.wait_ns.fetch_add(now_ns() - closing, std::memory_order_relaxed);
  }
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
  chunked_ = false;
  pending_.store(parts - 1);
  const uint64_t generation = publish();
  int64_t begin, end;
  part_range(count, parts, 0, begin, end);
  if (begin < end) task(0, begin, end);
  auto parts_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(parts_done)) {
    std::unique_lock lock(mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, parts_done);
    caller_sleeping_.store(false);
  }
  close(generation);
}

void ThreadPool::parallel_chunks(int64_t count, const std::function<void(int, int64_t, int64_t)>& task) {
  if (count <= 0) return;
  LS_CHECK(count < (int64_t{1} << 32), "parallel_chunks takes fewer than 2^32 chunks");
  const int parts = size();
  if (parts == 1 || count == 1) {
    for (int64_t chunk = 0; chunk < count; ++chunk) task(0, chunk, chunk + 1);
    return;
  }
  task_ = &task;
  count_ = count;
  chunked_ = true;
  for (int part = 0; part < parts; ++part) {
    int64_t begin, end;
    part_range(count, parts, part, begin, end);
    shares_[part].bounds.store(pack_bounds(begin, end), std::memory_order_relaxed);
  }
  const uint64_t generation = publish();
  const int64_t ran = run_chunks(0);
  if (g_stats_on) {
    g_stats.chunks.fetch_add(count, std::memory_order_relaxed);
    g_stats.caller_chunks.fetch_add(ran, std::memory_order_relaxed);
  }
  close(generation);
}

int64_t ThreadPool::run_chunks(int worker) {
  const int parts = size();
  const std::function<void(int, int64_t, int64_t)>& task = *task_;
  int64_t ran = 0;
  for (int64_t chunk; (chunk = claim(shares_[worker].bounds, true)) >= 0; ++ran) task(worker, chunk, chunk + 1);
  for (int step = 1; step < parts; ++step)
    for (int64_t chunk; (chunk = claim(shares_[(worker + step) % parts].bounds, false)) >= 0; ++ran)
      task(worker, chunk, chunk + 1);
  return ran;
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  auto fresh = [&] {
    const uint64_t open = open_.load(std::memory_order_acquire);
    return stopping_.load(std::memory_order_relaxed) || (open != 0 && open != seen);
  };
  for (;;) {
    if (!spin_until(fresh)) {
      std::unique_lock lock(mutex_);
      sleeping_workers_.fetch_add(1);
      wake_.wait(lock, fresh);
      sleeping_workers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    const uint64_t generation = open_.load();
    if (generation == 0 || generation == seen) continue;  // closed in between
    seen = generation;
    active_.fetch_add(1);  // seq_cst, then the check below: the caller's close either sees us or we see it closed
    if (open_.load() == generation) {
      if (g_stats_on) {
        g_stats.joins.fetch_add(1, std::memory_order_relaxed);
        g_stats.join_ns.fetch_add(now_ns() - g_stats.published_ns.load(std::memory_order_relaxed),
                                  std::memory_order_relaxed);
      }
      if (chunked_) {
        run_chunks(worker);
      } else {
        int64_t begin, end;
        part_range(count_, size(), worker, begin, end);
        if (begin < end) (*task_)(worker, begin, end);
        pending_.fetch_sub(1);
      }
    }
    if (active_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard lock(mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace ls
