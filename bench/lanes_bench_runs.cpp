// lanes_bench's runs: requests, one run of the lanes under the bench's switches, and the arms of one stream count.
#include "lanes_bench_runs.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "base/hash.h"
#include "draft/synthetic/synthetic_acceptance_drafter.h"
#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "model/shape_counts.h"
#include "text/tokenizer.h"

namespace ls::bench {

Result<std::vector<std::vector<int32_t>>> load_prompts(const BenchOptions& options) {
  LS_ASSIGN_OR_RETURN(text::Tokenizer tokenizer, text::Tokenizer::load(options.model_dir));
  std::ifstream file(options.prompts_path);
  if (!file) return Status(ErrorCode::NotFound, "cannot open " + options.prompts_path);
  json prompts = json::parse(file, nullptr, false);
  if (prompts.is_discarded() || !prompts.contains("code")) {
    return Status(ErrorCode::InvalidArgument, options.prompts_path + " has no \"code\" prompts");
  }
  std::vector<std::vector<int32_t>> encoded;
  for (const auto& entry : prompts["code"]) {
    LS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.encode(entry.value("prompt", ""), true));
    if (static_cast<int>(ids.size()) > options.prompt_tokens) ids.resize(options.prompt_tokens);
    if (!ids.empty()) encoded.push_back(std::move(ids));
  }
  return encoded;
}

std::vector<std::vector<int32_t>> random_prompts(int length, int vocab_size) {
  std::vector<std::vector<int32_t>> prompts(16);
  for (size_t prompt = 0; prompt < prompts.size(); ++prompt) {
    for (int index = 0; index < length; ++index) {
      const uint64_t bits = splitmix64((prompt << 32) ^ static_cast<uint64_t>(index) ^ 0x9e0ull);
      prompts[prompt].push_back(static_cast<int32_t>(16 + bits % static_cast<uint64_t>(std::max(1, vocab_size - 16))));
    }
  }
  return prompts;
}

namespace {

std::vector<Arrival> bench_requests(int streams, int tokens, int vocab_size, bool sampled,
                                    const std::vector<std::vector<int32_t>>& prompts = {}) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.request = make_fake_request(index, sampled, vocab_size);
    if (!prompts.empty()) arrival.request.prompt = prompts[index % prompts.size()];
    arrival.request.max_tokens = tokens;
    arrival.request.eos_ids = std::vector<int32_t>{};  // every stream runs to max_tokens
    arrivals.push_back(arrival);
  }
  return arrivals;
}

// Submits every request at once and runs rounds until idle, timing the first round apart.
Result<Measured> run_once(Target& target, Drafter* drafter, Clock& clock, const std::vector<Arrival>& arrivals,
                          const LanesSwitches& switches, int max_rows = 0, json* tables = nullptr,
                          int settle_ms = 0) {
  LanesOptions lanes_options;
  lanes_options.max_rows = max_rows;
  switches.apply(lanes_options);
  lanes_options.max_streams = static_cast<int>(arrivals.size());  // the engine sized for this cell's concurrency
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Lanes> lanes, Lanes::create(target, drafter, lanes_options, clock));
  if (tables != nullptr && drafter != nullptr) *tables = tables_json(lanes->pricing().tables(), lanes->max_rows());
  // --settle-ms: the host idles before the run (does a load-time timing's after-effect pass?).
  if (settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  Measured measured;
  measured.streams = static_cast<int>(arrivals.size());
  std::map<StreamId, size_t> index_of;
  const WallClock wall;
  const ShapeCounts shapes_before = shape_counts();
  const double wall_start_ms = wall.now_ms();
  const double start_ms = clock.now_ms();
  for (size_t index = 0; index < arrivals.size(); ++index) index_of[lanes->submit(arrivals[index].request)] = index;
  measured.replies.resize(arrivals.size());
  for (int round = 0; !lanes->idle(); ++round) {
    LS_RETURN_IF_ERROR(lanes->round());
    if (round == 0) {
      measured.first_round_ms = clock.now_ms() - start_ms;
      measured.first_round = lanes->stats();
    }
    for (const StreamEvent& event : lanes->take_events()) {
      if (event.finish == FinishReason::Error) return Status(ErrorCode::Internal, "stream failed: " + event.error);
      std::vector<int32_t>& reply = measured.replies[index_of.at(event.stream)];
      reply.insert(reply.end(), event.tokens.begin(), event.tokens.end());
    }
  }
  measured.ms = clock.now_ms() - start_ms;
  measured.host_wall_ms = wall.now_ms() - wall_start_ms;
  measured.stats = lanes->stats();
  measured.shapes = {shape_counts().first_sightings - shapes_before.first_sightings,
                     shape_counts().captures - shapes_before.captures};
  for (const std::vector<int32_t>& reply : measured.replies) measured.tokens += static_cast<int64_t>(reply.size());
  return measured;
}

// The drafter of one drafted run: the DSpark drafter, or the replaying one, optionally under synthetic acceptance.
struct DraftedArm {
  std::unique_ptr<RecordedDrafter> replaying;
  std::unique_ptr<SyntheticAcceptanceDrafter> synthetic;
  Drafter* drafter = nullptr;
};

