// Lanes benchmark: plain vs drafted tokens/s, mean accepted length and drafted/verified rows at 1/4/8/16 streams.
//
// lanes_bench [--tokens N] [--wrong-rate R] [--json PATH]                 fakes, fixed-clock cost model
// lanes_bench --model DIR [--threads T] [--tokens N] [--prompts FILE]     a real target (wall clock); prompts from an
//             [--drafter DIR | --wrong-rate R] [--repeats N]             eval_prompts.json ("code" entries, tokenized
//                                                                         with the model's tokenizer) or random ids;
//                                                                         the DSpark drafter in DIR, or without it a
//                                                                         drafter replaying the plain reply (an oracle
//                                                                         right at 1 - R)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "draft/load.h"

#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "model/load.h"
#include "text/tokenizer.h"

namespace ls {
namespace {

struct BenchOptions {
  int tokens = 256;
  double wrong_rate = 0.2;
  std::string json_path = "lanes_bench.json";
  std::string model_dir;
  std::string drafter_dir;
  std::string prompts_path;
  int prompt_tokens = 192;  // leading tokens of each eval prompt
  int threads = 2;
  int repeats = 1;  // real target: plain and drafted alternate this many times; the fastest of each counts
};

// Leading tokens of the "code" prompts of an eval_prompts.json, tokenized with the model directory's tokenizer.
Result<std::vector<std::vector<int32_t>>> load_prompts(const BenchOptions& options) {
  LS_ASSIGN_OR_RETURN(text::Tokenizer tokenizer, text::Tokenizer::load(options.model_dir));
  std::ifstream file(options.prompts_path);
  if (!file) return Status(ErrorCode::NotFound, "cannot open " + options.prompts_path);
  nlohmann::json prompts = nlohmann::json::parse(file, nullptr, false);
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

struct Measured {
  double ms = 0;
  int64_t tokens = 0;
  LanesStats stats;
  double tokens_per_s() const { return ms > 0 ? 1000.0 * static_cast<double>(tokens) / ms : 0.0; }
};

std::vector<Arrival> bench_requests(int streams, int tokens, int vocab_size,
                                    const std::vector<std::vector<int32_t>>& prompts = {}) {
  std::vector<Arrival> arrivals;
  for (int index = 0; index < streams; ++index) {
    Arrival arrival;
    arrival.request = make_fake_request(index, false, vocab_size);
    if (!prompts.empty()) arrival.request.prompt = prompts[index % prompts.size()];
    arrival.request.max_tokens = tokens;
    arrival.request.eos_ids = std::vector<int32_t>{};  // every stream runs to max_tokens
    arrivals.push_back(arrival);
  }
  return arrivals;
}

Result<Measured> measure(Target& target, Drafter* drafter, Clock& clock, const std::vector<Arrival>& arrivals) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Lanes> lanes, Lanes::create(target, drafter, LanesOptions{}, clock));
  const double start_ms = clock.now_ms();
  LS_ASSIGN_OR_RETURN(std::vector<Reply> replies, run_arrivals(*lanes, arrivals));
  Measured measured;
  measured.ms = clock.now_ms() - start_ms;
  measured.stats = lanes->stats();
  for (const Reply& reply : replies) measured.tokens += static_cast<int64_t>(reply.tokens.size());
  return measured;
}

nlohmann::json row_json(int streams, const Measured& plain, const Measured& drafted) {
  const LanesStats& stats = drafted.stats;
  return {{"streams", streams},
          {"plain_tokens_per_s", plain.tokens_per_s()},
          {"drafted_tokens_per_s", drafted.tokens_per_s()},
          {"speedup", plain.tokens_per_s() > 0 ? drafted.tokens_per_s() / plain.tokens_per_s() : 0.0},
          {"mean_accepted_length",
           stats.windows_verified > 0 ? 1.0 + double(stats.drafts_accepted) / double(stats.windows_verified) : 0.0},
          {"drafted_rows", stats.drafts_verified},
          {"verified_rows", stats.rows_verified},
          {"drafter_passes", stats.drafter_passes},
          {"verify_forwards", stats.verify_forwards}};
}

void print_row(const nlohmann::json& row) {
  std::printf("%7d %12.1f %12.1f %8.2fx %9.2f %10lld %10lld %8lld\n", row["streams"].get<int>(),
              row["plain_tokens_per_s"].get<double>(), row["drafted_tokens_per_s"].get<double>(),
              row["speedup"].get<double>(), row["mean_accepted_length"].get<double>(),
              static_cast<long long>(row["drafted_rows"].get<int64_t>()),
              static_cast<long long>(row["verified_rows"].get<int64_t>()),
              static_cast<long long>(row["drafter_passes"].get<int64_t>()));
}

// One stream count on the fakes: both runs share the cost model through one fixed clock.
Result<nlohmann::json> fake_cell(const BenchOptions& options, int streams) {
  FixedClock clock;
  FakeTargetOptions target_options;
  target_options.max_rows = 64;
  target_options.exact_width = 8;
  target_options.clock = &clock;
  FakeDrafterOptions drafter_options;
  drafter_options.max_depth = 7;
  drafter_options.wrong_rate = options.wrong_rate;
  drafter_options.clock = &clock;
  std::vector<Arrival> arrivals = bench_requests(streams, options.tokens, target_options.shape.vocab_size);
  FakeTarget plain_target(target_options);
  LS_ASSIGN_OR_RETURN(Measured plain, measure(plain_target, nullptr, clock, arrivals));
  FakeTarget drafted_target(target_options);
  FakeDrafter drafter(drafter_options);
  LS_ASSIGN_OR_RETURN(Measured drafted, measure(drafted_target, &drafter, clock, arrivals));
  return row_json(streams, plain, drafted);
}

// One stream count on a real target: plain first (its replies feed the replaying drafter), then drafted.
Result<nlohmann::json> real_cell(const BenchOptions& options, Target& target, Drafter* dspark, int streams,
                                 const std::vector<std::vector<int32_t>>& prompts) {
  WallClock clock;
  std::vector<Arrival> arrivals = bench_requests(streams, options.tokens, target.facts().vocab_size, prompts);
  Measured plain;
  Measured drafted;
  for (int repeat = 0; repeat < std::max(1, options.repeats); ++repeat) {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<Lanes> plain_lanes, Lanes::create(target, nullptr, LanesOptions{}, clock));
    const double start_ms = clock.now_ms();
    LS_ASSIGN_OR_RETURN(std::vector<Reply> replies, run_arrivals(*plain_lanes, arrivals));
    Measured plain_run;
    plain_run.ms = clock.now_ms() - start_ms;
    plain_run.stats = plain_lanes->stats();
    RecordedDrafterOptions drafter_options;
    drafter_options.vocab_size = target.facts().vocab_size;
    drafter_options.wrong_rate = options.wrong_rate;
    RecordedDrafter replaying(drafter_options);
    for (size_t index = 0; index < arrivals.size(); ++index) {
      plain_run.tokens += static_cast<int64_t>(replies[index].tokens.size());
      std::vector<int32_t> sequence = arrivals[index].request.prompt;
      sequence.insert(sequence.end(), replies[index].tokens.begin(), replies[index].tokens.end());
      replaying.expect(static_cast<StreamId>(index + 1), sequence);
    }
    LS_ASSIGN_OR_RETURN(Measured drafted_run,
                        measure(target, dspark != nullptr ? dspark : &replaying, clock, arrivals));
    if (repeat == 0 || plain_run.ms < plain.ms) plain = plain_run;
    if (repeat == 0 || drafted_run.ms < drafted.ms) drafted = drafted_run;
  }
  return row_json(streams, plain, drafted);
}

