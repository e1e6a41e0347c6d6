// The server's engine thread over fakes: replies equal each request run alone, dropped tickets cancel, stop drains.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"
#include "nano_pair.h"
#include "server/engine.h"

namespace ls::server {
namespace {

constexpr auto kWait = std::chrono::seconds(20);

// A fake target whose replies sometimes end at eos (5), some inside a drafted window.
FakeTargetOptions target_options() {
  return FakeTargetOptions{.shape = {}, .max_rows = 48, .exact_width = 8, .eos_token_id = 5};
}

// Every event of one ticket until the last, tokens joined.
Reply collect(ReplyTicket& ticket) {
  Reply reply;
  while (true) {
    std::optional<StreamEvent> event = ticket.next(kWait);
    if (!event) {
      reply.error = "timed out waiting for an event";
      return reply;
    }
    reply.tokens.insert(reply.tokens.end(), event->tokens.begin(), event->tokens.end());
    if (event->finish != FinishReason::None) {
      reply.finish = event->finish;
      reply.error = event->error;
      return reply;
    }
  }
}

TEST(ServerEngine, RequestsFromManyThreadsGetTheTokensEachGetsAloneWithoutADrafter) {
  for (bool sampled : {false, true}) {
    FakeTarget target(target_options());
    FakeDrafter drafter(FakeDrafterOptions{.shape = {}, .tap_layers = {1, 3}, .max_depth = 6, .wrong_rate = 0.25});
    FixedClock clock;
    auto lanes = Lanes::create(target, &drafter, LanesOptions{}, clock);
    ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
    const std::vector<Arrival> arrivals = staggered_arrivals(12, sampled, 64, 40);
    std::vector<Reply> replies(arrivals.size());
    {
      Engine engine(**lanes);
      std::vector<std::thread> handlers;
      for (size_t index = 0; index < arrivals.size(); ++index)
        handlers.emplace_back([&, index] {
          ReplyTicket ticket = engine.submit(arrivals[index].request);
          replies[index] = collect(ticket);
        });
      for (std::thread& handler : handlers) handler.join();
      EXPECT_EQ(engine.counters().open_requests, 0);
    }
    expect_replies_equal_alone(replies, run_each_alone_plain(target_options(), arrivals));
    EXPECT_EQ(target.open_streams(), 0u);
  }
}

TEST(ServerEngine, ADroppedTicketCancelsItsStreamAndTheEngineKeepsServing) {
  FakeTarget target(target_options());
  FixedClock clock;
  auto lanes = Lanes::create(target, nullptr, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  Engine engine(**lanes);
  Request endless = make_fake_request(0, false, 64);
  endless.eos_ids = std::vector<int32_t>{};
  endless.max_tokens = 1 << 30;
  {
    ReplyTicket ticket = engine.submit(endless);
    std::optional<StreamEvent> first = ticket.next(kWait);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->finish, FinishReason::None);
  }  // the handler returns early (its client went away)
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (engine.counters().open_requests > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(engine.counters().open_requests, 0);

  const std::vector<Arrival> arrivals = staggered_arrivals(1, false, 64, 20);
  ReplyTicket ticket = engine.submit(arrivals[0].request);
  const Reply reply = collect(ticket);
  EXPECT_EQ(reply.tokens, run_each_alone_plain(target_options(), arrivals)[0].tokens);
  EXPECT_EQ(target.open_streams(), 0u);
  for (const auto& [stream, releases] : target.release_counts()) EXPECT_EQ(releases, 1) << "stream " << stream;
}

TEST(ServerEngine, StoppingTheEngineEndsLiveRequestsWithCancelled) {
  FakeTarget target(target_options());
  FixedClock clock;
  auto lanes = Lanes::create(target, nullptr, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  Request endless = make_fake_request(1, false, 64);
  endless.eos_ids = std::vector<int32_t>{};
  endless.max_tokens = 1 << 30;
  std::optional<ReplyTicket> ticket;
  {
    Engine engine(**lanes);
    ticket.emplace(engine.submit(endless));
    ASSERT_TRUE(ticket->next(kWait).has_value());
  }
  Reply rest = collect(*ticket);
  EXPECT_EQ(rest.finish, FinishReason::Cancelled);
  EXPECT_EQ(target.open_streams(), 0u);
}

}  // namespace
}  // namespace ls::server
