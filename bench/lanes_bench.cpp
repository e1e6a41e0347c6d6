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
//             [--trim round|verify]                                        verify: the trim prices rows against the
//                                                                         verify alone (before session 6)
//             [--admit scout|all]                                          all: every prompt tapped while the drafter
//                                                                         is unproven where the prior pays (before 6)
//             [--quiet-reprice N]                                          dormant-only decisions run the allocator
//                                                                         every N-th time (PricingOptions)
//             [--probe group|alone]                                        alone: a dormant stream's probe runs only
//                                                                         where it alone could pay (before lanes7)
//             [--deep-chances prior|confidence]                            confidence (the default since s7A): depths
//                                                                         no verify reached are priced at the better of
//                                                                         the prior and the calibrated confidences
//             [--depth-ask whole|priced]                                   priced: the depth a drafting stream asks is
//                                                                         priced with the pass's depth axis (lanes9)
//             [--probe-value off|on]                                       on: probes only where they pay their way
//                                                                         (lanes9, PricingOptions::probes_pay_their_way)
//             [--pass-modes off|on]                                        on: passes priced per sampling mode,
//                                                                         sampled ones timed at load (lanes10)
//             [--restart-scout off|defer|alone]                            restarted contexts priced apart, one
//                                                                         restart scout first (lanes10)
//             [--explore-gate X[,Y]]                                       the scout only where the prior's gain over
//                                                                         the tokens left is X times its one-off, or
//                                                                         an always-right one's Y times (lanes11;
//                                                                         0 = off; default 3,15)
//             [--pass-timing alone|after-forward]                          after-forward: each load-time pass timed
//                                                                         right after a target forward (lanes9)
//             [--pricing new|old]                                          new: measured rounds (batched absorb
//                                                                         call priced) and quiet repricing; old
//                                                                         (default): the fourth session's pricing
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
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/log.h"
#include "draft/load.h"
#include "draft/synthetic/acceptance_profile.h"
#include "draft/synthetic/synthetic_acceptance_drafter.h"
#include "lanes/lanes.h"
#include "lanes/testing/fake_drafter.h"
#include "lanes/testing/fake_target.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "model/load.h"
#include "text/tokenizer.h"
#include "bench_util.h"

using ls::bench::median;
using ls::bench::parse_list;

