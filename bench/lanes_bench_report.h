// lanes_bench's results: one run's measurements, the JSON of a table row, and the printed table and splits.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lanes/lanes.h"
#include "model/shape_counts.h"

namespace ls::bench {

using json = nlohmann::json;

// One run: its time, its replies and the lanes' counters (the first round apart: decode = stats - first_round).
struct Measured {
  double ms = 0;              // submit to idle
  double first_round_ms = 0;  // the round that prefilled every stream
  double host_wall_ms = 0;    // wall-clock time of the whole run (on the fakes: the lanes' own host work)
  int64_t tokens = 0;
  int streams = 0;
  LanesStats stats;
  LanesStats first_round;     // stats after the first round (decode = stats - first_round)
  std::vector<std::vector<int32_t>> replies;  // [stream] in submit order
  ShapeCounts shapes;         // the target's forwards without a graph to replay during the run (lanes18)
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

// The cost tables pricing starts from (timed at load): verify ms by rows (greedy and sampled windows), drafter pass
// ms by (streams, depth), absorbs.
json tables_json(const CostTables& tables, int max_rows);
// One table row from the plain and drafted runs of one stream count (medians over repeats).
json row_json(int streams, const std::vector<Measured>& plain, const std::vector<Measured>& drafted, bool exact);
// The machine: the CPU model, core count and host name, plus what the caller says (e.g. the GPU and driver).
json machine_json(const std::string& given);

void print_header();
void print_row(const json& row);
// Where a decode round's time goes in each arm (medians), and the tables pricing started from.
void print_split(const json& row);

}  // namespace ls::bench
