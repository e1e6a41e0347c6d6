// A fixed pool of worker threads that runs one parallel_for / parallel_chunks at a time (the engine thread is worker 0).
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
  // ~100 back-to-back calls of one decode step cost a cache-line handoff each instead of a futex wake-up (on the
  // development VM a handoff is ~0.9 us, waking a sleeping worker ~80 us). LS_POOL_SPIN_US at start or
  // set_spin_microseconds() changes it (A/B timing of the gaps between a round's forward and drafter pass).
  static constexpr int kSpinMicroseconds = 30;

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // The spin before sleeping, for every pool of the process (returns the previous value).
  static int set_spin_microseconds(int microseconds);
  static int spin_microseconds();

  // Runs task(worker, begin, end) over [0, count) split into size() contiguous parts, one per worker.
  // The split depends only on count and size(), so who computes what is reproducible; callers split by
  // output columns, never by the reduction dimension, so results do not depend on the thread count.
  void parallel_for(int64_t count, const std::function<void(int worker, int64_t begin, int64_t end)>& task);

  // Runs task(worker, chunk, chunk + 1) once for every chunk of [0, count), each on whichever thread claims it: every
  // thread walks its own contiguous share from the front (one sequential stream each) and, when that is done, takes
  // chunks from the back of the others' shares. A late or preempted worker so costs its share's time, not a wait;
  // a worker that has not woken when the work runs out does none of it. Callers must not care who runs a chunk.
  void parallel_chunks(int64_t count, const std::function<void(int worker, int64_t chunk, int64_t end)>& task);

 private:
  // One thread's share of a parallel_chunks call: [front, back) packed as front << 32 | back.
  struct alignas(64) Share {
    std::atomic<uint64_t> bounds{0};
  };
  void worker_loop(int worker);
  // Publishes the current task to the workers (waking sleepers) and returns its generation.
  uint64_t publish();
  // Runs chunks of the current parallel_chunks call until none is left; returns how many it ran.
  int64_t run_chunks(int worker);
  // Closes generation `generation` and waits until no worker is inside it.
  void close(uint64_t generation);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int, int64_t, int64_t)>* task_ = nullptr;
  int64_t count_ = 0;
  bool chunked_ = false;                 // the current task is a parallel_chunks call
  std::vector<Share> shares_;            // [size()] for parallel_chunks
  std::atomic<uint64_t> generation_{0};  // bumped once per call; published after task_ and count_
  std::atomic<uint64_t> open_{0};        // the generation workers may still join, or 0 once closed
  std::atomic<int> pending_{0};          // parallel_for parts not yet done by the workers
  std::atomic<int> active_{0};           // workers inside the open generation
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stopping_{false};
};

}  // namespace ls