namespace ls {
namespace {

using json = nlohmann::json;

struct BenchOptions {
  int tokens = 256;
  double wrong_rate = 0.2;
  std::string json_path = "lanes_bench.json";
  std::string model_dir;
  std::string drafter_dir;
  std::string prompts_path;
  std::string device = "cpu";
  std::string drafter_device = "auto";  // auto: --device, falling back to the CPU (loudly) when CUDA refuses
  int drafter_bits = 0;                 // --drafter-bits: 0 = bf16 as stored, 8 = int8 per row (CPU drafter)
  std::vector<int> streams = {1, 4, 8, 16};
  int prompt_tokens = 192;  // leading tokens of each eval prompt, or the length of random prompts
  int threads = 2;
  int repeats = 1;                    // real target: A B alternations per stream count; medians reported
  double synthetic_acceptance = 0.0;  // > 0: the mean accepted length of the synthetic profile
  int exact_width_probe = 16;
  int max_rows = 0;  // rows per verify forward (LanesOptions::max_rows; 0 = the lanes' default)
  bool sampled = false;  // seeded sampled requests (temperature, top-k/p, min-p mixed) instead of greedy
  std::string machine;
  std::string commit = "unknown";
};

// Leading tokens of the "code" prompts of an eval_prompts.json, tokenized with the model directory's tokenizer.
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

// 16 prompts of `length` random ids in [16, vocab), keyed by prompt index (synth checkpoints have no tokenizer).
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

struct Measured {
  double ms = 0;              // submit to idle
  double first_round_ms = 0;  // the round that prefilled every stream
  double host_wall_ms = 0;    // wall-clock time of the whole run (on the fakes: the lanes' own host work)
  int64_t tokens = 0;
  int streams = 0;
  LanesStats stats;
  LanesStats first_round;     // stats after the first round (decode = stats - first_round)
  std::vector<std::vector<int32_t>> replies;  // [stream] in submit order
  double tokens_per_s() const { return ms > 0 ? 1000.0 * double(tokens) / ms : 0.0; }
  double decode_tokens_per_s() const {
    const double decode_ms = ms - first_round_ms;
    return decode_ms > 0 ? 1000.0 * double(tokens - streams) / decode_ms : 0.0;
  }
  // Decode rounds (the first left out) and their split: target forwards, drafter calls, the lanes' host work.
  int64_t decode_rounds() const { return stats.rounds - first_round.rounds; }
  double per_decode_round(double total, double first) const {
    return decode_rounds() > 0 ? (total - first) / double(decode_rounds()) : 0.0;
  }
  double forward_ms_per_round() const { return per_decode_round(stats.forward_ms, first_round.forward_ms); }
  double drafter_ms_per_round() const { return per_decode_round(stats.drafter_ms, first_round.drafter_ms); }
  double host_ms_per_round() const {
    return per_decode_round(stats.round_ms - stats.forward_ms - stats.drafter_ms,
                            first_round.round_ms - first_round.forward_ms - first_round.drafter_ms);
  }
};

// The cost tables pricing starts from (timed at load): verify ms by rows, drafter pass ms by (streams, depth), absorbs.
json tables_json(const CostTables& tables, int max_rows) {
  json verify = json::array();  // [rows, ms]
  for (int rows : {1, 2, 3, 4, 6, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256}) {
    if (rows <= std::min(max_rows, tables.verify.max_rows())) verify.push_back({rows, tables.verify.ms(rows)});
  }
  json draft = json::array();  // [streams, ms at depth 1, ms at the deepest]
  const int deepest = tables.draft.max_depth();
  for (int streams : {1, 2, 4, 8, 16, 32, 64}) {
    if (streams > tables.draft.max_streams() || deepest < 1) continue;
    draft.push_back({streams, tables.draft.ms(streams, 1), tables.draft.ms(streams, deepest)});
  }
  json sampled = json::array();  // [streams, ms at the deepest] of sampled passes (timed with --pass-modes on)
  for (int streams : {1, 2, 4, 8, 16, 32, 64}) {
    if (tables.sampled_draft.empty() || streams > tables.sampled_draft.max_streams() || deepest < 1) continue;
    sampled.push_back({streams, tables.sampled_draft.ms(streams, deepest)});
  }
  return {{"verify_ms", verify},
          {"draft_ms", draft},
          {"sampled_draft_ms", sampled},
          {"draft_max_depth", deepest},
          {"absorb_call_ms", tables.absorb_call_ms},
          {"absorb_ms_per_row", tables.absorb_ms_per_row}};
}

// --taps host: the lanes take taps through host memory even where the drafter could absorb them on the device.
bool g_device_taps = true;
// --pricing new: measured rounds and quiet repricing on (off by default), for an A/B in one run.
bool g_new_pricing = false;
// --trim verify: the trim prices rows against the verify alone (the fifth session's), not verify + pass.
bool g_trim_prices_pass = true;
// --admit all: every prompt is tapped while the drafter is unproven where the prior pays (the fifth session's).
bool g_scout_prompt_only = true;
// --quiet-reprice N: decisions over dormant streams only run the row allocator every N-th time (0 = the default).
int g_quiet_reprice_every = 0;
// --probe alone: a dormant stream's probe is gated on its own stream alone paying (the first half of session 6).
bool g_group_probes = true;
// --deep-chances prior: PricingOptions::confidence_for_unexplored off (lanes8; on by default since s7A).
bool g_confidence_for_unexplored = true;
// --depth-ask priced|whole: PricingOptions::price_depth_asked (lanes9), the library's default unless given.
int g_price_depth_asked = -1;
// --probe-value on|off: PricingOptions::probes_pay_their_way (lanes9), the library's default unless given.
int g_probes_pay_their_way = -1;
// --pass-modes on|off: PricingOptions::pass_cost_per_mode (lanes10), the library's default unless given.
int g_pass_cost_per_mode = -1;
// --restart-scout off|defer|alone: PricingOptions::restart_scout (lanes10), the library's default unless given.
int g_restart_scout = -1;
// --explore-gate X[,Y]: PricingOptions::explore_repay (and explore_repay_if_right) (lanes11; 0 = off), the library's
// defaults unless given.
double g_explore_repay = -1;
double g_explore_repay_if_right = -1;
// --pass-timing after-forward|alone: CalibrationOptions::pass_after_forward (lanes9), the default unless given.
int g_pass_after_forward = -1;

// Submits every request at once and runs rounds until idle, timing the first round apart.
Result<Measured> run_once(Target& target, Drafter* drafter, Clock& clock, const std::vector<Arrival>& arrivals,
                          int max_rows = 0, json* tables = nullptr) {
  LanesOptions lanes_options;
  lanes_options.max_rows = max_rows;
  lanes_options.device_taps = g_device_taps;
  if (g_new_pricing) {
    lanes_options.pricing.measured_rounds = true;
    lanes_options.pricing.quiet_reprice_every = 8;
  }
  lanes_options.pricing.trim_prices_pass = g_trim_prices_pass;
  lanes_options.scout_prompt_only = g_scout_prompt_only;
  if (g_quiet_reprice_every > 0) lanes_options.pricing.quiet_reprice_every = g_quiet_reprice_every;
  lanes_options.pricing.group_probes = g_group_probes;
  lanes_options.pricing.confidence_for_unexplored = g_confidence_for_unexplored;
  if (g_price_depth_asked >= 0) lanes_options.pricing.price_depth_asked = g_price_depth_asked == 1;
  if (g_probes_pay_their_way >= 0) lanes_options.pricing.probes_pay_their_way = g_probes_pay_their_way == 1;
  if (g_pass_cost_per_mode >= 0) lanes_options.pricing.pass_cost_per_mode = g_pass_cost_per_mode == 1;
  if (g_explore_repay >= 0) lanes_options.pricing.explore_repay = g_explore_repay;
  if (g_explore_repay_if_right >= 0) lanes_options.pricing.explore_repay_if_right = g_explore_repay_if_right;
  if (g_restart_scout >= 0) lanes_options.pricing.restart_scout = static_cast<PricingOptions::RestartScout>(g_restart_scout);
  if (g_pass_after_forward >= 0) lanes_options.calibration.pass_after_forward = g_pass_after_forward == 1;
  lanes_options.max_streams = static_cast<int>(arrivals.size());  // the engine sized for this cell's concurrency
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Lanes> lanes, Lanes::create(target, drafter, lanes_options, clock));
  if (tables != nullptr && drafter != nullptr) *tables = tables_json(lanes->pricing().tables(), lanes->max_rows());
  Measured measured;
  measured.streams = static_cast<int>(arrivals.size());
  std::map<StreamId, size_t> index_of;
  const WallClock wall;
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
  for (const std::vector<int32_t>& reply : measured.replies) measured.tokens += static_cast<int64_t>(reply.size());
  return measured;
}

json stats_json(const LanesStats& stats) {
  return {{"rounds", stats.rounds},
          {"verify_forwards", stats.verify_forwards},
          {"prefill_forwards", stats.prefill_forwards},
          {"drafter_passes", stats.drafter_passes},
          {"drafter_faults", stats.drafter_faults},
          {"rows_verified", stats.rows_verified},
          {"drafts_verified", stats.drafts_verified},
          {"drafts_accepted", stats.drafts_accepted},
          {"tokens_generated", stats.tokens_generated},
          {"windows_verified", stats.windows_verified},
          {"windows_with_drafts", stats.windows_with_drafts},
          {"tap_rows", stats.tap_rows},
          {"absorb_calls", stats.absorb_calls},
          {"absorbed_rows", stats.absorbed_rows},
          {"drafter_restarts", stats.drafter_restarts},
          {"dormant_entries", stats.dormant_entries},
          {"depth_offers", stats.depth_offers},
          {"round_ms", stats.round_ms},
          {"forward_ms", stats.forward_ms},
          {"drafter_ms", stats.drafter_ms}};
}

// Where one run's decode time went (the first round left out): verify forwards by kind (quiet / tap-only / with
// drafts: count and mean ms), slow ones' time above the verify table, the drafter's passes / absorbs / settles (ms
// in all), host work, and the first round (prefill) and the wall outside the rounds (ms).
json phases_json(const Measured& run) {
  const LanesStats& s = run.stats;
  const LanesStats& f = run.first_round;
  auto mean = [](double ms, int64_t count) { return count > 0 ? ms / double(count) : 0.0; };
  const int64_t quiet = s.quiet_forwards - f.quiet_forwards;
  const int64_t tap_only = s.tap_only_forwards - f.tap_only_forwards;
  const int64_t drafts = s.draft_forwards - f.draft_forwards;
  return {{"quiet_forwards", quiet},
          {"quiet_forward_ms", mean(s.quiet_forward_ms - f.quiet_forward_ms, quiet)},
          {"tap_only_forwards", tap_only},
          {"tap_only_forward_ms", mean(s.tap_only_forward_ms - f.tap_only_forward_ms, tap_only)},
          {"draft_forwards", drafts},
          {"draft_forward_ms", mean(s.draft_forward_ms - f.draft_forward_ms, drafts)},
          {"slow_forwards", s.slow_forwards - f.slow_forwards},
          {"slow_forward_excess_ms", s.slow_forward_excess_ms - f.slow_forward_excess_ms},
          {"pass_ms", s.pass_ms - f.pass_ms},
          {"absorb_ms", s.absorb_ms - f.absorb_ms},
          {"settle_ms", s.settle_ms - f.settle_ms},
          {"host_ms", (s.round_ms - s.forward_ms - s.drafter_ms) - (f.round_ms - f.forward_ms - f.drafter_ms)},
          {"first_round_ms", run.first_round_ms},
          {"outside_rounds_ms", run.ms - s.round_ms}};
}

// The run of median time among `runs`.
const Measured& median_run(const std::vector<Measured>& runs) {
  std::vector<size_t> order(runs.size());
  for (size_t index = 0; index < order.size(); ++index) order[index] = index;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a].ms < runs[b].ms; });
  return runs[order[(order.size() - 1) / 2]];
}

