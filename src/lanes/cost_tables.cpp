// Monotone cost tables with interpolation at load and moving-average correction online.
#include "lanes/cost_tables.h"

#include <algorithm>
#include <map>

#include "base/check.h"

namespace ls {

double interpolate(std::span<const double> xs, std::span<const double> ys, double x) {
  LS_CHECK(!xs.empty() && xs.size() == ys.size(), "interpolate needs matching non-empty knots");
  if (xs.size() == 1) return ys[0];
  size_t upper = 1;
  while (upper + 1 < xs.size() && xs[upper] < x) ++upper;
  const size_t lower = upper - 1;
  const double span_x = xs[upper] - xs[lower];
  const double slope = span_x > 0 ? (ys[upper] - ys[lower]) / span_x : 0.0;
  return std::max(0.0, ys[lower] + slope * (x - xs[lower]));
}

void VerifyCosts::init(int max_rows, std::span<const TimedPoint> timed) {
  LS_CHECK(max_rows >= 1 && !timed.empty(), "verify costs need rows and at least one timed point");
  std::map<int, double> points;
  for (const TimedPoint& point : timed) points[point.rows] = point.ms;
  std::vector<double> xs, ys;
  for (auto [rows, ms] : points) {
    xs.push_back(rows);
    ys.push_back(ms);
  }
  measured_.assign(max_rows + 1, 0.0);
  for (int rows = 1; rows <= max_rows; ++rows) measured_[rows] = interpolate(xs, ys, rows);
  refresh();
}

void VerifyCosts::refresh() {
  ms_.assign(measured_.size(), 0.0);
  for (size_t rows = 1; rows < measured_.size(); ++rows) ms_[rows] = std::max(measured_[rows], ms_[rows - 1]);
}

double VerifyCosts::ms(int rows) const {
  if (rows <= 0 || ms_.empty()) return 0.0;
  const int last = max_rows();
  if (rows <= last) return ms_[rows];
  // Past the table: extend with the last slope.
  const double slope = last >= 2 ? ms_[last] - ms_[last - 1] : ms_[last];
  return ms_[last] + slope * (rows - last);
}

void VerifyCosts::observe(int rows, double measured_ms, double rate) {
  if (rows < 1 || rows > max_rows()) return;
  const double value = ms_[rows] + rate * (measured_ms - ms_[rows]);
  measured_[rows] = value;
  // The running maximum moved in place as refresh() moves it, but above `rows` only until an entry is what it was
  // (nothing past it changed; lanes18: refresh() walked every row count each verify, a tenth of a dormant round's host
  // work at 16 streams).
  for (int below = 1; below <= rows; ++below) {
    if (below < rows) measured_[below] = std::min(measured_[below], value);
    ms_[below] = std::max(measured_[below], ms_[below - 1]);
  }
  for (size_t above = rows + 1; above < ms_.size(); ++above) {
    const double moved = std::max(measured_[above], ms_[above - 1]);
    if (moved == ms_[above]) break;
    ms_[above] = moved;
  }
}

void DraftCosts::init(int max_streams, int max_depth, std::span<const TimedPoint> timed) {
  LS_CHECK(max_streams >= 1 && max_depth >= 1 && !timed.empty(), "draft costs need a shape and timed points");
  max_streams_ = max_streams;
  max_depth_ = max_depth;
  std::map<int, std::map<int, double>> grid;  // streams -> depth -> ms
  for (const TimedPoint& point : timed) grid[point.rows][point.depth] = point.ms;
  // First interpolate along depth for each timed stream count, then along streams.
  std::vector<double> stream_knots;
  std::vector<std::vector<double>> by_depth;  // [timed streams][max_depth]
  for (auto& [streams, depths] : grid) {
    std::vector<double> xs, ys;
    for (auto [depth, ms] : depths) {
      xs.push_back(depth);
      ys.push_back(ms);
    }
    std::vector<double> row(max_depth);
    for (int depth = 1; depth <= max_depth; ++depth) row[depth - 1] = interpolate(xs, ys, depth);
    stream_knots.push_back(streams);
    by_depth.push_back(std::move(row));
  }
  measured_.assign(static_cast<size_t>(max_streams) * max_depth, 0.0);
  for (int depth = 1; depth <= max_depth; ++depth) {
    std::vector<double> ys;
    for (const auto& row : by_depth) ys.push_back(row[depth - 1]);
    for (int streams = 1; streams <= max_streams; ++streams) {
      at(streams, depth) = interpolate(stream_knots, ys, streams);
    }
  }
  refresh();
}

void DraftCosts::refresh() {
  ms_ = measured_;
  for (int streams = 1; streams <= max_streams_; ++streams) {
    for (int depth = 1; depth <= max_depth_; ++depth) {
      double floor = 0.0;
      if (streams > 1) floor = std::max(floor, ms_[index(streams - 1, depth)]);
      if (depth > 1) floor = std::max(floor, ms_[index(streams, depth - 1)]);
      ms_[index(streams, depth)] = std::max(ms_[index(streams, depth)], floor);
    }
  }
}

double DraftCosts::ms(int streams, int depth) const {
  if (streams <= 0 || depth <= 0 || ms_.empty()) return 0.0;
  const int clamped_depth = std::min(depth, max_depth_);
  if (streams <= max_streams_) return at(streams, clamped_depth);
  // More streams than timed: scale the widest entry per stream.
  return at(max_streams_, clamped_depth) * streams / max_streams_;
}

void DraftCosts::observe(int streams, int depth, double measured_ms, double rate) {
  if (streams < 1 || streams > max_streams_ || depth < 1 || depth > max_depth_) return;
  const double current = ms_[index(streams, depth)];
  const double value = current + rate * (measured_ms - current);
  at(streams, depth) = value;
  for (int s = 1; s <= streams; ++s) {
    for (int d = 1; d <= depth; ++d) at(s, d) = std::min(at(s, d), value);
  }
  refresh();
}

}  // namespace ls