DraftedArm drafted_arm(const BenchOptions& options, const Target& target, Drafter* dspark,
                       const std::vector<Arrival>& arrivals, const std::vector<std::vector<int32_t>>& record,
                       const AcceptanceProfile& profile) {
  DraftedArm arm;
  std::vector<std::vector<int32_t>> sequences;
  for (size_t index = 0; index < arrivals.size(); ++index) {
    sequences.push_back(arrivals[index].request.prompt);
    sequences.back().insert(sequences.back().end(), record[index].begin(), record[index].end());
  }
  arm.drafter = dspark;
  if (!dspark) {
    RecordedDrafterOptions replay;
    replay.vocab_size = target.facts().vocab_size;
    replay.wrong_rate = options.wrong_rate;
    arm.replaying = std::make_unique<RecordedDrafter>(replay);
    for (size_t index = 0; index < sequences.size(); ++index) arm.replaying->expect(StreamId(index + 1), sequences[index]);
    arm.drafter = arm.replaying.get();
  }
  if (options.synthetic_acceptance > 0) {
    arm.synthetic = std::make_unique<SyntheticAcceptanceDrafter>(
        *arm.drafter, SyntheticAcceptanceOptions{profile, 0x5e1ec7, target.facts().vocab_size});
    for (size_t index = 0; index < sequences.size(); ++index) arm.synthetic->expect(StreamId(index + 1), sequences[index]);
    arm.drafter = arm.synthetic.get();
  }
  return arm;
}

}  // namespace

Result<json> fake_cell(const BenchOptions& options, int streams) {
  FixedClock clock;
  FakeTargetOptions target_options;
  target_options.max_rows = 64;
  target_options.exact_width = 8;
  target_options.clock = &clock;
  FakeDrafterOptions drafter_options;
  drafter_options.max_depth = 7;
  drafter_options.wrong_rate = options.wrong_rate;
  drafter_options.clock = &clock;
  std::vector<Arrival> arrivals = bench_requests(streams, options.tokens, target_options.shape.vocab_size, options.sampled);
  FakeTarget plain_target(target_options);
  LS_ASSIGN_OR_RETURN(Measured plain, run_once(plain_target, nullptr, clock, arrivals, options.switches));
  FakeTarget drafted_target(target_options);
  FakeDrafter drafter(drafter_options);
  json tables;
  LS_ASSIGN_OR_RETURN(Measured drafted,
                      run_once(drafted_target, &drafter, clock, arrivals, options.switches, 0, &tables));
  json row = row_json(streams, {plain}, {drafted}, drafted.replies == plain.replies);
  row["tables"] = tables;
  return row;
}


Result<json> real_cell(const BenchOptions& options, Target& target, Drafter* dspark, int streams,
                       const std::vector<std::vector<int32_t>>& prompts, const AcceptanceProfile& profile) {
  WallClock clock;
  std::vector<Arrival> arrivals = bench_requests(streams, options.tokens, target.facts().vocab_size, options.sampled, prompts);
  std::vector<Measured> plain_runs, drafted_runs;
  bool exact = true;
  int64_t mismatches = 0;
  json tables;
  auto run_plain = [&]() -> Status {
    if (options.plain_after_drafted_setup && dspark != nullptr) {
      // The drafted arm's load-time timing (verify, sampled verify, absorbs, passes) and nothing else: the plain run
      // then starts from the state the drafted run starts from.
      LanesOptions setup;
      setup.max_rows = options.max_rows;
      options.switches.apply(setup);
      setup.max_streams = static_cast<int>(arrivals.size());
      LS_ASSIGN_OR_RETURN(std::unique_ptr<Lanes> drafted_setup, Lanes::create(target, dspark, setup, clock));
    }
    LS_ASSIGN_OR_RETURN(Measured plain, run_once(target, nullptr, clock, arrivals, options.switches, options.max_rows,
                                                 nullptr, options.settle_ms));
    if (!plain_runs.empty()) exact = exact && plain.replies == plain_runs.front().replies;
    plain_runs.push_back(std::move(plain));
    return ok_status();
  };
  auto run_drafted = [&]() -> Status {
    DraftedArm arm = drafted_arm(options, target, dspark, arrivals, plain_runs.front().replies, profile);
    LS_ASSIGN_OR_RETURN(Measured drafted,
                        run_once(target, arm.drafter, clock, arrivals, options.switches, options.max_rows,
                                 tables.is_null() ? &tables : nullptr, options.settle_ms));
    exact = exact && drafted.replies == plain_runs.front().replies;
    if (arm.synthetic) mismatches += arm.synthetic->record_mismatches();
    drafted_runs.push_back(std::move(drafted));
    return ok_status();
  };
  // A B B A A B ...: each arm runs first in half the pairs, so a drift of the host's speed does not favour one.
  for (int repeat = 0; repeat < std::max(1, options.repeats); ++repeat) {
    if (repeat % 2 == 0) {
      LS_RETURN_IF_ERROR(run_plain());
      LS_RETURN_IF_ERROR(run_drafted());
    } else {
      LS_RETURN_IF_ERROR(run_drafted());
      LS_RETURN_IF_ERROR(run_plain());
    }
  }
  json row = row_json(streams, plain_runs, drafted_runs, exact);
  row["record_mismatches"] = mismatches;
  row["tables"] = tables;
  return row;
}

}  // namespace ls::bench
