// The server's engine thread over fakes: replies equal each request run alone, dropped tickets cancel, stop drains.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
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

// The requests at once through the engine over a target whose KV pool (pages of 8 positions, set after
// Lanes::create's timing forwards) holds two of their longest histories; `advertised` false: the lanes cannot see
// the pool, so they cannot budget for it (the control).
std::vector<Reply> run_pooled(FakeTarget& target, const std::vector<Arrival>& arrivals, bool advertised) {
  FakeDrafter drafter(FakeDrafterOptions{.shape = {}, .tap_layers = {1, 3}, .max_depth = 6, .wrong_rate = 0.25});
  FixedClock clock;
  LanesOptions lanes_options;
  lanes_options.pricing.always_draft = true;  // full windows every round: the pool's worst case
  auto lanes = Lanes::create(target, &drafter, lanes_options, clock);
  EXPECT_TRUE(lanes.ok()) << lanes.status().to_string();
  const KvBudget pages_of_8{1, 8, (*lanes)->width()};
  int64_t most = 0;
  for (const Arrival& arrival : arrivals) most = std::max(most, pages_of_8.pages_for(arrival.request));
  target.limit_kv_pages(2 * most, 8, advertised);
  std::vector<Reply> replies(arrivals.size());
  // The engine's first round waits until every request is queued, so they meet the pool together however the
  // threads are scheduled (a loaded machine once let the first requests finish before the last were submitted).
  std::atomic<bool> submitted{false};
  target.set_before_forward([&submitted] {
    while (!submitted.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  });
  {
    Engine engine(**lanes);
    std::vector<ReplyTicket> tickets;
    for (const Arrival& arrival : arrivals) tickets.push_back(engine.submit(arrival.request));
    submitted = true;
    for (size_t index = 0; index < tickets.size(); ++index) replies[index] = collect(tickets[index]);
  }
  target.set_before_forward(nullptr);
  return replies;
}

TEST(ServerEngineKvPool, TheBudgetCountsPagesOfPromptRepliesAndOneWindow) {
  EXPECT_EQ(KvBudget::of(TargetFacts{}, 16).pages, 0);  // the CPU target: no fixed pool
  TargetFacts facts;
  facts.kv_pages = 10;
  facts.kv_page_size = 8;
  const KvBudget budget = KvBudget::of(facts, 8);
  EXPECT_EQ(budget.window, 8);
  EXPECT_EQ(budget.most_positions(), 10 * 8 - 8 + 1);
  Request request;
  request.prompt.assign(9, 1);
  request.max_tokens = 8;  // 9 + 7 committed + a window of 8 = 24 positions = 3 pages
  EXPECT_EQ(budget.pages_for(request), 3);
  request.max_tokens = 9;  // 25 positions
  EXPECT_EQ(budget.pages_for(request), 4);
  EXPECT_EQ(KvBudget{}.pages_for(request), 0);
}

TEST(ServerEngineKvPool, RequestsWaitForPagesAndGetTheTokensEachGetsAlone) {
  const std::vector<Arrival> arrivals = endless_arrivals(6, 64, 40, [](int index) { return index % 2 == 1; });
  FakeTarget target(target_options());
  const std::vector<Reply> replies = run_pooled(target, arrivals, true);
  expect_replies_equal_alone(replies, run_each_alone_plain(target_options(), arrivals));
  const int64_t pages = target.facts().kv_pages;
  EXPECT_LE(target.most_pages_held(), pages);
  EXPECT_GT(target.most_pages_held(), pages / 2);  // two requests did run together
  EXPECT_EQ(target.pages_held(), 0);
  EXPECT_EQ(target.open_streams(), 0u);
}

// The control that shows the pool bites: the same requests admitted all at once run out of pages mid-reply.
TEST(ServerEngineKvPool, WithoutTheBudgetTheSameRequestsRunOutOfPages) {
  const std::vector<Arrival> arrivals = endless_arrivals(6, 64, 40, [](int index) { return index % 2 == 1; });
  FakeTarget target(target_options());
  const std::vector<Reply> replies = run_pooled(target, arrivals, false);
  int out_of_pages = 0;
  for (const Reply& reply : replies)
    out_of_pages += reply.finish == FinishReason::Error && reply.error.find("KV pages") != std::string::npos;
  EXPECT_GT(out_of_pages, 0);
}

TEST(ServerEngineKvPool, AWaitingRequestCancelsAndOneThatNeverFitsIsRefusedByName) {
  FakeTarget target(target_options());
  FixedClock clock;
  auto lanes = Lanes::create(target, nullptr, LanesOptions{}, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  target.limit_kv_pages(12, 8);
  Engine engine(**lanes);
  Request endless = make_fake_request(0, false, 64);
  endless.eos_ids = std::vector<int32_t>{};
  endless.max_tokens = 60;  // with a 17-row window: 9 or 10 of the 12 pages
  // The first request holds the engine thread at its first token until the test has queued the others, so the
  // second one is still waiting for pages when its client goes away.
  std::atomic<bool> release{false};
  Request gated = endless;
  gated.stop = [&release](std::span<const int32_t>) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (!release.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return false;
  };
  ReplyTicket running = engine.submit(gated);
  std::optional<ReplyTicket> waiting(engine.submit(endless));  // cannot fit beside the first: it waits
  Request huge = endless;
  huge.max_tokens = 12 * 8;  // more than the whole pool
  ReplyTicket refused = engine.submit(huge);
  waiting.reset();  // its client goes away while it waits
  release = true;
  const Reply first = collect(running);
  EXPECT_EQ(first.finish, FinishReason::Length);
  const Reply refusal = collect(refused);
  EXPECT_EQ(refusal.finish, FinishReason::Error);
  EXPECT_NE(refusal.error.find("OutOfMemory"), std::string::npos) << refusal.error;
  EXPECT_TRUE(refusal.tokens.empty());
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (engine.counters().open_requests > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(engine.counters().open_requests, 0);
  EXPECT_EQ(target.pages_held(), 0);
  EXPECT_EQ(target.release_counts().size(), 1u);  // the cancelled and the refused request never reached the target
}

}  // namespace
}  // namespace ls::server