int run(const BenchOptions& options) {
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> dspark;
  std::vector<std::vector<int32_t>> prompts;
  if (!options.model_dir.empty()) {
    LoadOptions load;
    load.threads = options.threads;
    load.exact_width_probe = 8;
    auto loaded = load_target(options.model_dir, load);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
      return 1;
    }
    target = std::move(*loaded);
    if (!options.drafter_dir.empty()) {
      DrafterOptions drafter_options;
      drafter_options.threads = options.threads;
      drafter_options.max_streams = 16;
      auto drafter = load_drafter(options.drafter_dir, *target, drafter_options);
      if (!drafter.ok()) {
        std::fprintf(stderr, "%s\n", drafter.status().to_string().c_str());
        return 1;
      }
      dspark = std::move(*drafter);
    }
    if (!options.prompts_path.empty()) {
      auto loaded_prompts = load_prompts(options);
      if (!loaded_prompts.ok()) {
        std::fprintf(stderr, "%s\n", loaded_prompts.status().to_string().c_str());
        return 1;
      }
      prompts = std::move(*loaded_prompts);
    }
  }
  std::printf("lanes bench: %s, %d tokens per stream, drafter %s (wrong rate %.2f when replaying or fake)\n",
              target ? options.model_dir.c_str() : "fake pair (fixed-clock cost model)", options.tokens,
              dspark ? options.drafter_dir.c_str() : (target ? "replaying the plain reply" : "fake"),
              options.wrong_rate);
  std::printf("%7s %12s %12s %9s %9s %10s %10s %8s\n", "streams", "plain tok/s", "drafted tok/s", "speedup",
              "accepted", "drafted", "verified", "passes");
  nlohmann::json rows = nlohmann::json::array();
  for (int streams : {1, 4, 8, 16}) {
    Result<nlohmann::json> row =
        target ? real_cell(options, *target, dspark.get(), streams, prompts) : fake_cell(options, streams);
    if (!row.ok()) {
      std::fprintf(stderr, "%d streams: %s\n", streams, row.status().to_string().c_str());
      return 1;
    }
    print_row(*row);
    rows.push_back(*row);
  }
  nlohmann::json out = {{"bench", "lanes"},
                        {"backend", target ? options.model_dir : "fake"},
                        {"drafter", dspark ? options.drafter_dir : (target ? "replay" : "fake")},
                        {"prompts", options.prompts_path},
                        {"tokens_per_stream", options.tokens},
                        {"wrong_rate", options.wrong_rate},
                        {"rows", rows}};
  std::ofstream(options.json_path) << out.dump(2) << "\n";
  std::printf("wrote %s\n", options.json_path.c_str());
  return 0;
}

}  // namespace
}  // namespace ls

