#!/usr/bin/env bash
# limit: 80
# draft18 (session 16): lanes_bench on the synth 1.2B at 1 stream (synthetic acceptance 5.02), main's defaults against
# session 16's three drafter switches on (env pins at load: the absorb beside the pass, one graph, programmatic
# residual norms), alternated default / all / all / default, each its own process.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
LANESPARK=$(bin lanespark)
LOG=$OUT/draft18_lanes.log
echo "lanes_bench: $LANES" > "$LOG"
M=/tmp/lanespark-gpu-check/lfm2.5-1.2b
if [ ! -d "$M-dspark" ]; then
  M=$WORK/lfm2.5-1.2b
  timeout 25 "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >> "$LOG" 2>&1
fi
ALL="LS_DRAFTER_ABSORB_OVERLAP=1 LS_DRAFTER_ONE_GRAPH=1 LS_DRAFTER_PROGRAMMATIC_STEPS=1"
i=0
for arm in default all all default; do
  i=$((i + 1))
  pins=""; [ "$arm" = all ] && pins=$ALL
  echo "## lanes $i: $arm ($pins)" >> "$LOG"
  env $pins timeout 15 "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 \
    --synthetic-acceptance 5.02 --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 1 --repeats 3 \
    --json "$OUT/draft18_lanes_${i}_${arm}.json" >> "$LOG" 2>&1
  echo "lanes $i rc=$?" >> "$LOG"
done
