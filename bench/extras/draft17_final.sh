#!/usr/bin/env bash
# limit: 60
# draft17 final: the 1-stream drafter round on the synth 1.2B drafter shape with main's defaults (the skinny GEMM's
# pipelined pieces since s15A), once profiled eagerly per launch label (:prof); :parts0 = every GEMM on cuBLAS.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
DB=$(bin drafter_bench)
LOG=$OUT/draft17_final.log
B=40:head:s256:split:keyed:row:bc:ch:bo100:prof
echo "drafter_bench: $DB" > "$LOG"
timeout 55 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 --rounds 24 --round-blocks 3 \
  --streams 1 --dir "$WORK/draft17_db" --json "$OUT/draft17_final_rounds.json" --round-settings "$B,$B:parts0" \
  >> "$LOG" 2>&1
echo "rounds rc=$?" >> "$LOG"
