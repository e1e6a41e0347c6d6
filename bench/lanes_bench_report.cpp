// lanes_bench's results: the JSON of a table row (medians over repeats, the median run's phases) and the printout.
#include "lanes_bench_report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>

#include "bench_util.h"

namespace ls::bench {
namespace {

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
          {"first_sightings", run.shapes.first_sightings},
          {"captures", run.shapes.captures},
          {"outside_rounds_ms", run.ms - s.round_ms}};
}

// The run of median time among `runs`.
const Measured& median_run(const std::vector<Measured>& runs) {
  std::vector<size_t> order(runs.size());
  for (size_t index = 0; index < order.size(); ++index) order[index] = index;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a].ms < runs[b].ms; });
  return runs[order[(order.size() - 1) / 2]];
}

// " r:ms r:ms ..." of [key, ms] points (ms at `column`).
std::string points_text(const json& points, int column = 1) {
  std::string text;
  char piece[48];
  for (const json& point : points) {
    std::snprintf(piece, sizeof piece, " %d:%.3f", point[0].get<int>(), point[column].get<double>());
    text += piece;
  }
  return text;
}

// The load-time tables: verify ms by rows, passes by streams, absorbs; then the sampled windows' verify next to the
// greedy one at each row count (samp10's ask: what a sampled verify costs pricing).
void print_tables(const json& tables) {
  std::string draft;
  char piece[64];
  for (const json& point : tables["draft_ms"]) {
    std::snprintf(piece, sizeof piece, " %d:%.3f/%.3f", point[0].get<int>(), point[1].get<double>(),
                  point[2].get<double>());
    draft += piece;
  }
  const std::string sampled = points_text(tables["sampled_draft_ms"]);
  if (!sampled.empty()) draft += "; sampled (deepest)" + sampled;
  std::printf("        load-time tables: verify ms by rows%s; pass ms by streams (depth 1/%d)%s; absorb %.4f ms + %.5f "
              "ms/row\n",
              points_text(tables["verify_ms"]).c_str(), tables["draft_max_depth"].get<int>(), draft.c_str(),
              tables["absorb_call_ms"].get<double>(), tables["absorb_ms_per_row"].get<double>());
  if (!tables.contains("sampled_verify_ms") || tables["sampled_verify_ms"].empty()) return;
  std::string ratios;
  for (const json& point : tables["sampled_verify_ms"]) {
    for (const json& greedy : tables["verify_ms"]) {
      if (greedy[0] != point[0] || greedy[1].get<double>() <= 0) continue;
      std::snprintf(piece, sizeof piece, " %d:%.3f (%.2fx)", point[0].get<int>(), point[1].get<double>(),
                    point[1].get<double>() / greedy[1].get<double>());
      ratios += piece;
    }
  }
  std::printf("        load-time sampled verify ms by rows (x greedy)%s\n", ratios.c_str());
}

}  // namespace

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

json tables_json(const CostTables& tables, int max_rows) {
  // [rows, ms] at the row counts the load-time timing takes (a table that is empty gives none).
  auto by_rows = [max_rows](const VerifyCosts& costs) {
    json points = json::array();
    for (int rows : {1, 2, 3, 4, 6, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256}) {
      if (!costs.empty() && rows <= std::min(max_rows, costs.max_rows())) points.push_back({rows, costs.ms(rows)});
    }
    return points;
  };
  const json verify = by_rows(tables.verify);
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
          {"sampled_verify_ms", by_rows(tables.sampled_verify)},  // windows with sampled rows (--pass-modes on)
          {"draft_ms", draft},
          {"sampled_draft_ms", sampled},
          {"draft_max_depth", deepest},
          {"absorb_call_ms", tables.absorb_call_ms},
          {"absorb_ms_per_row", tables.absorb_ms_per_row}};
}


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
                " first round %.2f, outside rounds %.2f ms; shapes run eagerly %lld, captured %lld\n",
                arm, static_cast<long long>(p["quiet_forwards"].get<int64_t>()), p["quiet_forward_ms"].get<double>(),
                static_cast<long long>(p["tap_only_forwards"].get<int64_t>()), p["tap_only_forward_ms"].get<double>(),
                static_cast<long long>(p["draft_forwards"].get<int64_t>()), p["draft_forward_ms"].get<double>(),
                static_cast<long long>(p["slow_forwards"].get<int64_t>()), p["slow_forward_excess_ms"].get<double>(),
                p["pass_ms"].get<double>(), p["absorb_ms"].get<double>(), p["settle_ms"].get<double>(),
                p["host_ms"].get<double>(), p["first_round_ms"].get<double>(), p["outside_rounds_ms"].get<double>(),
                static_cast<long long>(p["first_sightings"].get<int64_t>()),
                static_cast<long long>(p["captures"].get<int64_t>()));
  }
  if (row.contains("tables")) print_tables(row["tables"]);
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

json machine_json(const std::string& given) {
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
          {"given", given}};
}

}  // namespace ls::bench
