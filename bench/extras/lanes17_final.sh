#!/usr/bin/env bash
# limit: 90
# lanes17 final: main's default (the scout over a restarted context since af9b454) at the rows batch A compared:
# nano pair greedy 256 tokens at 4 / 8 / 16 streams (3 repeats) and the synth 1.2B at 8 / 16 streams (2 repeats).
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
LANESPARK=${LANESPARK:-$(bin lanespark)}
"$LANES" --model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json \
  --device cuda --threads 8 --prompt-tokens 64 --tokens 256 --streams 4,8,16 --repeats 3 \
  --json "$OUT/lanes17_final_nano.json" >"$OUT/lanes17_final_nano.log" 2>&1
M=$WORK/lfm2.5-1.2b
"$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >"$OUT/lanes17_final_synth.log" 2>&1
"$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --synthetic-acceptance 5.02 \
  --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 8,16 --repeats 2 \
  --json "$OUT/lanes17_final_12b.json" >"$OUT/lanes17_final_12b.log" 2>&1
for f in "$OUT"/lanes17_final_*.log; do echo "## $f"; grep -E '^\s*(streams|[0-9]+ )' "$f" | head -8; done