int main(int argc, char** argv) {
  ls::BenchOptions options;
  for (int index = 1; index < argc; ++index) {
    const std::string flag = argv[index];
    const bool has_value = index + 1 < argc;
    if (flag == "--tokens" && has_value) {
      options.tokens = std::atoi(argv[++index]);
    } else if (flag == "--wrong-rate" && has_value) {
      options.wrong_rate = std::atof(argv[++index]);
    } else if (flag == "--json" && has_value) {
      options.json_path = argv[++index];
    } else if (flag == "--model" && has_value) {
      options.model_dir = argv[++index];
    } else if (flag == "--drafter" && has_value) {
      options.drafter_dir = argv[++index];
    } else if (flag == "--repeats" && has_value) {
      options.repeats = std::atoi(argv[++index]);
    } else if (flag == "--prompts" && has_value) {
      options.prompts_path = argv[++index];
    } else if (flag == "--prompt-tokens" && has_value) {
      options.prompt_tokens = std::atoi(argv[++index]);
    } else if (flag == "--threads" && has_value) {
      options.threads = std::atoi(argv[++index]);
    } else {
      std::fprintf(stderr, "usage: lanes_bench [--tokens N] [--wrong-rate R] [--json PATH] [--model DIR] "
                           "[--drafter DIR] [--prompts FILE] [--prompt-tokens N] [--threads T] [--repeats N]\n");
      return 2;
    }
  }
  return ls::run(options);
}
