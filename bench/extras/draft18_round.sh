#!/usr/bin/env bash
# limit: 40
# draft18 (session 16): the 1-stream drafter round on the synth 1.2B drafter shape with session 16's launch switches
# as drafter_bench round settings (interleaved blocks, one process): B = main's defaults; :pn1 / :pn7 programmatic
# residual norms / every block step; :g1 block pass + scan as one graph; :ao1 absorb_device() on a side stream
# beside the pass; all three; :prof one eager pass per launch label (default). draft18_lanes.sh: lanes.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
DB=$(bin drafter_bench)
LOG=$OUT/draft18_round.log
B=40:head:s256:split:keyed:row:bc:ch:bo100
echo "drafter_bench: $DB" > "$LOG"
timeout 35 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 --rounds 32 --round-blocks 4 \
  --streams 1 --dir "$WORK/draft18_db" --json "$OUT/draft18_rounds.json" \
  --round-settings "$B,$B:pn1,$B:pn7,$B:g1,$B:ao1,$B:ao1:g1:pn1,$B:prof" >> "$LOG" 2>&1
echo "rounds rc=$?" >> "$LOG"
