// Lanes benchmark: plain vs drafted tokens/s, accepted length and drafted/verified rows, per stream count.
//
// lanes_bench [--tokens N] [--wrong-rate R] [--json PATH]                 fakes, fixed-clock cost model
// lanes_bench --model DIR [--device cpu|cuda] [--threads T]                a real target (wall clock)
//             [--streams 1,4,8,16,32,64] [--tokens N] [--repeats N]
//             [--prompts FILE [--prompt-tokens N] | --prompt-tokens N]   eval_prompts.json "code" prompts, or random
//                                                                         ids (synth checkpoints have no tokenizer)
//             [--drafter DIR [--drafter-device auto|cpu|cuda] [--drafter-bits 0|8]   the DSpark drafter in DIR (auto: on --device,
//              | --wrong-rate R]                                         the CPU if CUDA refuses), or a drafter
//                                                                         replaying the plain reply (right at 1 - R)
//             [--synthetic-acceptance MEAN] [--sampled 0|1] [--max-rows R] [--machine TEXT] [--commit SHA]
//             [--taps device|host]                                         host: no device taps (A/B of the absorb path)
//             [--debug 1]                                                  the lanes' pricing traces on stderr
//             [--admit scout|all|whole[:SHARE]|priced]                     all: every prompt tapped while the drafter
//                                                                         is unproven where the prior pays (before
//                                                                         6); whole: only where its round saves
//                                                                         SHARE (0.10) of plain's time (lanes12);
//                                                                         priced (the default since s14B): where
//                                                                         the prior's gain repays every prompt's
//                                                                         absorb (lanes15); scout: the scout alone
//             [--quiet-reprice N]                                          dormant-only decisions run the allocator
//                                                                         every N-th time (PricingOptions)
//             [--explore-gate X[,Y]]                                       the scout only where the prior's gain over
//                                                                         the tokens left is X times its one-off, or
//                                                                         an always-right one's Y times (lanes11;
//                                                                         0 = off; default 3,15)
//             [--pass-timing alone|after-forward]                          after-forward: each load-time pass timed
//                                                                         right after a target forward (lanes9)
//             [--plain-after drafted-setup|none]                           drafted-setup (the default since lanes15):
//                                                                         each plain run follows a drafted arm's
//                                                                         Lanes::create (its load-time timing, once
//                                                                         per server start) as the drafted run does,
//                                                                         so both arms start from the same state;
//                                                                         none: plain after its own setup only
//             [--settle-ms MS]                                             each run starts MS ms after its lanes'
//                                                                         setup, idle (lanes14)
//             [--loss-stop off|on]                                         on: a stream alone in its rounds stops
//                                                                         drafting once its drafting rounds lost
//                                                                         to plain over 3 of them (lanes14)
//             [--sampled-prior X|off]                                      X: an unproven drafter's sampled rounds
//                                                                         priced at a flat conditional X (lanes15;
//                                                                         0.5 by default since s14A); off: at the
//                                                                         greedy prior
//             [--overhead with-absorbs|without-absorbs]                    without-absorbs: the device absorb after a
//                                                                         commit left out of the host overhead every
//                                                                         round is priced with (lanes19; lost b3's
//                                                                         nano 4 streams, off)
//             [--wake-needs-landed on|off]                                 off: the pool wakes dormant streams though
//                                                                         no verified window kept a draft (before
//                                                                         lanes19)
//             [--scout-probes N]                                           N streams probe together where the scout
//                                                                         probes over a restarted context (lanes19;
//                                                                         1 by default)
//
// Per stream count, plain (A) and drafted (B) run in pairs A B, B A, A B, ... `--repeats` times; medians are
// reported. The first plain run's replies are the record: every later plain and drafted reply must equal it
// (column "exact"). Under each row: where a decode round's time goes in each arm (target forwards, drafter calls,
// the lanes' own host work; medians) and the cost tables the drafted arm's pricing started from.
// --synthetic-acceptance (benchmarks only): the drafter still runs, but its proposals are the recorded reply, right
// per position with a constant conditional q whose mean accepted length (bonus included) over full-depth windows
// is MEAN (draft/synthetic/acceptance_profile.h). "accepted" = 1 + drafts kept / windows that carried drafts
// (bonus included); "tok/win" = 1 + drafts kept / all verified windows. Decode tok/s exclude the first round
// (every stream's prefill); speedup is drafted / plain decode tok/s.
//
// Files: lanes_bench_switches.* (the flags above that select pricing rules), lanes_bench_runs.* (requests, one run,
// a stream count's arms), lanes_bench_report.* (a row's JSON and the printed table and splits).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "draft/load.h"
#include "draft/synthetic/acceptance_profile.h"
#include "lanes/testing/recorded_drafter.h"
#include "lanes_bench_report.h"
#include "lanes_bench_runs.h"
#include "model/load.h"

