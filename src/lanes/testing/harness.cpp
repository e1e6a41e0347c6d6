// Driving the lanes through arrivals and cancellations; the plain-alone oracle.
#include "lanes/testing/harness.h"

#include <algorithm>
#include <map>

#include "base/check.h"
#include "base/clock.h"
#include "base/hash.h"

namespace ls {

Result<std::vector<Reply>> run_arrivals(Lanes& lanes, const std::vector<Arrival>& arrivals, int max_rounds) {
  std::vector<Reply> replies(arrivals.size());
  std::map<StreamId, size_t> index_of;
  std::vector<bool> submitted(arrivals.size(), false);
  size_t submitted_count = 0;
  auto collect = [&](int round) {
    for (StreamEvent& event : lanes.take_events()) {
      Reply& reply = replies[index_of.at(event.stream)];
      if (!event.tokens.empty()) reply.rounds_with_tokens.push_back(round);
      reply.tokens.insert(reply.tokens.end(), event.tokens.begin(), event.tokens.end());
      if (event.finish != FinishReason::None) {
        reply.finish = event.finish;
        reply.error = event.error;
        reply.stats = event.stats;
      }
    }
  };
  for (int round = 0; round < max_rounds; ++round) {
    for (size_t index = 0; index < arrivals.size(); ++index) {
      if (!submitted[index] && arrivals[index].round <= round) {
        StreamId id = lanes.submit(arrivals[index].request);
        replies[index].stream = id;
        index_of[id] = index;
        submitted[index] = true;
        ++submitted_count;
      }
      if (submitted[index] && arrivals[index].cancel_round == round) lanes.cancel(replies[index].stream);
    }
    collect(round);  // cancellations emit their events outside round()
    if (submitted_count == arrivals.size() && lanes.idle()) return replies;
    Status status = lanes.round();
    collect(round);
    if (!status.ok()) return status;
  }
  return Status(ErrorCode::Internal, "lanes did not finish in " + std::to_string(max_rounds) + " rounds");
}

std::vector<Reply> run_each_alone_plain(const FakeTargetOptions& target_options, const std::vector<Arrival>& arrivals) {
  std::vector<Reply> replies;
  for (const Arrival& arrival : arrivals) {
    FakeTargetOptions options = target_options;
    options.clock = nullptr;
    FakeTarget target(options);
    FixedClock clock;
    LanesOptions lanes_options;
    auto lanes = Lanes::create(target, nullptr, lanes_options, clock);
    Arrival alone = arrival;
    alone.round = 0;
    alone.cancel_round = -1;
    Result<std::vector<Reply>> reply = run_arrivals(**lanes, {alone});
    replies.push_back(reply.ok() ? reply->front() : Reply{});
  }
  return replies;
}

std::vector<Reply> run_each_alone_plain(Target& target, const std::vector<Arrival>& arrivals) {
  std::vector<Reply> replies;
  for (const Arrival& arrival : arrivals) {
    FixedClock clock;
    auto lanes = Lanes::create(target, nullptr, LanesOptions{}, clock);
    Arrival alone = arrival;
    alone.round = 0;
    alone.cancel_round = -1;
    Result<std::vector<Reply>> reply =
        lanes.ok() ? run_arrivals(**lanes, {alone}) : Result<std::vector<Reply>>(lanes.status());
    replies.push_back(reply.ok() ? reply->front() : Reply{});
  }
  return replies;
}

Request make_fake_request(int index, bool sampled, int vocab_size) {
  Request request;
  const uint64_t key = splitmix64(0xabc + index);
  const int prompt_length = 2 + static_cast<int>(key % 8);
  for (int position = 0; position < prompt_length; ++position) {
    request.prompt.push_back(static_cast<int32_t>(splitmix64(key + position) % vocab_size));
  }
  request.max_tokens = 20 + static_cast<int>((key >> 8) % 41);
  if (sampled) {
    request.sampling.temperature = 0.6f + 0.1f * static_cast<float>(index % 6);
    if (index % 3 == 1) request.sampling.top_k = 8;
    if (index % 4 == 2) request.sampling.top_p = 0.9f;
    if (index % 5 == 3) request.sampling.min_p = 0.05f;
    request.has_seed = index % 2 == 0;
    request.sampling.seed = 1000 + index;
  }
  return request;
}

std::vector<Arrival> staggered_arrivals(int streams, bool sampled, int vocab_size, int tokens) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.round = index % 3;
    arrival.request = make_fake_request(index, sampled, vocab_size);
    arrival.request.max_tokens = tokens + index % 9;
    if (index % 4 == 3) arrival.request.draft = false;
    arrivals.push_back(arrival);
  }
  return arrivals;
}

