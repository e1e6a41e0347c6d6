// ThreadPool: a generation counter wakes the workers; the caller runs part 0 and waits for the rest.
#include "base/thread_pool.h"

#include <algorithm>

#include "base/check.h"

namespace ls {
namespace {
void part_range(int64_t count, int parts, int part, int64_t& begin, int64_t& end) {
  const int64_t base = count / parts, extra = count % parts;
  begin = part * base + std::min<int64_t>(part, extra);
  end = begin + base + (part < extra ? 1 : 0);
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
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    count_ = count;
    pending_ = parts - 1;
    ++generation_;
  }
  wake_.notify_all();
  int64_t begin, end;
  part_range(count, parts, 0, begin, end);
  if (begin < end) task(0, begin, end);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  task_ = nullptr;
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, int64_t, int64_t)>* task;
    int64_t count;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
      count = count_;
    }
    int64_t begin, end;
    part_range(count, size(), worker, begin, end);
    if (begin < end) (*task)(worker, begin, end);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace ls
