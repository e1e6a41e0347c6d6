// CPU benchmark of a loaded target (e.g. `lanespark synth --shape lfm2-350m`): decode, prefill and verify-window
// times at each thread count, against the memory floor measured in the same run. A program, not a test.
//
//   cpu_bench --model DIR [--threads 1,2] [--repeats 5] [--decode-tokens 32] [--prefill 128,512]
//             [--verify 1,2,4,8,16] [--mode bf16|fp32] [--cpu-time 1] [--json PATH]
//             [--drafter DIR [--context ROWS] [--drafter-bits 0|8]] [--fused 7,0]
//             [--round ROWS,DEPTH [--rounds N] [--spin-us 30,300] [--chunk-kb 64,128] [--prefetch 62,12]
//              [--small-m 0,3] [--short -1,0,1] [--passes 1,0] [--round-gap-us US] [--span POSITIONS]]
//             [--drafter-amx 1,0] [--drafter-bits-ab 0,8] [--int8-wide-ab 0,1] [--ab-streams 1,4,16]
//   cpu_bench --gemm-ab 1,2,4,8,16 [--gemm-shape N,K,COUNT] [--gemm-schedules 0,1,2,3] [--gemm-license 1]
//             [--threads 2] [--repeats 20]
//             (cpu_bench_gemm.h)
//   cpu_bench --amx-order 1   AMX outputs against summation-order models (cpu_bench_amx_order.h)
//   cpu_bench --model DIR --drafter DIR --prompts FILE --spec-depths 0,3,5,7 [--spec-prompts 6] [--spec-tokens 128]
//             [--spec-repeats 2] [--prompt-tokens 192] [--drafter-bits -1|0|8] [--threads 2]   1-stream decoding with
//             every round drafting at each depth against plain, the same tokens (spec_rounds.h)
//   cpu_bench --int8-rate 1,7,28,112,192 [--gemm-shape N,K,COUNT] [--threads 1,2]   the w8a8 GEMM alone
//             (cpu_bench_int8.h)
//
// Memory floor: bytes of weights read per decode token (every checkpoint tensor once: the tied embedding is the
// head) divided by the read bandwidth of a streaming loop over 1 GiB with the same thread count (the best of the
// passes run before and after every decode repeat and at the end). "Paired": each decode repeat against the better
// of the two read passes around it, median over repeats.
// --drafter: a DSpark drafter next to the target, its 1-stream pass by depth (block pass and Markov scan apart) over
// a context of ROWS absorbed rows, interleaved with 1-row and (depth+1)-row verifies so all share the host's phase.
// --fused 7,0: the verify windows and the drafter's passes are timed once per arm in every repeat, the few-row fused
// steps of each arm's mask on in turn (compute/cpu/fused_ops.h: 1 swiglu, 2 residual, 4 conv; 0 none), so the arms
// share the host's phase; the first arm is the one the summary lines report, the others follow as "arm" lines.
// --round ROWS,DEPTH (with --drafter): only 1-stream rounds in a round's order instead (cpu_bench_round.h).
// --drafter-amx 1,0 [--ab-streams 1,4,16] (with --drafter): only the drafter's pass on AMX tiles and on the panels,
// side by side in one process (cpu_bench_drafter_amx.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/fused_ops.h"
#include "compute/ops.h"
#include "draft/dspark/dspark_drafter.h"
#include "io/safetensors.h"
#include "model/load.h"
#include "bench_util.h"
#include "cpu_bench_amx_order.h"
#include "cpu_bench_drafter_amx.h"
#include "cpu_bench_floor.h"
#include "cpu_bench_gemm.h"
#include "cpu_bench_int8.h"
#include "cpu_bench_pass.h"
#include "cpu_bench_print.h"
#include "cpu_bench_round.h"
#include "spec_rounds.h"

using ls::bench::Clock;
using ls::bench::median;
using ls::bench::ms_since;
using ls::bench::parse_list;
using ls::bench::ReadLoop;
using ls::bench::thread_cpu_ms;