std::vector<Arrival> endless_arrivals(int streams, int vocab_size, int max_tokens,
                                      const std::function<bool(int)>& sampled) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.request = make_fake_request(index, sampled && sampled(index), vocab_size);
    arrival.request.max_tokens = max_tokens;
    arrival.request.eos_ids = std::vector<int32_t>{};
    arrivals.push_back(arrival);
  }
  return arrivals;
}

FakeTargetOptions costed_fake_target(FixedClock& clock, double fixed_ms, double row_ms, int max_rows) {
  FakeTargetOptions options;
  options.max_rows = max_rows;
  options.exact_width = 8;
  options.clock = &clock;
  options.verify_fixed_ms = fixed_ms;
  options.verify_row_ms = row_ms;
  return options;
}

FakeDrafterOptions costed_fake_drafter(FixedClock& clock, double wrong_rate, double row_ms) {
  FakeDrafterOptions options;
  options.max_depth = 6;
  options.wrong_rate = wrong_rate;
  options.clock = &clock;
  options.draft_fixed_ms = 2.0;
  options.draft_row_ms = row_ms;
  return options;
}

NanoLikeFakes::NanoLikeFakes()
    : target(costed_fake_target(clock, 0.19, 0.001, 128)), drafter(costed_fake_drafter(clock, 0.25, 0.004)) {
  target.exact_width = 16;
  target.new_shape_ms = 0.3;
  target.shape_by_windows = true;
  target.device_taps = true;
  drafter.max_depth = 7;
  drafter.draft_fixed_ms = 0.14;
  drafter.confidences = true;
  drafter.restarted_wrong_rate = 0.85;
  drafter.absorb_call_ms = 0.04;
  drafter.absorb_row_ms = 0.0002;
  drafter.device_taps = true;
}

void NanoLikeFakes::weak_sampled_drafter() {
  drafter.wrong_rate = 0.55;
  drafter.reported_wrong_rate = 0.3;
  drafter.sampled_pass_factor = 1.1;
}

std::vector<Arrival> NanoLikeFakes::seeded_sampled_arrivals(int streams, int tokens) const {
  std::vector<Arrival> sampled = arrivals(streams, tokens);
  for (size_t index = 0; index < sampled.size(); ++index) {
    sampled[index].request.sampling.temperature = 0.8f;
    sampled[index].request.sampling.seed = 7 + index;
    sampled[index].request.has_seed = true;
  }
  return sampled;
}

NanoLikeFakes h200_nano_pair() {
  NanoLikeFakes pair;
  pair.target.verify_wide_from = 32;
  pair.target.verify_wide_row_ms = 0.003;
  pair.target.new_shape_ms = 0.25;
  pair.drafter.wrong_rate = 0.12;
  return pair;
}

NanoLikeFakes h200_nano_pair_b1() {
  NanoLikeFakes pair = h200_nano_pair();
  pair.target.verify_fixed_ms = 0.17;
  pair.target.verify_row_ms = 0.003;
  pair.target.verify_wide_row_ms = 0.004;
  pair.drafter.draft_fixed_ms = 0.2;
  pair.drafter.draft_row_ms = 0.0006;
  pair.drafter.absorb_call_ms = 0.15;
  pair.drafter.absorb_row_ms = 0.0002;
  return pair;
}

NanoLikeFakes xeon_nano_pair() {
  NanoLikeFakes pair;
  pair.target.verify_fixed_ms = 0.566;
  pair.target.verify_row_ms = 0.063;
  pair.target.verify_wide_from = 2;
  pair.target.verify_wide_row_ms = 0.1;
  pair.target.new_shape_ms = 0.0;
  pair.target.shape_by_windows = false;
  pair.target.device_taps = false;
  pair.target.cpu_pool = true;
  pair.drafter.draft_fixed_ms = 0.4;
  pair.drafter.draft_row_ms = 0.015;
  pair.drafter.absorb_call_ms = 0.106;
  pair.drafter.absorb_row_ms = 0.00514;
  pair.drafter.device_taps = false;
  pair.drafter.wrong_rate = 0.18;
  pair.drafter.restarted_wrong_rate = 0.35;
  return pair;
}

std::vector<Arrival> long_prompt_arrivals(const NanoLikeFakes& pair, int streams, int tokens, int prompt_tokens) {
  std::vector<Arrival> arrivals = pair.arrivals(streams, tokens);
  for (Arrival& arrival : arrivals) {
    std::vector<int32_t>& prompt = arrival.request.prompt;
    while (static_cast<int>(prompt.size()) < prompt_tokens) prompt.push_back(17 + prompt.size() % 40);
  }
  return arrivals;
}

std::vector<Arrival> NanoLikeFakes::arrivals(int streams, int tokens) const {
  std::vector<Arrival> arrivals = endless_arrivals(streams, target.shape.vocab_size, tokens);
  for (Arrival& arrival : arrivals) {
    while (arrival.request.prompt.size() < 64) arrival.request.prompt.push_back(17 + arrival.request.prompt.size());
  }
  return arrivals;
}