namespace ls::bench {
namespace {

int fail(const Status& status) {
  std::fprintf(stderr, "lanes_bench: %s\n", status.to_string().c_str());
  return 1;
}

int run(const BenchOptions& options) {
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> dspark;
  std::vector<std::vector<int32_t>> prompts;
  const Device device = options.device == "cuda" ? Device::Cuda : Device::Cpu;
  const int most_streams = *std::max_element(options.streams.begin(), options.streams.end());
  std::string drafter_device_used = "none";
  if (!options.model_dir.empty()) {
    LoadOptions load;
    load.device = device;
    load.threads = options.threads;
    load.exact_width_probe = options.exact_width_probe;
    auto loaded = load_target(options.model_dir, load);
    if (!loaded.ok()) return fail(loaded.status());
    target = std::move(*loaded);
    if (!options.drafter_dir.empty()) {
      DrafterOptions drafter_options;
      drafter_options.device = options.drafter_device == "cpu" ? Device::Cpu
                               : options.drafter_device == "cuda" ? Device::Cuda
                                                                  : device;
      drafter_options.threads = options.threads;
      drafter_options.bits = options.drafter_bits;
      drafter_options.max_streams = most_streams + 1;  // the lanes' cost timing adds one long scratch stream
      auto drafter = load_drafter(options.drafter_dir, *target, drafter_options);
      if (!drafter.ok() && options.drafter_device == "auto" && drafter_options.device == Device::Cuda) {
        std::printf("NOTE: the CUDA drafter refused (%s); the drafter runs on the CPU\n",
                    drafter.status().to_string().c_str());
        drafter_options.device = Device::Cpu;
        drafter = load_drafter(options.drafter_dir, *target, drafter_options);
      }
      if (!drafter.ok()) return fail(drafter.status());
      dspark = std::move(*drafter);
      drafter_device_used = drafter_options.device == Device::Cuda ? "cuda" : "cpu";
    }
    if (!options.prompts_path.empty()) {
      auto loaded_prompts = load_prompts(options);
      if (!loaded_prompts.ok()) return fail(loaded_prompts.status());
      prompts = std::move(*loaded_prompts);
    } else {
      prompts = random_prompts(options.prompt_tokens, target->facts().vocab_size);
    }
  }
  AcceptanceProfile profile;
  if (options.synthetic_acceptance > 0) {
    const int depth = dspark ? dspark->facts().max_depth : RecordedDrafterOptions{}.max_depth;
    Result<AcceptanceProfile> made = profile_for_mean(options.synthetic_acceptance, depth);
    if (!made.ok()) return fail(made.status());
    profile = *made;
  }
  std::printf("lanes bench: %s on %s, %d tokens per stream, drafter %s", 
              target ? options.model_dir.c_str() : "fake pair (fixed-clock cost model)", options.device.c_str(),
              options.tokens, dspark ? options.drafter_dir.c_str() : (target ? "replaying the plain reply" : "fake"));
  if (options.synthetic_acceptance > 0) {
    std::printf(", synthetic acceptance %.2f (q = %.4f over %d drafts; benchmarks only)", options.synthetic_acceptance,
                profile.conditional[0], profile.depth());
  } else if (!dspark) {
    std::printf(", wrong rate %.2f", options.wrong_rate);
  }
  std::printf(", %d repeat(s), commit %s\n", std::max(1, options.repeats), options.commit.c_str());
  print_header();
  json out = {{"bench", "lanes"},
              {"machine", machine_json(options.machine)},
              {"commit", options.commit},
              {"device", options.device},
              {"model", target ? options.model_dir : "fake"},
              {"drafter", dspark ? options.drafter_dir : (target ? "replay" : "fake")},
              {"drafter_device", drafter_device_used},
              {"drafter_bits", options.drafter_bits},
              {"exact_width", target ? target->facts().exact_width : 8},
              {"drafter_max_depth", dspark ? dspark->facts().max_depth : 0},
              {"prompts", options.prompts_path.empty() ? "random ids" : options.prompts_path},
              {"prompt_tokens", options.prompt_tokens},
              {"tokens_per_stream", options.tokens},
              {"threads", options.threads},
              {"max_rows", options.max_rows},
              {"sampled", options.sampled},
              {"repeats", std::max(1, options.repeats)},
              {"wrong_rate", options.wrong_rate},
              {"synthetic_acceptance", options.synthetic_acceptance > 0
                                           ? json{{"mean", options.synthetic_acceptance},
                                                  {"profile_mean", profile.mean_accepted_length()},
                                                  {"conditional", profile.conditional}}
                                           : json(nullptr)},
              {"rows", json::array()}};
  // The JSON is rewritten after every row, so a run stopped by a timeout still leaves what it measured.
  for (int streams : options.streams) {
    Result<json> row = target ? real_cell(options, *target, dspark.get(), streams, prompts, profile)
                              : fake_cell(options, streams);
    if (!row.ok()) return fail(Status(row.status().code(), std::to_string(streams) + " streams: " + row.status().message()));
    print_row(*row);
    print_split(*row);
    out["rows"].push_back(*row);
    {
      std::ofstream(options.json_path + ".tmp") << out.dump(2) << "\n";
    }
    std::rename((options.json_path + ".tmp").c_str(), options.json_path.c_str());  // never a half-written file
  }
  std::printf("wrote %s\n", options.json_path.c_str());
  for (const json& row : out["rows"])
    if (!row["exact"].get<bool>()) return 3;  // a drafted reply differed from plain: the run is not a result
  return 0;
}

// "1,4,8" -> {1, 4, 8}; empty when any piece is not a positive integer.
std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> counts;
  std::stringstream stream(text);
  for (std::string piece; std::getline(stream, piece, ',');) {
    char* end = nullptr;
    const long value = std::strtol(piece.c_str(), &end, 10);
    if (piece.empty() || *end != '\0' || value < 1 || value > 4096) return {};
    counts.push_back(static_cast<int>(value));
  }
  return counts;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) {
  ls::set_log_level(ls::LogLevel::Warn);
  ls::bench::BenchOptions options;
  bool usage_error = false;
  bool debug = false;  // --debug 1: the lanes' per-round traces (pricing decisions) on stderr
  for (int index = 1; index < argc && !usage_error; ++index) {
    const std::string flag = argv[index];
    const bool has_value = index + 1 < argc;
    const std::string value = has_value ? argv[index + 1] : "";
    if (has_value) ++index;
    if (!has_value) usage_error = true;
    else if (flag == "--tokens") options.tokens = std::atoi(value.c_str());
    else if (flag == "--wrong-rate") options.wrong_rate = std::atof(value.c_str());
    else if (flag == "--json") options.json_path = value;
    else if (flag == "--model") options.model_dir = value;
    else if (flag == "--drafter") options.drafter_dir = value;
    else if (flag == "--repeats") options.repeats = std::atoi(value.c_str());
    else if (flag == "--prompts") options.prompts_path = value;
    else if (flag == "--prompt-tokens") options.prompt_tokens = std::atoi(value.c_str());
    else if (flag == "--threads") options.threads = std::atoi(value.c_str());
    else if (flag == "--device") options.device = value;
    else if (flag == "--drafter-device") options.drafter_device = value;
    else if (flag == "--drafter-bits") options.drafter_bits = std::atoi(value.c_str());
    else if (flag == "--streams") options.streams = ls::bench::parse_counts(value);
    else if (flag == "--synthetic-acceptance") options.synthetic_acceptance = std::atof(value.c_str());
    else if (flag == "--exact-width-probe") options.exact_width_probe = std::atoi(value.c_str());
    else if (flag == "--max-rows") options.max_rows = std::atoi(value.c_str());
    else if (flag == "--sampled") options.sampled = value == "1";
    else if (flag == "--plain-after") options.plain_after_drafted_setup = value != "none";
    else if (flag == "--settle-ms") options.settle_ms = std::atoi(value.c_str());
    else if (options.switches.parse(flag, value)) continue;
    else if (flag == "--debug") debug = value == "1";
    else if (flag == "--machine") options.machine = value;
    else if (flag == "--commit") options.commit = value;
    else usage_error = true;
  }
  if (debug) ls::set_log_level(ls::LogLevel::Debug);
  if (options.device != "cpu" && options.device != "cuda") usage_error = true;
  if (options.drafter_device != "auto" && options.drafter_device != "cpu" && options.drafter_device != "cuda")
    usage_error = true;
  if (options.streams.empty() || options.tokens < 1 || options.prompt_tokens < 1) usage_error = true;
  if (options.synthetic_acceptance != 0 && options.synthetic_acceptance < 1) usage_error = true;
  if (usage_error) {
    std::fprintf(stderr,
                 "usage: lanes_bench [--model DIR [--device cpu|cuda] [--drafter DIR [--drafter-device auto|cpu|cuda] [--drafter-bits 0|8]] "
                 "[--prompts FILE]] "
                 "[--streams 1,4,8,16] [--tokens N] [--repeats N] [--prompt-tokens N] [--threads T] "
                 "[--synthetic-acceptance MEAN (benchmarks only)] [--wrong-rate R] [--exact-width-probe W] [--max-rows R] "
                 "[--sampled 0|1] [--plain-after drafted-setup|none] [--settle-ms MS] %s [--debug 0|1] [--machine TEXT] [--commit SHA] "
                 "[--json PATH]\n",
                 ls::bench::lanes_switches_usage());
    return 2;
  }
  return ls::bench::run(options);
}