// One table row from the plain and drafted runs of one stream count (medians over repeats).
json row_json(int streams, const std::vector<Measured>& plain, const std::vector<Measured>& drafted, bool exact) {
  std::vector<double> plain_tps, drafted_tps, plain_decode, drafted_decode, plain_ms, drafted_ms;
  for (const Measured& run : plain) {
    plain_tps.push_back(run.tokens_per_s());
    plain_decode.push_back(run.decode_tokens_per_s());
    plain_ms.push_back(run.ms);
  }
  for (const Measured& run : drafted) {
    drafted_tps.push_back(run.tokens_per_s());
    drafted_decode.push_back(run.decode_tokens_per_s());
    drafted_ms.push_back(run.ms);
  }
  // Counters from the drafted run of median time.
  std::vector<size_t> order(drafted.size());
  for (size_t index = 0; index < order.size(); ++index) order[index] = index;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return drafted[a].ms < drafted[b].ms; });
  const LanesStats& stats = drafted[order[(order.size() - 1) / 2]].stats;
  const double plain_decode_median = median(plain_decode);
  // Medians over repeats of each arm's decode round split (ms per round).
  auto split = [](const std::vector<Measured>& runs) {
    std::vector<double> forward, drafter, host, wall;
    for (const Measured& run : runs) {
      forward.push_back(run.forward_ms_per_round());
      drafter.push_back(run.drafter_ms_per_round());
      host.push_back(run.host_ms_per_round());
      wall.push_back(run.host_wall_ms);
    }
    return json{{"forward_ms", median(forward)},
                {"drafter_ms", median(drafter)},
                {"host_ms", median(host)},
                {"wall_ms", median(wall)}};
  };
  return {{"streams", streams},
          {"plain_tokens_per_s", median(plain_tps)},
          {"drafted_tokens_per_s", median(drafted_tps)},
          {"plain_decode_tokens_per_s", plain_decode_median},
          {"drafted_decode_tokens_per_s", median(drafted_decode)},
          {"speedup", plain_decode_median > 0 ? median(drafted_decode) / plain_decode_median : 0.0},
          {"accepted_length", stats.windows_with_drafts > 0
                                  ? 1.0 + double(stats.drafts_accepted) / double(stats.windows_with_drafts)
                                  : 0.0},
          {"tokens_per_window",
           stats.windows_verified > 0 ? 1.0 + double(stats.drafts_accepted) / double(stats.windows_verified) : 0.0},
          {"drafted_rows", stats.drafts_verified},
          {"verified_rows", stats.rows_verified},
          {"drafter_passes", stats.drafter_passes},
          {"tap_rows", stats.tap_rows},
          {"absorbed_rows", stats.absorbed_rows},
          {"absorb_calls", stats.absorb_calls},
          {"exact", exact},
          {"tokens", drafted.empty() ? 0 : drafted.front().tokens},
          {"plain_ms", plain_ms},
          {"drafted_ms", drafted_ms},
          {"drafted_stats", stats_json(stats)},
          {"plain_stats", stats_json(plain.front().stats)},
          {"plain_round", split(plain)},
          {"drafted_round", split(drafted)},
          {"plain_phases", phases_json(median_run(plain))},
          {"drafted_phases", phases_json(median_run(drafted))}};
}

