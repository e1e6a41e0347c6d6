// A fixed pool of worker threads that runs one parallel_for at a time (the engine thread is worker 0).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ls {

class ThreadPool {
 public:
  // Idle workers (and a caller waiting for them) spin this long before sleeping on a condition variable, so the
  // ~100 back-to-back calls of one decode step cost a cache-line handoff each instead of a futex wake-up.
  static constexpr int kSpinMicroseconds = 30;

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(worker, begin, end) over [0, count) split into size() contiguous parts, one per worker.
  // The split depends only on count and size(), so who computes what is reproducible; callers split by
  // output columns, never by the reduction dimension, so results do not depend on the thread count.
  void parallel_for(int64_t count, const std::function<void(int worker, int64_t begin, int64_t end)>& task);

 private:
  void worker_loop(int worker);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int, int64_t, int64_t)>* task_ = nullptr;
  int64_t count_ = 0;
  std::atomic<uint64_t> generation_{0};  // bumped once per parallel_for; published after task_ and count_
  std::atomic<int> pending_{0};          // workers still running the current generation
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stopping_{false};
};

}  // namespace ls
