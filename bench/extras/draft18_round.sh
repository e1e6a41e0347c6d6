#!/usr/bin/env bash
# limit: 40
# draft18 (session 16): the 1-stream drafter round on the synth 1.2B drafter shape, main's defaults (B) against the
# block pass + scan as one graph (:g1), drafter_bench round settings in interleaved blocks (one process); :prof one
# eager pass per launch label (default). draft18_lanes.sh: the same A/B in lanes_bench.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
DB=$(bin drafter_bench)
LOG=$OUT/draft18_round.log
B=40:head:s256:split:keyed:row:bc:ch:bo100
echo "drafter_bench: $DB" > "$LOG"
timeout 35 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 --rounds 32 --round-blocks 8 \
  --streams 1 --dir "$WORK/draft18_db" --json "$OUT/draft18_rounds.json" \
  --round-settings "$B,$B:g1,$B:prof" >> "$LOG" 2>&1
echo "rounds rc=$?" >> "$LOG"
