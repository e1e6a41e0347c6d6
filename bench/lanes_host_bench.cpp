// The lanes' own host work per round, drafted against plain, on the nano-like fakes (lanes18).
//
// lanes_host_bench [--streams N] [--tokens N] [--arm plain|drafted|both] [--repeats N] [--rounds FIRST:[LAST]]
//                  [--quiet-reprice N] [--json PATH]
//
// The fakes' fixed clock makes every decision repeatable; the target's forwards and the drafter's calls are
// wrapped, so what is left of a round is the lanes' own work (as LanesStats' round - forward - drafter on a real
// pair). Printed per arm: rounds, host microseconds a round by the wall clock (median over repeats; a noisy host
// moves it), and the run's counters. Under callgrind (`valgrind --tool=callgrind --collect-atstart=no
// lanes_host_bench --arm drafted`) only that host work is collected: instruction counts a round that repeat to the
// instruction, and the functions they go to.
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lanes/lanes.h"
#include "lanes/testing/harness.h"

namespace ls::bench {
namespace {

using json = nlohmann::json;

// Wall time spent inside the wrapped calls; callgrind collects only outside them while a round runs.
struct CallTimer {
  bool in_round = false;
  double inside_ns = 0;
  struct Scope {
    CallTimer& timer;
    std::chrono::steady_clock::time_point start;
    explicit Scope(CallTimer& t) : timer(t), start(std::chrono::steady_clock::now()) {
      if (timer.in_round) CALLGRIND_TOGGLE_COLLECT;
    }
    ~Scope() {
      if (timer.in_round) CALLGRIND_TOGGLE_COLLECT;
      timer.inside_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    }
  };
};

class TimedTarget final : public Target {
 public:
  TimedTarget(Target& inner, CallTimer& timer) : inner_(inner), timer_(timer) {}
  const TargetFacts& facts() const override { return inner_.facts(); }
  Status set_taps(std::span<const int> layers) override { return inner_.set_taps(layers); }
  Result<Verified> forward(std::span<const Window> windows) override {
    CallTimer::Scope scope(timer_);
    return inner_.forward(windows);
  }
  Status commit(StreamId stream, int kept) override { return inner_.commit(stream, kept); }
  int64_t committed_length(StreamId stream) const override { return inner_.committed_length(stream); }
  void release(StreamId stream) override { inner_.release(stream); }
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override { return inner_.embed(tokens, out); }
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override {
    return inner_.head(hidden, rows, out);
  }
  bool keep_taps_on_device(bool on) override { return inner_.keep_taps_on_device(on); }

 private:
  Target& inner_;
  CallTimer& timer_;
};

class TimedDrafter final : public Drafter {
 public:
  TimedDrafter(Drafter& inner, CallTimer& timer) : inner_(inner), timer_(timer) {}
  const DraftFacts& facts() const override { return inner_.facts(); }
  Status absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) override {
    CallTimer::Scope scope(timer_);
    return inner_.absorb(stream, start, rows, taps);
  }
  std::vector<Draft> draft(std::span<const DraftRequest> requests) override {
    CallTimer::Scope scope(timer_);
    return inner_.draft(requests);
  }
  void release(StreamId stream) override {
    CallTimer::Scope scope(timer_);
    inner_.release(stream);
  }
  Status absorb_device(std::span<const TapRows> rows, const DeviceTaps& taps) override {
    CallTimer::Scope scope(timer_);
    return inner_.absorb_device(rows, taps);
  }
  Status restart(StreamId stream, int64_t position) override {
    CallTimer::Scope scope(timer_);
    return inner_.restart(stream, position);
  }
  Status settle() override {
    CallTimer::Scope scope(timer_);
    return inner_.settle();
  }