namespace {

using namespace ls;
using json = nlohmann::json;

struct Options {
  std::string model, json_path, drafter;
  int context = 192;  // rows the drafter absorbs before its passes are timed
  int drafter_bits = -1;  // the drafter's --drafter-bits (-1 auto, the engine's default)
  std::vector<int> threads = {1, 2}, prefill = {128, 512}, verify = {1, 2, 4, 8, 16};
  std::vector<int> fused = {static_cast<int>(compute::kFuseDefault)};  // fusion masks timed in turn (the engine's)
  std::vector<int> round;        // ROWS, DEPTH of --round (empty: no round mode)
  std::vector<int> spins;        // --spin-us: pool spin budgets crossed with the fusion arms (round mode)
  std::vector<int> chunk_kib;    // --chunk-kb: few-row chunk sizes crossed with them (round mode)
  std::vector<int> prefetch;     // --prefetch: verify prefetch settings ROWS*10+GROUPS crossed with them (round mode)
  std::vector<int> small_m;      // --small-m: set_small_m_kernel masks crossed with them (round mode)
  std::vector<int> short_block;  // --short: -1 trained width, N depth+N (dspark::ShortBlock) crossed with them
  std::vector<int> passes;       // --passes 1,0: rounds with and without the pass (the forwards' cost of its reads)
  std::vector<int> drafter_amx;  // --drafter-amx 1,0: the pass on AMX tiles and on panels (cpu_bench_drafter_amx.h)
  std::vector<int> ab_streams = {1, 4, 16};  // --ab-streams: its stream counts
  std::vector<int> drafter_bits_ab;          // --drafter-bits-ab 0,8: the same A/B over the drafter's bits
  std::vector<int> int8_wide_ab;             // --int8-wide-ab 0,1: and over the int8 kernel's wide tiles
  std::vector<int> int8_rate;                // --int8-rate ROWS,...: the w8a8 GEMM alone (cpu_bench_int8.h)
  std::vector<int> spec_depths;              // --spec-depths 0,3,7 (with --drafter, --prompts): spec_rounds.h
  std::string prompts;                       // --prompts FILE: eval_prompts.json ("code" prompts)
  int spec_prompts = 6, spec_tokens = 128, spec_repeats = 2, prompt_tokens = 192;
  std::vector<int> gemm_ab;      // --gemm-ab: rows of the kernels-alone A/B, AVX-512 against AMX (no model)
  std::vector<int> gemm_shape;   // --gemm-shape N,K,COUNT of that A/B
  std::vector<int> gemm_schedules = {0};  // --gemm-schedules: its AMX arms (set_amx_schedule masks)
  bool amx_order = false;                 // --amx-order 1: the summation-order probe (cpu_bench_amx_order.h)
  bool gemm_license = false;              // --gemm-license 1: the clock probe around AMX first (cpu_bench_gemm.h)
  int rounds = 400, round_gap_us = 0, span = 128;
  int repeats = 5, decode_tokens = 32;
  bool cpu_time = false;  // time 1-thread runs by the thread's CPU time (robust to other processes on the VM)
  compute::NumericMode mode = compute::NumericMode::Bf16;
};

bool g_cpu_time = false;  // --cpu-time 1 with one thread: forwards are timed by CPU time

int64_t checkpoint_weight_bytes(const std::string& directory) {
  auto checkpoint = io::Checkpoint::open(directory);
  if (!checkpoint.ok()) return -1;
  int64_t bytes = 0;
  for (const io::TensorInfo& tensor : (*checkpoint)->tensors()) bytes += static_cast<int64_t>(tensor.bytes);
  return bytes;
}

std::vector<int32_t> random_tokens(int count, int vocab, uint64_t seed) {
  std::vector<int32_t> tokens(count);
  for (int i = 0; i < count; ++i) tokens[i] = static_cast<int32_t>(splitmix64(seed * 7919 + i) % vocab);
  return tokens;
}

// One forward of `tokens` as a window of `stream`, drawing from `first_drawn_row` on; returns the wall time in ms.
double timed_forward(Target& target, StreamId stream, const std::vector<int32_t>& tokens, int first_drawn_row,
                     int kept) {
  Window window;
  window.stream = stream;
  window.tokens = tokens;
  window.first_drawn_row = first_drawn_row;
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_ms();
  Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
  const double ms = g_cpu_time ? thread_cpu_ms() - cpu_start : ms_since(start);
  if (!verified.ok()) {
    std::fprintf(stderr, "forward failed: %s\n", verified.status().to_string().c_str());
    std::exit(1);
  }
  if (Status status = target.commit(stream, kept); !status.ok()) {
    std::fprintf(stderr, "commit failed: %s\n", status.to_string().c_str());
    std::exit(1);
  }
  return ms;
}

// The drafter's 1-stream pass at every depth, split into block pass and scan, each depth's repeats interleaved with a
// 1-row verify and a (depth + 1)-row verify (a round's window) of the target; medians. Times as timed_forward's.
json bench_drafter(const Options& options, Target& target, int threads) {
  DrafterOptions drafter_options;
  drafter_options.threads = threads;
  drafter_options.mode = options.mode;
  drafter_options.max_streams = 1;
  drafter_options.bits = options.drafter_bits;
  auto loaded = dspark::DsparkDrafter::load(options.drafter, target, drafter_options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "drafter load failed: %s\n", loaded.status().to_string().c_str());
    std::exit(1);
  }
  dspark::DsparkDrafter& drafter = **loaded;
  const dspark::DsparkConfig& config = drafter.config();
  const int vocab = target.facts().vocab_size;
  const StreamId stream = 1u << 20;
  // Taps of `context` rows, values of a residual stream's size (timing does not depend on them).
  const int64_t width = static_cast<int64_t>(config.tap_count()) * config.hidden_size;
  std::vector<float> taps(static_cast<size_t>(options.context * width));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = static_cast<float>(uniform_open01(splitmix64(i)) * 4.0 - 2.0);
  const auto absorb_start = Clock::now();
  if (Status status = drafter.absorb(stream, 0, options.context, taps); !status.ok()) {
    std::fprintf(stderr, "absorb failed: %s\n", status.to_string().c_str());
    std::exit(1);
  }
  json result;
  result["context"] = options.context;
  result["bits"] = options.drafter_bits;
  result["absorb_ms"] = ms_since(absorb_start);
  const StreamId target_stream = stream + 1;
  timed_forward(target, target_stream, random_tokens(64, vocab, target_stream), 63, 64);
  json depths = json::object();
  for (int depth = 1; depth <= config.block_size; ++depth) {
    std::vector<double> pass, block, scan, one_row, window;
    const size_t arms = options.fused.size();
    std::vector<std::vector<double>> arm_pass(arms), arm_window(arms);
    for (int repeat = 0; repeat < options.repeats * 4 * static_cast<int>(arms); ++repeat) {
      const size_t arm = static_cast<size_t>(repeat) % arms;
      compute::set_cpu_fusion_steps(static_cast<unsigned>(options.fused[arm]));
      DraftRequest request;
      request.stream = stream;
      request.anchor_token = static_cast<int32_t>(splitmix64(repeat) % vocab);
      request.anchor_position = options.context;
      request.depth = depth;
      const auto start = Clock::now();
      const double cpu_start = thread_cpu_ms();
      std::vector<Draft> drafts = drafter.draft(std::span<const DraftRequest>(&request, 1));
      pass.push_back(g_cpu_time ? thread_cpu_ms() - cpu_start : ms_since(start));
      if (!drafts[0].status.ok()) {
        std::fprintf(stderr, "draft failed: %s\n", drafts[0].status.to_string().c_str());
        std::exit(1);
      }
      arm_pass[arm].push_back(pass.back());
      const double window_ms =
          timed_forward(target, target_stream, random_tokens(depth + 1, vocab, repeat * 7 + depth), 0, 1);
      arm_window[arm].push_back(window_ms);
      if (arm != 0) {
        pass.pop_back();
        continue;
      }
      block.push_back(drafter.last_block_ms());
      scan.push_back(drafter.last_scan_ms());
      one_row.push_back(timed_forward(target, target_stream, random_tokens(1, vocab, repeat), 0, 1));
      window.push_back(window_ms);
    }
    compute::set_cpu_fusion_steps(static_cast<unsigned>(options.fused[0]));
    auto best = [](const std::vector<double>& times) { return *std::min_element(times.begin(), times.end()); };
    depths[std::to_string(depth)] = {{"pass_ms", median(pass)},          {"block_ms", median(block)},
                                     {"scan_ms", median(scan)},          {"verify_1_ms", median(one_row)},
                                     {"verify_window_ms", median(window)}, {"best_pass_ms", best(pass)},
                                     {"best_block_ms", best(block)},     {"best_scan_ms", best(scan)},
                                     {"best_verify_1_ms", best(one_row)}, {"best_verify_window_ms", best(window)}};
    for (size_t arm = 0; arm < arms; ++arm) {
      const std::string name = "fused_" + std::to_string(options.fused[arm]);
      depths[std::to_string(depth)][name + "_pass_ms"] = median(arm_pass[arm]);
      depths[std::to_string(depth)][name + "_verify_window_ms"] = median(arm_window[arm]);
      depths[std::to_string(depth)][name + "_best_pass_ms"] = best(arm_pass[arm]);
      depths[std::to_string(depth)][name + "_best_verify_window_ms"] = best(arm_window[arm]);
    }
  }
  result["pass_profile"] = bench::profile_pass(drafter, stream, options.context, vocab, options.repeats * 8);
  target.release(target_stream);
  drafter.release(stream);
  result["depths"] = depths;
  return result;
}

