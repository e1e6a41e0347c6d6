// A fixed pool of worker threads that runs one parallel_for at a time (the engine thread is worker 0).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ls {

class ThreadPool {
 public:
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
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

}  // namespace ls
