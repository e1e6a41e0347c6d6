// Timing the target and the drafter on scratch streams at load.
#include "lanes/calibrate.h"

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

#include "base/hash.h"
#include "base/log.h"

namespace ls {
namespace {

// Row counts timed at load: dense where tables bend, sparse further out, always the ends.
std::vector<int> timed_row_counts(int max_rows) {
  std::set<int> counts = {1, max_rows};
  for (int rows : {2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}) {
    if (rows < max_rows) counts.insert(rows);
  }
  return {counts.begin(), counts.end()};
}

// Runs one forward of `rows` rows split into windows of at most `width` rows on scratch streams, then commits all.
Result<double> time_one_forward(Target& target, const Clock& clock, const CalibrationOptions& options, int rows,
                                std::vector<StreamId>& scratch, bool sampled = false) {
  const int windows_needed = (rows + options.width - 1) / options.width;
  while (static_cast<int>(scratch.size()) < windows_needed) scratch.push_back(options.scratch_base + scratch.size());
  // Distinct, spread token ids (a fixed pseudo-random sequence): an MoE target routes each row by its token, so
  // repeated ids would route every row to the same few experts and time a verify far cheaper than real rows.
  const uint64_t vocab = static_cast<uint64_t>(std::max(target.facts().vocab_size, 1));
  std::vector<int32_t> tokens(rows);
  for (int row = 0; row < rows; ++row) {
    tokens[row] = static_cast<int32_t>(splitmix64(0x7e57ull + static_cast<uint64_t>(row)) % vocab);
  }
  std::vector<Window> windows;
  int offset = 0;
  for (int index = 0; index < windows_needed; ++index) {
    const int window_rows = std::min(options.width, rows - offset);
    Window window;
    window.stream = scratch[index];
    window.tokens = std::span<const int32_t>(tokens).subspan(offset, window_rows);
    // Sampled: temperature 0.8, every second window also top-p 0.9 (as the sampled passes below).
    const float top_p = index % 2 == 1 ? 0.9f : 1.0f;
    if (sampled) window.sampling = {0.8f, 0, top_p, 0.0f, 0x5eedull + static_cast<uint64_t>(index)};
    windows.push_back(window);
    offset += window_rows;
  }
  const double start_ms = clock.now_ms();
  LS_ASSIGN_OR_RETURN(Verified verified, target.forward(windows));
  const double elapsed_ms = clock.now_ms() - start_ms;
  for (const Window& window : windows) {
    LS_RETURN_IF_ERROR(target.commit(window.stream, static_cast<int>(window.tokens.size())));
  }
  return elapsed_ms;
}

Result<std::vector<TimedPoint>> time_verify(Target& target, const Clock& clock, const CalibrationOptions& options,
                                            bool sampled = false) {
  std::vector<TimedPoint> points;
  std::vector<StreamId> scratch;
  Status status;
  // Sampled windows (an extra table, load time): fewer row counts, one timed run after the untimed one.
  std::vector<int> row_counts = timed_row_counts(options.max_rows);
  if (sampled) {
    std::erase_if(row_counts, [&](int rows) {
      return rows != 1 && rows != options.max_rows && rows != 4 && rows != 16 && rows != 64;
    });
  }
  const int repeats = sampled ? std::min(options.repeats, 1) : options.repeats;
  CalibrationOptions count_options = options;  // each row count's scratch streams get ids of their own
  for (int rows : row_counts) {
    double fastest = std::numeric_limits<double>::infinity();
    for (int run = 0; run <= repeats && status.ok(); ++run) {
      Result<double> elapsed = time_one_forward(target, clock, count_options, rows, scratch, sampled);
      if (!elapsed.ok()) {
        status = elapsed.status();
        break;
      }
      if (run > 0) fastest = std::min(fastest, *elapsed);
    }
    // Released after each row count: the scratch streams would otherwise grow by every run of every count (a few
    // hundred KV pages on a CUDA target), more than a small pool (serve --kv-pages) holds.
    for (StreamId stream : scratch) target.release(stream);
    count_options.scratch_base += scratch.size();
    scratch.clear();
    if (!status.ok()) break;
    points.push_back({rows, 0, fastest});
  }
  if (!status.ok()) return status;
  return points;
}

// Prefills `streams` scratch streams with a short context and feeds it to the drafter; returns the median time of
// those short absorbs (each opens a stream, as a request's first absorb does).
Result<double> prepare_draft_scratch(Target& target, Drafter& drafter, const Clock& clock,
                                     const CalibrationOptions& options, int streams) {
  std::vector<double> absorb_ms;
  std::vector<int32_t> context(options.context_tokens);
  for (int index = 0; index < options.context_tokens; ++index) context[index] = index + 1;
  int per_forward = std::max(1, options.max_rows / options.context_tokens);
  for (int first = 0; first < streams; first += per_forward) {
    std::vector<Window> windows;
    for (int index = first; index < std::min(streams, first + per_forward); ++index) {
      Window window;
      window.stream = options.scratch_base + index;
      window.tokens = context;
      window.first_drawn_row = options.context_tokens - 1;
      windows.push_back(window);
    }
    LS_ASSIGN_OR_RETURN(Verified verified, target.forward(windows));
    const size_t row_floats = verified.taps.size() / std::max<int64_t>(verified.row_begin.back(), 1);
    for (size_t index = 0; index < windows.size(); ++index) {
      LS_RETURN_IF_ERROR(target.commit(windows[index].stream, options.context_tokens));
      std::span<const float> taps(verified.taps);
      taps = taps.subspan(verified.row_begin[index] * row_floats, options.context_tokens * row_floats);
      // Timing only: a drafter that refuses a scratch context is still timed (its errors surface when serving).
      const double start_ms = clock.now_ms();
      Status absorbed = drafter.absorb(windows[index].stream, 0, options.context_tokens, taps);
      absorb_ms.push_back(clock.now_ms() - start_ms);
      if (!absorbed.ok()) log_warn("drafter timing: scratch absorb failed: %s", absorbed.to_string().c_str());
    }
  }
  if (absorb_ms.empty()) return 0.0;
  std::nth_element(absorb_ms.begin(), absorb_ms.begin() + absorb_ms.size() / 2, absorb_ms.end());
  return absorb_ms[absorb_ms.size() / 2];
}

// Times the drafter absorbing one long context (a catch-up of a whole prompt) on its own scratch stream: the
// fastest of `repeats` absorbs after one untimed (each replaces the context from position 0).
Result<double> time_long_absorb(Target& target, Drafter& drafter, const Clock& clock,
                                const CalibrationOptions& options, StreamId scratch, int rows) {
  std::vector<int32_t> context(rows);
  for (int index = 0; index < rows; ++index) context[index] = index + 1;
  Window window;
  window.stream = scratch;
  window.tokens = context;
  window.first_drawn_row = rows - 1;
  LS_ASSIGN_OR_RETURN(Verified verified, target.forward(std::span<const Window>(&window, 1)));
  LS_RETURN_IF_ERROR(target.commit(scratch, rows));
  double fastest = std::numeric_limits<double>::infinity();
  for (int run = 0; run <= options.repeats; ++run) {
    const double start_ms = clock.now_ms();
    Status absorbed = drafter.absorb(scratch, 0, rows, verified.taps);
    if (run > 0) fastest = std::min(fastest, clock.now_ms() - start_ms);
    if (!absorbed.ok()) log_warn("drafter timing: long scratch absorb failed: %s", absorbed.to_string().c_str());
  }
  return fastest;
}

Result<std::vector<TimedPoint>> time_draft(Target& target, Drafter& drafter, const Clock& clock,
                                           const CalibrationOptions& options, CostTables& tables,
                                           std::vector<TimedPoint>& sampled_points) {
  std::set<int> stream_counts = {1, options.max_streams};
  for (int streams : {4, 16}) {
    if (streams < options.max_streams) stream_counts.insert(streams);
  }
  std::set<int> depths = {1, options.max_depth, (options.max_depth + 1) / 2};
  // Separate ids from the verify timing's scratch streams, so every id lives (and is released) once.
  CalibrationOptions draft_options = options;
  draft_options.scratch_base = options.scratch_base + (StreamId{1} << 20);
  Result<double> short_absorb_ms = prepare_draft_scratch(target, drafter, clock, draft_options, options.max_streams);
  Status status = short_absorb_ms.status();
  // Absorb costs: call + per_row * rows, fitted through the short absorbs and one long one.
  const StreamId long_scratch = draft_options.scratch_base + options.max_streams;
  const int long_rows = std::min(options.max_rows, options.long_context_tokens);
  if (status.ok() && long_rows > options.context_tokens) {
    Result<double> long_absorb_ms = time_long_absorb(target, drafter, clock, draft_options, long_scratch, long_rows);
    status = long_absorb_ms.status();
    if (status.ok()) {
      tables.absorb_ms_per_row =
          std::max(0.0, (*long_absorb_ms - *short_absorb_ms) / (long_rows - options.context_tokens));
      tables.absorb_call_ms = std::max(0.0, *short_absorb_ms - tables.absorb_ms_per_row * options.context_tokens);
    }
  } else if (status.ok()) {
    tables.absorb_ms_per_row = *short_absorb_ms / options.context_tokens;
  }
  target.release(long_scratch);
  drafter.release(long_scratch);
  std::vector<TimedPoint> points;
  // pass_after_forward: one-row windows of their own scratch streams, forwarded (and committed) before each pass.
  CalibrationOptions forward_options = options;
  forward_options.scratch_base = options.scratch_base + (StreamId{2} << 20);
  forward_options.width = 1;
  std::vector<StreamId> forward_scratch;
  // The fastest of `repeats` passes (after one untimed) of `streams` scratch requests at `depth`.
  auto time_pass = [&](int streams, int depth, bool sampled) {
    std::vector<DraftRequest> requests(streams);
    for (int index = 0; index < streams; ++index) {
      requests[index].stream = draft_options.scratch_base + index;
      requests[index].anchor_token = 0;
      requests[index].anchor_position = options.context_tokens;
      requests[index].depth = depth;
      // Sampled: temperature alone, every second request with top-p 0.9 too (a lone request takes the cheaper pick;
      // a pass of several waits for its dearest, and a filtered pick is the dearer one).
      const float top_p = index % 2 == 1 ? 0.9f : 1.0f;
      if (sampled) requests[index].sampling = {0.8f, 0, top_p, 0.0f, 0x5eedull + static_cast<uint64_t>(index)};
    }
    double fastest = std::numeric_limits<double>::infinity();
    // Sampled: one timed run unless timed like greedy ones (load time).
    const int repeats = sampled ? std::min(options.repeats, 1) : options.repeats;
    for (int run = 0; run <= repeats && status.ok(); ++run) {
      if (options.pass_after_forward) status = time_one_forward(target, clock, forward_options, streams,
                                                                forward_scratch).status();
      const double start_ms = clock.now_ms();
      std::vector<Draft> drafts = drafter.draft(requests);
      if (run > 0) fastest = std::min(fastest, clock.now_ms() - start_ms);
    }
    return fastest;
  };
  for (int streams : stream_counts) {
    for (int depth : depths) {
      if (!status.ok()) break;
      points.push_back({streams, depth, time_pass(streams, depth, false)});
    }
    if (!options.sampled_passes || !status.ok()) continue;
    // Sampled passes at the deepest depth; the other depths scale with the greedy ones.
    const double greedy_ms = points.back().ms;
    const double ratio = greedy_ms > 0 ? time_pass(streams, options.max_depth, true) / greedy_ms : 1.0;
    for (size_t index = points.size() - depths.size(); index < points.size(); ++index) {
      sampled_points.push_back({streams, points[index].depth, points[index].ms * ratio});
    }
  }
  for (int index = 0; index < options.max_streams; ++index) {
    target.release(draft_options.scratch_base + index);
    drafter.release(draft_options.scratch_base + index);
  }
  for (StreamId stream : forward_scratch) target.release(stream);
  if (!status.ok()) return status;
  return points;
}

}  // namespace

Result<CostTables> time_costs(Target& target, Drafter* drafter, const Clock& clock, const CalibrationOptions& options) {
  CostTables tables;
  LS_ASSIGN_OR_RETURN(std::vector<TimedPoint> verify_points, time_verify(target, clock, options));
  tables.verify.init(options.max_rows, verify_points);
  if (drafter != nullptr && options.sampled_passes) {
    // Scratch ids of their own (every id lives, and is released, once).
    CalibrationOptions sampled_options = options;
    sampled_options.scratch_base = options.scratch_base + (StreamId{3} << 20);
    LS_ASSIGN_OR_RETURN(std::vector<TimedPoint> sampled_points, time_verify(target, clock, sampled_options, true));
    tables.sampled_verify.init(options.max_rows, sampled_points);
  }
  if (drafter != nullptr && options.max_depth >= 1) {
    std::vector<TimedPoint> sampled_points;
    LS_ASSIGN_OR_RETURN(std::vector<TimedPoint> draft_points,
                        time_draft(target, *drafter, clock, options, tables, sampled_points));
    tables.draft.init(options.max_streams, options.max_depth, draft_points);
    if (!sampled_points.empty()) tables.sampled_draft.init(options.max_streams, options.max_depth, sampled_points);
  }
  return tables;
}

}  // namespace ls