json bench_threads(const Options& options, int threads, int64_t weight_bytes) {
  LoadOptions load;
  load.mode = options.mode;
  load.threads = threads;
  g_cpu_time = options.cpu_time && threads == 1;
  auto loaded = load_target(options.model, load);
  if (!loaded.ok()) {
    std::fprintf(stderr, "load failed: %s\n", loaded.status().to_string().c_str());
    std::exit(1);
  }
  Target& target = **loaded;
  const int vocab = target.facts().vocab_size;
  StreamId next_stream = 1;
  json result;
  result["threads"] = threads;
  result["timing"] = g_cpu_time ? "thread cpu time" : "wall clock";
  if (!options.spec_depths.empty() && !options.drafter.empty() && !options.prompts.empty()) {
    bench::SpecPlan plan{options.model, options.drafter, options.prompts, options.spec_prompts,
                         options.prompt_tokens,
                         options.drafter_bits_ab.empty() ? std::vector<int>{options.drafter_bits}
                                                         : options.drafter_bits_ab,
                         options.mode, threads, options.spec_depths, options.spec_tokens, options.spec_repeats};
    result["spec"] = bench::spec_rounds_from_files(plan, target);
    return result;
  }
  if (options.round.size() == 2 && !options.drafter.empty()) {
    bench::RoundPlan plan;
    plan.rows = options.round[0];
    plan.depth = options.round[1];
    plan.rounds = options.rounds;
    plan.context = options.context;
    plan.fused = options.fused;
    plan.cpu_time = g_cpu_time;
    plan.spins = options.spins;
    plan.chunk_kib = options.chunk_kib;
    plan.prefetch = options.prefetch;
    plan.small_m = options.small_m;
    plan.short_block = options.short_block;
    plan.passes = options.passes;
    plan.gap_us = options.round_gap_us;
    plan.span = options.span;
    result["rounds"] = bench::bench_rounds(plan, target, options.drafter, threads, options.drafter_bits);
    return result;
  }
  if ((!options.drafter_amx.empty() || !options.drafter_bits_ab.empty() || !options.int8_wide_ab.empty()) &&
      !options.drafter.empty()) {
    bench::DrafterAmxPlan plan;
    plan.drafter = options.drafter;
    plan.arms = options.drafter_amx.empty() ? std::vector<int>{compute::drafter_amx() ? 1 : 0} : options.drafter_amx;
    if (!options.drafter_bits_ab.empty()) plan.bits = options.drafter_bits_ab;
    if (!options.int8_wide_ab.empty()) plan.int8_wide = options.int8_wide_ab;
    plan.streams = options.ab_streams;
    plan.threads = threads;
    plan.context = options.context;
    plan.repeats = options.repeats;
    plan.mode = options.mode;
    // One target stream per drafting stream, each a 64-token context; every forward adds one row to each.
    const int most = *std::max_element(plan.streams.begin(), plan.streams.end());
    for (int s = 0; s < most; ++s) timed_forward(target, next_stream + s, random_tokens(64, vocab, s), 63, 64);
    const StreamId first = next_stream;
    auto forward = [&](int streams) {
      std::vector<Window> windows(static_cast<size_t>(streams));
      const std::vector<int32_t> tokens = random_tokens(streams, vocab, 977 * next_stream++);
      for (int s = 0; s < streams; ++s) {
        windows[s].stream = first + s;
        windows[s].tokens = std::span<const int32_t>(tokens).subspan(s, 1);
        windows[s].first_drawn_row = 0;
      }
      if (!target.forward(windows).ok()) std::exit(1);
      for (int s = 0; s < streams; ++s)
        if (!target.commit(first + s, 1).ok()) std::exit(1);
    };
    result["drafter_amx"] = bench::drafter_amx_ab(plan, target, forward);
    return result;
  }

  // The read loop runs before and after every decode repeat and at the end; the floor is its best pass (strict),
  // and each decode repeat is also paired with the better of the passes around it (the VM's bandwidth swings with
  // other tenants, so a ratio of things measured seconds apart can err either way).
  ReadLoop read_loop(threads, g_cpu_time);
  std::vector<double> reads = {read_loop.pass_gb_s()};
  std::vector<double> paired;  // decode rate / floor of the read passes around it

  // Decode: a 16-token prompt, then one row per step (runs after the first give the median step).
  std::vector<double> decode_rates;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    const StreamId stream = next_stream++;
    timed_forward(target, stream, random_tokens(16, vocab, stream), 15, 16);
    std::vector<double> steps;
    for (int step = 0; step < options.decode_tokens; ++step)
      steps.push_back(timed_forward(target, stream, random_tokens(1, vocab, stream * 1000 + step), 0, 1));
    decode_rates.push_back(1000.0 / median(steps));
    target.release(stream);
    reads.push_back(read_loop.pass_gb_s());
    const double around = std::max(reads[reads.size() - 2], reads.back());
    paired.push_back(decode_rates.back() / (around * 1e9 / static_cast<double>(weight_bytes)));
  }
  const double decode_tok_s = median(decode_rates);
  result["decode_tok_s"] = decode_tok_s;

  // Prefill: one window of the whole prompt, only the last row drawn.
  json prefill = json::object();
  for (int tokens : options.prefill) {
    std::vector<double> rates;
    for (int repeat = 0; repeat < options.repeats; ++repeat) {
      const StreamId stream = next_stream++;
      rates.push_back(tokens * 1000.0 /
                      timed_forward(target, stream, random_tokens(tokens, vocab, stream), tokens - 1, tokens));
      target.release(stream);
    }
    prefill[std::to_string(tokens)] = median(rates);
  }
  result["prefill_tok_s"] = prefill;

  // Verify windows after a 64-token context: every row drawn, one row kept (as a round whose drafts all miss).
  json verify = json::object();
  const StreamId stream = next_stream++;
  timed_forward(target, stream, random_tokens(64, vocab, stream), 63, 64);
  double one_row_ms = 0;
  const size_t arms = options.fused.size();
  for (int rows : options.verify) {
    std::vector<std::vector<double>> times(arms);
    for (int repeat = 0; repeat < options.repeats * 4; ++repeat)
      for (size_t arm = 0; arm < arms; ++arm) {
        compute::set_cpu_fusion_steps(static_cast<unsigned>(options.fused[arm]));
        times[arm].push_back(timed_forward(target, stream, random_tokens(rows, vocab, stream * 31 + repeat), 0, 1));
      }
    const double ms = median(times[0]);
    if (one_row_ms == 0) one_row_ms = ms;  // the first width listed (1) is the base
    verify[std::to_string(rows)] = {{"ms", ms}, {"relative", ms / one_row_ms}};
    for (size_t arm = 0; arm < arms; ++arm) {
      verify[std::to_string(rows)]["fused_" + std::to_string(options.fused[arm]) + "_ms"] = median(times[arm]);
      verify[std::to_string(rows)]["fused_" + std::to_string(options.fused[arm]) + "_best_ms"] =
          *std::min_element(times[arm].begin(), times[arm].end());
    }
  }
  compute::set_cpu_fusion_steps(static_cast<unsigned>(options.fused[0]));
  target.release(stream);
  result["verify"] = verify;

  if (!options.drafter.empty()) result["drafter"] = bench_drafter(options, target, threads);

  for (int pass = 0; pass < std::max(options.repeats, 3); ++pass) reads.push_back(read_loop.pass_gb_s());
  const double bandwidth = *std::max_element(reads.begin(), reads.end());
  const double floor_tok_s = bandwidth * 1e9 / static_cast<double>(weight_bytes);
  result["read_gb_s"] = bandwidth;
  result["read_passes_gb_s"] = reads;
  result["floor_tok_s"] = floor_tok_s;
  result["decode_fraction_of_floor"] = decode_tok_s / floor_tok_s;
  result["decode_fraction_of_floor_paired"] = median(paired);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  using namespace ls::bench;
  const bool read = read_flags(
      argc, argv,
      {{"--model", text_flag(options.model)}, {"--json", text_flag(options.json_path)},
       {"--threads", list_flag(options.threads)}, {"--prefill", list_flag(options.prefill)},
       {"--verify", list_flag(options.verify)}, {"--cpu-time", switch_flag(options.cpu_time)},
       {"--repeats", int_flag(options.repeats, 1)}, {"--decode-tokens", int_flag(options.decode_tokens, 1)},
       {"--drafter", text_flag(options.drafter)}, {"--context", int_flag(options.context, 1)},
       {"--drafter-bits", int_flag(options.drafter_bits)}, {"--fused", list_flag(options.fused)},
       {"--round", list_flag(options.round)}, {"--rounds", int_flag(options.rounds, 1)},
       {"--spin-us", list_flag(options.spins)}, {"--chunk-kb", list_flag(options.chunk_kib)},
       {"--prefetch", list_flag(options.prefetch)}, {"--small-m", list_flag(options.small_m)},
       {"--short", list_flag(options.short_block)}, {"--passes", list_flag(options.passes)},
       {"--drafter-amx", list_flag(options.drafter_amx)}, {"--ab-streams", list_flag(options.ab_streams)},
       {"--drafter-bits-ab", list_flag(options.drafter_bits_ab)}, {"--int8-wide-ab", list_flag(options.int8_wide_ab)},
       {"--int8-rate", list_flag(options.int8_rate)}, {"--spec-depths", list_flag(options.spec_depths)},
       {"--prompts", text_flag(options.prompts)}, {"--spec-prompts", int_flag(options.spec_prompts, 1)},
       {"--spec-tokens", int_flag(options.spec_tokens, 2)}, {"--spec-repeats", int_flag(options.spec_repeats, 1)},
       {"--prompt-tokens", int_flag(options.prompt_tokens, 1)},
       {"--round-gap-us", int_flag(options.round_gap_us, 0)}, {"--span", int_flag(options.span, 8)},
       {"--gemm-ab", list_flag(options.gemm_ab)}, {"--gemm-shape", list_flag(options.gemm_shape)},
       {"--gemm-schedules", list_flag(options.gemm_schedules)},
       {"--gemm-license", switch_flag(options.gemm_license)}, {"--amx-order", switch_flag(options.amx_order)},
       {"--mode", [&](const std::string& value) {
          options.mode = value == "fp32" ? compute::NumericMode::Fp32 : compute::NumericMode::Bf16;
        }}});
  if (!read) return 2;
  if (options.amx_order) {
    const json order = amx_order_probe();
    if (!options.json_path.empty()) std::ofstream(options.json_path) << order.dump(2) << "\n";
    return 0;
  }
  if (!options.int8_rate.empty()) {
    bench::Int8RatePlan plan;
    plan.rows = options.int8_rate;
    plan.threads = options.threads;
    plan.repeats = options.repeats;
    if (options.gemm_shape.size() == 3) {
      plan.N = options.gemm_shape[0];
      plan.K = options.gemm_shape[1];
      plan.count = options.gemm_shape[2];
    }
    const json rates = bench::int8_rate(plan);
    if (!options.json_path.empty()) std::ofstream(options.json_path) << rates.dump(2) << "\n";
    return 0;
  }
  if (!options.gemm_ab.empty()) {
    json report;
    for (int threads : options.threads) {
      GemmPlan plan;
      plan.rows = options.gemm_ab;
      plan.threads = threads;
      plan.repeats = options.repeats;
      plan.schedules = options.gemm_schedules;
      plan.license = options.gemm_license;
      if (options.gemm_shape.size() == 3) {
        plan.N = options.gemm_shape[0];
        plan.K = options.gemm_shape[1];
        plan.count = options.gemm_shape[2];
      }
      report["gemm_ab"][std::to_string(threads)] = gemm_ab(plan);
    }
    if (!options.json_path.empty()) std::ofstream(options.json_path) << report.dump(2) << "\n";
    return 0;
  }
  if (options.model.empty()) {
    std::fprintf(stderr, "usage: cpu_bench --model DIR [--threads 1,2] [--json PATH] ...\n");
    return 2;
  }
  const int64_t weight_bytes = checkpoint_weight_bytes(options.model);
  if (weight_bytes <= 0) {
    std::fprintf(stderr, "cannot read the checkpoint in %s\n", options.model.c_str());
    return 1;
  }
  json report;
  report["model"] = options.model;
  report["kernel"] = compute::matmul_kernel_name();
  report["cpu_features"] = compute::cpu_features_text();
  report["weight_bytes_per_token"] = weight_bytes;
  report["mode"] = options.mode == compute::NumericMode::Bf16 ? "bf16" : "fp32";
  report["repeats"] = options.repeats;
  std::printf("model %s, %.3f GB of weights per token, kernel %s\n", options.model.c_str(), weight_bytes / 1e9,
              compute::matmul_kernel_name());
  for (int threads : options.threads) {
    const json result = bench_threads(options, threads, weight_bytes);
    report["runs"].push_back(result);
    bench::print_run(result, threads, options.verify, options.fused);
  }
  if (!options.json_path.empty()) std::ofstream(options.json_path) << report.dump(2) << "\n";
  return 0;
}
