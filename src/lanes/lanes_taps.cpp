// The drafter's side of the taps: rows held for it, absorbed (one call per stream, or one batched call on the
// device), contexts restarted past skipped rows, and a stream dropped from drafting when its context breaks.
#include <algorithm>
#include <string>

#include "base/check.h"
#include "base/log.h"
#include "lanes/lanes.h"

namespace ls {

void Lanes::hold_taps(Stream& stream, int64_t start, int rows, std::span<const float> taps) {
  if (!stream.drafting || drafter_ == nullptr) return;
  constexpr int kMostUnabsorbedRows = 512;
  // A dormant stream taps only while it is due to probe: its most recent rows are enough to restart from.
  constexpr int kMostDormantRows = 64;
  if (stream.unabsorbed_rows > 0 && start != stream.unabsorbed_start + stream.unabsorbed_rows) {
    // Rows were skipped since (the stream did not tap for a while): what is held is too old to continue from.
    LS_CHECK(restarts_, "kept rows reach a drafter that cannot restart in order");
    stream.unabsorbed_rows = 0;
  }
  if (stream.unabsorbed_rows == 0) {
    stream.unabsorbed_start = start;
    stream.unabsorbed_taps.clear();
    // Room for the rows the stream may still keep before a flush, so a held prompt is not copied again as
    // rows are appended (reserved pages that are never written cost nothing).
    if (rows > 0 && !stream.dormant) {
      const int room = rows + std::min(std::max(stream.remaining(), 0) + 1, kMostUnabsorbedRows);
      stream.unabsorbed_taps.reserve(taps.size() / rows * room);
    }
  }
  stream.unabsorbed_taps.insert(stream.unabsorbed_taps.end(), taps.begin(), taps.end());
  stream.unabsorbed_rows += rows;
  if (stream.dormant && stream.unabsorbed_rows > kMostDormantRows) {
    const int drop = stream.unabsorbed_rows - kMostDormantRows;
    const size_t row_floats = stream.unabsorbed_taps.size() / static_cast<size_t>(stream.unabsorbed_rows);
    stream.unabsorbed_taps.erase(stream.unabsorbed_taps.begin(),
                                 stream.unabsorbed_taps.begin() + static_cast<std::ptrdiff_t>(drop * row_floats));
    stream.unabsorbed_start += drop;
    stream.unabsorbed_rows = kMostDormantRows;
  }
  // Bound the memory of a stream that stays plain for long: hand over what piled up.
  if (stream.unabsorbed_rows >= kMostUnabsorbedRows) flush_taps(stream);
}

bool Lanes::flush_taps(Stream& stream) {
  if (!stream.drafting || drafter_ == nullptr) return false;
  const double flush_start_ms = clock_.now_ms();
  Status status = ok_status();
  // Where the drafter's context must continue: the first held row, or (nothing held) the anchor itself.
  const int64_t from = stream.unabsorbed_rows > 0 ? stream.unabsorbed_start : stream.committed;
  LS_CHECK(from >= stream.drafter_end, "held taps start at or after what the drafter holds");
  if (from > stream.drafter_end) {
    // Rows skipped while dormant: the drafter continues past them (acceptance may drop, tokens cannot change).
    stream.drafter_open = true;
    status = drafter_->restart(stream.id, from);
    ++stats_.drafter_restarts;
    if (status.ok()) stream.drafter_end = from;
    stream.restarted = true;
  }
  if (status.ok() && stream.unabsorbed_rows > 0) {
    stream.drafter_open = true;
    const double start_ms = clock_.now_ms();
    status = drafter_->absorb(stream.id, stream.unabsorbed_start, stream.unabsorbed_rows, stream.unabsorbed_taps);
    ++stats_.absorb_calls;
    stats_.absorbed_rows += stream.unabsorbed_rows;
    ledger_.drafting = true;
    if (status.ok()) {
      pricing_.observe_absorb(stream.unabsorbed_rows, clock_.now_ms() - start_ms);
      stream.drafter_end = stream.unabsorbed_start + stream.unabsorbed_rows;
    }
  }
  stream.unabsorbed_start += stream.unabsorbed_rows;
  stream.unabsorbed_rows = 0;
  stream.unabsorbed_taps.clear();
  if (status.ok() && stream.drafter_end < stream.committed) {
    // Kept rows that were never tapped (the round before it became due): skip them too.
    status = drafter_->restart(stream.id, stream.committed);
    ++stats_.drafter_restarts;
    if (status.ok()) stream.drafter_end = stream.committed;
    stream.restarted = true;
  }
  stats_.drafter_ms += clock_.now_ms() - flush_start_ms;
  stats_.absorb_ms += clock_.now_ms() - flush_start_ms;
  if (status.ok()) return true;
  drop_drafting(stream);
  return false;
}

void Lanes::drop_drafting(Stream& stream) {
  // The drafter's context for this stream now has a gap: it decodes plainly from here on (still exact).
  ++stats_.drafter_faults;
  ++stream.stats.drafter_faults;
  stream.drafting = false;
  stream.wants_taps = false;
  stream.held_drafts.clear();
  stream.held_chances.clear();
  stream.held_forced = 0;
  stream.unabsorbed_rows = 0;
  stream.unabsorbed_taps.clear();
  drafter_->release(stream.id);
  stream.drafter_open = false;
}

void Lanes::absorb_on_device(const Verified& verified, std::vector<Stream*>& streams, std::vector<TapRows>& rows) {
  // Contexts that skipped rows (dormant streams due to probe) restart where their rows begin.
  const double call_start_ms = clock_.now_ms();
  size_t kept = 0;
  int total_rows = 0;
  for (size_t index = 0; index < rows.size(); ++index) {
    Stream& stream = *streams[index];
    LS_CHECK(rows[index].start >= stream.drafter_end, "device taps start at or after what the drafter holds");
    stream.drafter_open = true;
    if (rows[index].start > stream.drafter_end) {
      ++stats_.drafter_restarts;
      if (!drafter_->restart(stream.id, rows[index].start).ok()) {
        drop_drafting(stream);
        continue;
      }
      stream.drafter_end = rows[index].start;
      stream.restarted = true;
    }
    streams[kept] = &stream;
    rows[kept++] = rows[index];
    total_rows += rows[index].rows;
  }
  streams.resize(kept);
  rows.resize(kept);
  if (rows.empty()) {
    stats_.drafter_ms += clock_.now_ms() - call_start_ms;
    stats_.absorb_ms += clock_.now_ms() - call_start_ms;
    return;
  }
  ledger_.drafting = true;
  const double start_ms = clock_.now_ms();
  const Status status = drafter_->absorb_device(rows, verified.device_taps);
  const double end_ms = clock_.now_ms();
  stats_.drafter_ms += end_ms - call_start_ms;
  stats_.absorb_ms += end_ms - call_start_ms;
  log_debug("device absorb: %zu streams, %d rows, %.3f ms (restarts included %.3f ms)", rows.size(), total_rows,
            end_ms - start_ms, end_ms - call_start_ms);
  ++stats_.absorb_calls;
  stats_.absorbed_rows += total_rows;
  if (status.ok()) pricing_.observe_absorb(total_rows, end_ms - start_ms);
  for (size_t index = 0; index < rows.size(); ++index) {
    if (status.ok()) {
      streams[index]->drafter_end = rows[index].start + rows[index].rows;
    } else {
      drop_drafting(*streams[index]);
    }
  }
}

void Lanes::settle_drafter() {
  if (!device_taps_ || drafter_ == nullptr) return;
  const double start_ms = clock_.now_ms();
  const Status status = drafter_->settle();
  stats_.drafter_ms += clock_.now_ms() - start_ms;
  stats_.settle_ms += clock_.now_ms() - start_ms;
  if (status.ok()) return;
  log_warn("drafter: device absorb failed (%s); drafting stops", status.to_string().c_str());
  for (auto& [id, stream] : live_) {
    if (stream->drafting) drop_drafting(*stream);
  }
}

}  // namespace ls
