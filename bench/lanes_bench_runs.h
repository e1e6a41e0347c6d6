// lanes_bench's runs: the requests, one run of the lanes, and one stream count's plain and drafted arms (A B, B A, ...).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "draft/drafter.h"
#include "draft/synthetic/acceptance_profile.h"
#include "lanes_bench_report.h"
#include "lanes_bench_switches.h"
#include "model/target.h"

namespace ls::bench {

struct BenchOptions {
  int tokens = 256;
  double wrong_rate = 0.2;
  std::string json_path = "lanes_bench.json";
  std::string model_dir;
  std::string drafter_dir;
  std::string prompts_path;
  std::string device = "cpu";
  std::string drafter_device = "auto";  // auto: --device, falling back to the CPU (loudly) when CUDA refuses
  int drafter_bits = -1;                // --drafter-bits: 0 = bf16 as stored, 8 = int8 per row, -1 = auto
  std::vector<int> streams = {1, 4, 8, 16};
  int prompt_tokens = 192;  // leading tokens of each eval prompt, or the length of random prompts
  int threads = 2;
  int repeats = 1;                    // real target: A B alternations per stream count; medians reported
  double synthetic_acceptance = 0.0;  // > 0: the mean accepted length of the synthetic profile
  int exact_width_probe = 16;
  int max_rows = 0;  // rows per verify forward (LanesOptions::max_rows; 0 = the lanes' default)
  bool sampled = false;  // seeded sampled requests (temperature, top-k/p, min-p mixed) instead of greedy
  // Each plain run right after a drafted Lanes::create (its load-time timing, then dropped), as each drafted run
  // starts: both arms from the same state (lanes15; the Xeon's 1-stream drafted arm with nothing drafted was 0.68x
  // against a plain arm that timed nothing). --plain-after none: the plain run right after its own plain setup.
  bool plain_after_drafted_setup = true;
  int settle_ms = 0;                       // each run (both arms) after this long idle past its Lanes::create
  std::string machine;
  std::string commit = "unknown";
  LanesSwitches switches;  // the pricing rules of the drafted arm (an A/B runs each arm in the same binary)
};

// Leading tokens of the "code" prompts of an eval_prompts.json, tokenized with the model directory's tokenizer.
Result<std::vector<std::vector<int32_t>>> load_prompts(const BenchOptions& options);
// 16 prompts of `length` random ids in [16, vocab), keyed by prompt index (synth checkpoints have no tokenizer).
std::vector<std::vector<int32_t>> random_prompts(int length, int vocab_size);

// One stream count on the fakes: both runs share the cost model through one fixed clock.
Result<json> fake_cell(const BenchOptions& options, int streams);
// One stream count on a real target: A B A B ...; the first plain run's replies are the record.
Result<json> real_cell(const BenchOptions& options, Target& target, Drafter* dspark, int streams,
                       const std::vector<std::vector<int32_t>>& prompts, const AcceptanceProfile& profile);

}  // namespace ls::bench
