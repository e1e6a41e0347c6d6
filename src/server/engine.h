// The engine thread: owns the lanes, admits requests from a queue, runs rounds while any stream is live, and hands
// each request's events to its reply channel. HTTP handler threads reach it only through submit() and the channel.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/stream.h"

namespace ls::server {

// One request's events, from the engine thread to its handler thread.
class ReplyChannel {
 public:
  void push(StreamEvent event);
  // The next event, or nothing after `timeout` (the handler then checks its client and waits again).
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
};

class Engine;

// What /health reports: requests open now, and the lanes' totals after the last round.
struct EngineCounters {
  int64_t open_requests = 0;     // submitted and not yet finished (queued or live)
  int64_t rounds = 0;
  int64_t tokens_generated = 0;
  int64_t drafts_verified = 0;
  int64_t drafts_accepted = 0;
};

// A submitted request as its handler holds it. Dropping it before the final event cancels the stream, so a handler
// that returns early (client gone, write failed) leaves nothing running.
class ReplyTicket {
 public:
  ReplyTicket(Engine& engine, uint64_t key, std::shared_ptr<ReplyChannel> channel)
      : engine_(&engine), key_(key), channel_(std::move(channel)) {}
  ReplyTicket(ReplyTicket&& other) noexcept;
  ReplyTicket& operator=(ReplyTicket&&) = delete;
  ~ReplyTicket();

  // The next event; one with finish != None is the last.
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout);

 private:
  Engine* engine_;
  uint64_t key_;
  std::shared_ptr<ReplyChannel> channel_;
  bool finished_ = false;
};

class Engine {
 public:
  // Borrows the lanes (which borrow the target and drafter); starts the thread.
  explicit Engine(Lanes& lanes);
  // Stops the thread: live streams are cancelled, their handlers get a Cancelled event.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request for the next round.
  ReplyTicket submit(Request request);
  // Ends a request (queued or live); its handler gets a Cancelled event. Unknown keys are ignored.
  void cancel(uint64_t key);
  EngineCounters counters() const;

 private:
  struct Submission {
    uint64_t key = 0;
    Request request;
    std::shared_ptr<ReplyChannel> channel;
  };
  struct Live {
    uint64_t key = 0;
    std::shared_ptr<ReplyChannel> channel;
  };

  void run();
  // Moves queued submissions and cancels into the lanes (engine thread).
  void admit(std::deque<Submission>& submissions, std::vector<uint64_t>& cancels);
  // Hands the lanes' events to their channels (engine thread).
  void deliver();

  Lanes& lanes_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Submission> queued_;   // guarded by mutex_
  std::vector<uint64_t> cancels_;   // guarded by mutex_
  uint64_t next_key_ = 1;           // guarded by mutex_
  EngineCounters counters_;         // guarded by mutex_
  bool stopping_ = false;           // guarded by mutex_
  std::map<StreamId, Live> live_;   // engine thread only
  std::map<uint64_t, StreamId> streams_by_key_;  // engine thread only
  std::thread thread_;
};

}  // namespace ls::server