 private:
  Drafter& inner_;
  CallTimer& timer_;
};

struct ArmRun {
  int64_t rounds = 0;
  double host_ns = 0;  // wall ns of the rounds outside the wrapped calls
  LanesStats stats;
  int64_t depth_allocations = 0;
  int64_t group_checks = 0;
  int64_t gate_allocations = 0;
};

// Rounds [first_round, last_round) are timed and collected (the first rounds admit and explore; later ones are the
// steady state).
struct RoundRange {
  int64_t first = 0;
  int64_t last = INT64_MAX;
  bool covers(int64_t round) const { return round >= first && round < last; }
};

ArmRun run_arm(bool drafted, int streams, int tokens, const RoundRange& range, int quiet_reprice) {
  NanoLikeFakes fakes = h200_nano_pair();
  FakeTarget fake_target(fakes.target);
  FakeDrafter fake_drafter(fakes.drafter);
  CallTimer timer;
  TimedTarget target(fake_target, timer);
  TimedDrafter drafter(fake_drafter, timer);
  LanesOptions options;
  options.max_streams = streams;
  if (quiet_reprice > 0) options.pricing.quiet_reprice_every = quiet_reprice;
  auto created = Lanes::create(target, drafted ? &drafter : nullptr, options, fakes.clock);
  if (!created.ok()) {
    std::fprintf(stderr, "lanes_host_bench: %s\n", created.status().to_string().c_str());
    std::exit(1);
  }
  Lanes& lanes = **created;
  for (const Arrival& arrival : fakes.arrivals(streams, tokens)) lanes.submit(arrival.request);
  ArmRun run;
  timer.inside_ns = 0;  // (the load-time timing's calls)
  double round_ns = 0;
  double outside_ns = 0;  // time in the wrapped calls during rounds left out
  for (int64_t round = 0; !lanes.idle(); ++round) {
    const bool counted = range.covers(round);
    const double inside_before = timer.inside_ns;
    timer.in_round = counted;
    if (counted) CALLGRIND_TOGGLE_COLLECT;
    const auto start = std::chrono::steady_clock::now();
    const Status status = lanes.round();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (counted) {
      CALLGRIND_TOGGLE_COLLECT;
      round_ns += ns;
      ++run.rounds;
    } else {
      outside_ns += timer.inside_ns - inside_before;
    }
    timer.in_round = false;
    if (!status.ok()) {
      std::fprintf(stderr, "lanes_host_bench: %s\n", status.to_string().c_str());
      std::exit(1);
    }
    lanes.take_events();
  }
  run.host_ns = round_ns - (timer.inside_ns - outside_ns);
  run.stats = lanes.stats();
  run.depth_allocations = lanes.pricing().depth_allocations();
  run.group_checks = lanes.pricing().group_checks();
  run.gate_allocations = lanes.pricing().gate_allocations();
  return run;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

int main_bench(int argc, char** argv) {
  int streams = 8, tokens = 256, repeats = 9;
  RoundRange range;
  int quiet_reprice = 0;  // PricingOptions::quiet_reprice_every (0: the default; profiling the quiet decisions alone)
  std::string arm = "both", json_path;
  for (int index = 1; index + 1 < argc; index += 2) {
    const std::string flag = argv[index], value = argv[index + 1];
    if (flag == "--streams") streams = std::atoi(value.c_str());
    else if (flag == "--tokens") tokens = std::atoi(value.c_str());
    else if (flag == "--repeats") repeats = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--arm") arm = value;
    else if (flag == "--json") json_path = value;
    else if (flag == "--quiet-reprice") quiet_reprice = std::atoi(value.c_str());
    else if (flag == "--rounds") {
      // FIRST:LAST (LAST empty: to the end)
      const size_t colon = value.find(':');
      range.first = std::atoll(value.substr(0, colon).c_str());
      if (colon != std::string::npos && colon + 1 < value.size()) range.last = std::atoll(value.substr(colon + 1).c_str());
    }
    else {
      std::fprintf(stderr, "lanes_host_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  json out = json::array();
  std::printf("streams %d, %d tokens, the H200-like nano fakes; host us a round: median of %d runs (wall clock)\n", streams,
              tokens, repeats);
  std::printf("%-8s %7s %9s %7s %7s %8s %8s %8s %7s\n", "arm", "rounds", "host us/r", "passes", "drafts", "tap rows",
              "allocs", "groupchk", "gates");
  for (const bool drafted : {false, true}) {
    if ((drafted && arm == "plain") || (!drafted && arm == "drafted")) continue;
    std::vector<double> per_round;
    ArmRun last;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      last = run_arm(drafted, streams, tokens, range, quiet_reprice);
      per_round.push_back(last.host_ns / 1000.0 / static_cast<double>(std::max<int64_t>(last.rounds, 1)));
    }
    const double host_us = median(per_round);
    std::printf("%-8s %7lld %9.3f %7lld %7lld %8lld %8lld %8lld %7lld\n", drafted ? "drafted" : "plain",
                static_cast<long long>(last.rounds), host_us, static_cast<long long>(last.stats.drafter_passes),
                static_cast<long long>(last.stats.drafts_verified), static_cast<long long>(last.stats.tap_rows),
                static_cast<long long>(last.depth_allocations), static_cast<long long>(last.group_checks),
                static_cast<long long>(last.gate_allocations));
    out.push_back({{"arm", drafted ? "drafted" : "plain"}, {"streams", streams}, {"tokens", tokens},
                   {"rounds", last.rounds}, {"host_us_per_round", host_us}, {"passes", last.stats.drafter_passes},
                   {"drafts_verified", last.stats.drafts_verified}, {"tap_rows", last.stats.tap_rows},
                   {"depth_allocations", last.depth_allocations}, {"group_checks", last.group_checks},
                   {"gate_allocations", last.gate_allocations}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) { return ls::bench::main_bench(argc, argv); }