namespace {
// `after` minus `before`, entries that reach zero dropped.
std::map<int, int64_t> counts_since(const std::map<int, int64_t>& before, std::map<int, int64_t> after) {
  for (auto [key, count] : before) {
    if ((after[key] -= count) == 0) after.erase(key);
  }
  return after;
}
}  // namespace

FakeRun run_fakes(FixedClock& clock, const FakeTargetOptions& target_options,
                  const std::optional<FakeDrafterOptions>& drafter_options, const std::vector<Arrival>& arrivals,
                  const LanesOptions& options, const std::function<void(const Lanes&)>& after) {
  FakeTarget target(target_options);
  std::optional<FakeDrafter> drafter;
  if (drafter_options) drafter.emplace(*drafter_options);
  auto lanes = Lanes::create(target, drafter ? &*drafter : nullptr, options, clock);
  LS_CHECK(lanes.ok(), lanes.status().to_string().c_str());
  FakeRun run;
  const double start_ms = clock.now_ms();
  const int64_t setup_passes = drafter ? drafter->passes() : 0;
  const std::map<int, int64_t> setup_by_depth = drafter ? drafter->passes_by_depth() : std::map<int, int64_t>{};
  const std::map<int, int64_t> setup_windows = target.windows_by_drawn_rows();
  auto replies = run_arrivals(**lanes, arrivals);
  LS_CHECK(replies.ok(), replies.status().to_string().c_str());
  run.ms = clock.now_ms() - start_ms;
  run.stats = (*lanes)->stats();
  run.windows_by_drawn_rows = counts_since(setup_windows, target.windows_by_drawn_rows());
  if (drafter) {
    run.drafter_passes = drafter->passes() - setup_passes;
    run.passes_by_depth = counts_since(setup_by_depth, drafter->passes_by_depth());
  }
  run.replies = *replies;
  for (const Reply& reply : run.replies) run.tokens += static_cast<int64_t>(reply.tokens.size());
  if (after) after(**lanes);
  return run;
}

std::vector<std::vector<int32_t>> reply_tokens(const FakeRun& run) {
  std::vector<std::vector<int32_t>> tokens;
  for (const Reply& reply : run.replies) tokens.push_back(reply.tokens);
  return tokens;
}

ExactnessRun run_exactness_case(bool sampled, bool device_taps, const LanesOptions& options,
                                double sampled_pass_factor) {
  FixedClock clock;
  FakeTargetOptions target_options = costed_fake_target(clock, 10.0, 0.5);
  target_options.device_taps = device_taps;
  FakeDrafterOptions drafter_options = costed_fake_drafter(clock, 0.2);
  drafter_options.device_taps = device_taps;
  drafter_options.confidences = true;
  drafter_options.restarted_wrong_rate = 0.6;
  drafter_options.sampled_pass_factor = sampled_pass_factor;
  const std::vector<Arrival> arrivals = staggered_arrivals(16, sampled, target_options.shape.vocab_size, 40);
  ExactnessRun run;
  for (const Reply& reply : run_each_alone_plain(target_options, arrivals)) run.alone.push_back(reply.tokens);
  run.drafted = run_fakes(clock, target_options, drafter_options, arrivals, options);
  return run;
}

std::vector<std::string> inexact_cases(LanesOptions options) {
  options.pricing.sampled_most_streams = 0;
  options.pricing.explore_repay = 0;  // every case explores (a 40-token sampled one would not at the sampled prior)
  std::vector<std::string> cases;
  for (bool sampled : {false, true}) {
    for (bool device : {false, true}) {
      const ExactnessRun run = run_exactness_case(sampled, device, options);
      const std::string name = std::string(sampled ? "sampled" : "greedy") + (device ? ", device taps" : ", host taps");
      if (reply_tokens(run.drafted) != run.alone) cases.push_back(name + ": replies differ");
      if (run.drafted.stats.drafts_verified == 0) cases.push_back(name + ": no draft verified");
    }
  }
  return cases;
}

bool RuleArms::exact() const {
  const std::vector<std::vector<int32_t>> record = reply_tokens(plain);
  return reply_tokens(off) == record && reply_tokens(on) == record;
}

RuleArms run_rule_arms(FixedClock& clock, const FakeTargetOptions& target, const FakeDrafterOptions& drafter,
                       const std::vector<Arrival>& arrivals, const LanesOptions& off, const LanesOptions& on) {
  RuleArms arms;
  arms.plain = run_fakes(clock, target, std::nullopt, arrivals);
  arms.off = run_fakes(clock, target, drafter, arrivals, off);
  arms.on = run_fakes(clock, target, drafter, arrivals, on);
  return arms;
}

}  // namespace ls
