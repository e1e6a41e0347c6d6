#!/usr/bin/env bash
# limit: 80
# draft18 (session 16): lanes_bench on the synth 1.2B at 1 stream (synthetic acceptance 5.02), main's defaults against
# the block pass + scan as one graph (LS_DRAFTER_ONE_GRAPH=1 at load), alternated default / g1 / g1 / default /
# default / g1, each its own process.
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
G1="LS_DRAFTER_ONE_GRAPH=1"
i=0
for arm in default g1 g1 default default g1; do
  i=$((i + 1))
  pins=""; [ "$arm" = g1 ] && pins=$G1
  echo "## lanes $i: $arm ($pins)" >> "$LOG"
  env $pins timeout 15 "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 \
    --synthetic-acceptance 5.02 --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 1 --repeats 3 \
    --json "$OUT/draft18_lanes_${i}_${arm}.json" >> "$LOG" 2>&1
  echo "lanes $i rc=$?" >> "$LOG"
done
