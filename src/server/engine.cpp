// The engine thread's loop: admit -> round -> deliver, sleeping while nothing is queued or live.
#include "server/engine.h"

#include "base/log.h"

namespace ls::server {

void ReplyChannel::push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

std::optional<StreamEvent> ReplyChannel::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

ReplyTicket::ReplyTicket(ReplyTicket&& other) noexcept
    : engine_(other.engine_), key_(other.key_), channel_(std::move(other.channel_)), finished_(other.finished_) {
  other.finished_ = true;
}

ReplyTicket::~ReplyTicket() {
  if (!finished_) engine_->cancel(key_);
}

std::optional<StreamEvent> ReplyTicket::next(std::chrono::milliseconds timeout) {
  std::optional<StreamEvent> event = channel_->next(timeout);
  if (event && event->finish != FinishReason::None) finished_ = true;
  return event;
}

Engine::Engine(Lanes& lanes) : lanes_(lanes), thread_([this] { run(); }) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

ReplyTicket Engine::submit(Request request) {
  auto channel = std::make_shared<ReplyChannel>();
  uint64_t key = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    key = next_key_++;
    ++counters_.open_requests;
    queued_.push_back(Submission{key, std::move(request), channel});
  }
  wake_.notify_one();
  return ReplyTicket(*this, key, channel);
}

void Engine::cancel(uint64_t key) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(key);
  }
  wake_.notify_one();
}

EngineCounters Engine::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

void Engine::run() {
  while (true) {
    std::deque<Submission> submissions;
    std::vector<uint64_t> cancels;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Sleep only when the lanes have nothing to do; the lanes are read on this thread alone.
      wake_.wait(lock, [&] { return stopping_ || !queued_.empty() || !cancels_.empty() || !lanes_.idle(); });
      submissions.swap(queued_);
      cancels.swap(cancels_);
      stopping = stopping_;
    }
    admit(submissions, cancels);
    if (stopping) {
      for (const auto& [stream, live] : live_) lanes_.cancel(stream);
      deliver();
      return;
    }
    if (!lanes_.idle()) {
      // A failed round ends the streams it touched with Error events (delivered below); the engine keeps serving.
      if (Status status = lanes_.round(); !status.ok())
        log_warn("engine: round failed: %s", status.to_string().c_str());
    }
    deliver();
  }
}

void Engine::admit(std::deque<Submission>& submissions, std::vector<uint64_t>& cancels) {
  for (Submission& submission : submissions) {
    const StreamId stream = lanes_.submit(std::move(submission.request));
    live_[stream] = Live{submission.key, std::move(submission.channel)};
    streams_by_key_[submission.key] = stream;
  }
  // A cancel for a request that already finished finds no key: nothing to do.
  for (uint64_t key : cancels) {
    auto found = streams_by_key_.find(key);
    if (found != streams_by_key_.end()) lanes_.cancel(found->second);
  }
}

void Engine::deliver() {
  // The counters are updated before any event reaches its channel: a client that has read its last event never sees
  // its request still counted open (/health, tests).
  std::vector<std::pair<std::shared_ptr<ReplyChannel>, StreamEvent>> outgoing;
  int64_t finished = 0;
  for (StreamEvent& event : lanes_.take_events()) {
    auto found = live_.find(event.stream);
    if (found == live_.end()) continue;
    const bool last = event.finish != FinishReason::None;
    outgoing.emplace_back(found->second.channel, std::move(event));
    if (last) {
      streams_by_key_.erase(found->second.key);
      live_.erase(found);
      ++finished;
    }
  }
  {
    const LanesStats& stats = lanes_.stats();
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.open_requests -= finished;
    counters_.rounds = stats.rounds;
    counters_.tokens_generated = stats.tokens_generated;
    counters_.drafts_verified = stats.drafts_verified;
    counters_.drafts_accepted = stats.drafts_accepted;
  }
  for (auto& [channel, event] : outgoing) channel->push(std::move(event));
}

}  // namespace ls::server