// Where a decode round's time goes in each arm (medians), and the tables pricing started from.
void print_split(const json& row) {
  const json& plain = row["plain_round"];
  const json& drafted = row["drafted_round"];
  std::printf("        per decode round ms: plain forward %.4f host %.4f | drafted forward %.4f drafter %.4f host %.4f"
              " | run wall ms plain %.1f drafted %.1f\n",
              plain["forward_ms"].get<double>(), plain["host_ms"].get<double>(), drafted["forward_ms"].get<double>(),
              drafted["drafter_ms"].get<double>(), drafted["host_ms"].get<double>(), plain["wall_ms"].get<double>(),
              drafted["wall_ms"].get<double>());
  for (const char* arm : {"plain", "drafted"}) {
    const json& p = row[std::string(arm) + "_phases"];
    std::printf("        %s run phases (median run, decode): forwards quiet %lld x %.4f, tap-only %lld x %.4f, with drafts"
                " %lld x %.4f ms, slow %lld (+%.2f ms); drafter ms passes %.2f absorbs %.2f settles %.2f; host %.2f;"
                " first round %.2f, outside rounds %.2f ms\n",
                arm, static_cast<long long>(p["quiet_forwards"].get<int64_t>()), p["quiet_forward_ms"].get<double>(),
                static_cast<long long>(p["tap_only_forwards"].get<int64_t>()), p["tap_only_forward_ms"].get<double>(),
                static_cast<long long>(p["draft_forwards"].get<int64_t>()), p["draft_forward_ms"].get<double>(),
                static_cast<long long>(p["slow_forwards"].get<int64_t>()), p["slow_forward_excess_ms"].get<double>(),
                p["pass_ms"].get<double>(), p["absorb_ms"].get<double>(), p["settle_ms"].get<double>(),
                p["host_ms"].get<double>(), p["first_round_ms"].get<double>(), p["outside_rounds_ms"].get<double>());
  }
  if (row.contains("tables")) {
    const json& tables = row["tables"];
    std::string verify;
    char piece[64];
    for (const json& point : tables["verify_ms"]) {
      std::snprintf(piece, sizeof piece, " %d:%.3f", point[0].get<int>(), point[1].get<double>());
      verify += piece;
    }
    std::string draft;
    for (const json& point : tables["draft_ms"]) {
      std::snprintf(piece, sizeof piece, " %d:%.3f/%.3f", point[0].get<int>(), point[1].get<double>(),
                    point[2].get<double>());
      draft += piece;
    }
    std::string sampled;
    for (const json& point : tables["sampled_draft_ms"]) {
      std::snprintf(piece, sizeof piece, " %d:%.3f", point[0].get<int>(), point[1].get<double>());
      sampled += piece;
    }
    if (!sampled.empty()) draft += "; sampled (deepest)" + sampled;
    std::printf("        load-time tables: verify ms by rows%s; pass ms by streams (depth 1/%d)%s; absorb %.4f ms + %.5f "
                "ms/row\n",
                verify.c_str(), tables["draft_max_depth"].get<int>(), draft.c_str(),
                tables["absorb_call_ms"].get<double>(), tables["absorb_ms_per_row"].get<double>());
  }
  std::fflush(stdout);
}

void print_header() {
  std::printf("%7s %11s %11s %8s %8s %7s %8s %9s %7s %7s %8s %7s %6s\n", "streams", "plain tok/s", "draft tok/s",
              "speedup", "accepted", "tok/win", "drafted", "verified", "passes", "tapped", "absorbed", "absorbs",
              "exact");
}

void print_row(const json& row) {
  std::printf("%7d %11.1f %11.1f %7.2fx %8.2f %7.2f %8lld %9lld %7lld %7lld %8lld %7lld %6s\n", row["streams"].get<int>(),
              row["plain_decode_tokens_per_s"].get<double>(), row["drafted_decode_tokens_per_s"].get<double>(),
              row["speedup"].get<double>(), row["accepted_length"].get<double>(),
              row["tokens_per_window"].get<double>(), static_cast<long long>(row["drafted_rows"].get<int64_t>()),
              static_cast<long long>(row["verified_rows"].get<int64_t>()),
              static_cast<long long>(row["drafter_passes"].get<int64_t>()),
              static_cast<long long>(row["tap_rows"].get<int64_t>()),
              static_cast<long long>(row["absorbed_rows"].get<int64_t>()),
              static_cast<long long>(row["absorb_calls"].get<int64_t>()), row["exact"].get<bool>() ? "yes" : "NO");
  std::fflush(stdout);
}

// One stream count on the fakes: both runs share the cost model through one fixed clock.
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
  LS_ASSIGN_OR_RETURN(Measured plain, run_once(plain_target, nullptr, clock, arrivals));
  FakeTarget drafted_target(target_options);
  FakeDrafter drafter(drafter_options);
  json tables;
  LS_ASSIGN_OR_RETURN(Measured drafted, run_once(drafted_target, &drafter, clock, arrivals, 0, &tables));
  json row = row_json(streams, {plain}, {drafted}, drafted.replies == plain.replies);
  row["tables"] = tables;
  return row;
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

// One stream count on a real target: A B A B ...; the first plain run's replies are the record.
Result<json> real_cell(const BenchOptions& options, Target& target, Drafter* dspark, int streams,
                       const std::vector<std::vector<int32_t>>& prompts, const AcceptanceProfile& profile) {
  WallClock clock;
  std::vector<Arrival> arrivals = bench_requests(streams, options.tokens, target.facts().vocab_size, options.sampled, prompts);
  std::vector<Measured> plain_runs, drafted_runs;
  bool exact = true;
  int64_t mismatches = 0;
  json tables;
  auto run_plain = [&]() -> Status {
    LS_ASSIGN_OR_RETURN(Measured plain, run_once(target, nullptr, clock, arrivals, options.max_rows));
    if (!plain_runs.empty()) exact = exact && plain.replies == plain_runs.front().replies;
    plain_runs.push_back(std::move(plain));
    return ok_status();
  };
  auto run_drafted = [&]() -> Status {
    DraftedArm arm = drafted_arm(options, target, dspark, arrivals, plain_runs.front().replies, profile);
    LS_ASSIGN_OR_RETURN(Measured drafted,
                        run_once(target, arm.drafter, clock, arrivals, options.max_rows, tables.is_null() ? &tables : nullptr));
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

// The machine: the CPU model, core count and host name, plus what the caller says (e.g. the GPU and driver).
json machine_json(const BenchOptions& options) {
  std::string cpu_model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return {{"cpu", cpu_model},
          {"cpu_threads", std::thread::hardware_concurrency()},
          {"host", host},
          {"given", options.machine}};
}

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
              {"machine", machine_json(options)},
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
}  // namespace ls

int main(int argc, char** argv) {
  ls::set_log_level(ls::LogLevel::Warn);
  ls::BenchOptions options;
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
    else if (flag == "--streams") options.streams = ls::parse_counts(value);
    else if (flag == "--synthetic-acceptance") options.synthetic_acceptance = std::atof(value.c_str());
    else if (flag == "--exact-width-probe") options.exact_width_probe = std::atoi(value.c_str());
    else if (flag == "--max-rows") options.max_rows = std::atoi(value.c_str());
    else if (flag == "--sampled") options.sampled = value == "1";
    else if (flag == "--taps") ls::g_device_taps = value != "host";
    else if (flag == "--pricing") ls::g_new_pricing = value == "new";
    else if (flag == "--trim") ls::g_trim_prices_pass = value != "verify";
    else if (flag == "--admit") ls::g_scout_prompt_only = value != "all";
    else if (flag == "--quiet-reprice") ls::g_quiet_reprice_every = std::atoi(value.c_str());
    else if (flag == "--probe") ls::g_group_probes = value != "alone";
    else if (flag == "--deep-chances") ls::g_confidence_for_unexplored = value == "confidence";
    else if (flag == "--depth-ask") ls::g_price_depth_asked = value == "priced" ? 1 : 0;
    else if (flag == "--probe-value") ls::g_probes_pay_their_way = value == "on" ? 1 : 0;
    else if (flag == "--pass-modes") ls::g_pass_cost_per_mode = value == "on" ? 1 : 0;
    else if (flag == "--restart-scout") ls::g_restart_scout = value == "defer" ? 1 : value == "alone" ? 2 : 0;
    else if (flag == "--explore-gate") {
      ls::g_explore_repay = std::atof(value.c_str());
      const size_t comma = value.find(',');
      if (comma != std::string::npos) ls::g_explore_repay_if_right = std::atof(value.c_str() + comma + 1);
    }
    else if (flag == "--pass-timing") ls::g_pass_after_forward = value == "after-forward" ? 1 : 0;
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
                 "[--sampled 0|1] [--taps device|host] [--pricing new|old] [--trim round|verify] [--admit scout|all] [--quiet-reprice N] [--probe group|alone] [--deep-chances prior|confidence] [--depth-ask whole|priced] [--probe-value off|on] [--pass-modes off|on] [--restart-scout off|defer|alone] [--explore-gate X[,Y]] [--pass-timing alone|after-forward] [--debug 0|1] [--machine TEXT] [--commit SHA] [--json PATH]\n");
    return 2;
  }
  return ls::run(options);
}
