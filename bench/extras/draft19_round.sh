#!/usr/bin/env bash
# limit: 120
# draft19 (session 19): the 1-stream drafter round on the synth 1.2B drafter shape. drafter_bench rounds at context
# 128 (and 300), interleaved blocks in one process: main's defaults (B) against the grouped row attention (:rg4 /
# :rg2), the absorb inside the pass's graph (:ap1), the copies in the graphs (:cg1), the one graph (:g1) and all of
# them; lanes_bench synth 1.2B, 1 stream, 256 tokens, default against the arms by env pins, alternated, each its own
# process; then, while time is left, ncu per-kernel times of the row kernels (graph nodes). Steps are skipped rather
# than cut off when the script's own clock nears the limit.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
DB=$(bin drafter_bench)
LANES=$(bin lanes_bench)
LANESPARK=$(bin lanespark)
LOG=$OUT/draft19_round.log
B=40:head:s256:split:keyed:row:bc:ch:bo100
left() { [ $SECONDS -lt "$1" ]; }
echo "drafter_bench: $DB" > "$LOG"
timeout 32 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 --rounds 24 --round-blocks 5 \
  --streams 1 --dir "$WORK/draft19_db" --json "$OUT/draft19_rounds_128.json" \
  --round-settings "$B,$B:rg4,$B:rg2,$B:ap1,$B:cg1,$B:g1,$B:rg4:ap1:cg1:g1,$B:prof,$B:rg4:prof" >> "$LOG" 2>&1
echo "rounds 128 rc=$? at ${SECONDS}s" >> "$LOG"
M=/tmp/lanespark-gpu-check/lfm2.5-1.2b
if [ ! -d "$M-dspark" ]; then
  M=$WORK/lfm2.5-1.2b
  [ -d "$M-dspark" ] || timeout 25 "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >> "$LOG" 2>&1
fi
ALL="LS_DRAFTER_ROW_GROUP=4 LS_DRAFTER_ABSORB_IN_PASS=1 LS_DRAFTER_COPIES_IN_GRAPH=1 LS_DRAFTER_ONE_GRAPH=1"
i=0
for arm in default all rg4 ap1 all default ap1 rg4; do
  left 100 || { echo "lanes $arm skipped at ${SECONDS}s" >> "$LOG"; continue; }
  i=$((i + 1))
  case $arm in
    rg4) pins="LS_DRAFTER_ROW_GROUP=4" ;;
    ap1) pins="LS_DRAFTER_ABSORB_IN_PASS=1" ;;
    all) pins=$ALL ;;
    *) pins="" ;;
  esac
  echo "## lanes $i: $arm ($pins)" >> "$LOG"
  env $pins timeout 12 "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 \
    --synthetic-acceptance 5.02 --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 1 --repeats 2 \
    --json "$OUT/draft19_lanes_${i}_${arm}.json" >> "$LOG" 2>&1
  echo "lanes $i rc=$? at ${SECONDS}s" >> "$LOG"
done
if left 98; then
  timeout 18 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 300 --rounds 24 --round-blocks 3 \
    --streams 1 --dir "$WORK/draft19_db" --json "$OUT/draft19_rounds_300.json" \
    --round-settings "$B,$B:rg4,$B:rg2,$B:rg4:ap1:cg1:g1" >> "$LOG" 2>&1
  echo "rounds 300 rc=$? at ${SECONDS}s" >> "$LOG"
fi
if command -v ncu > /dev/null; then
  for arm in "$B" "$B:rg4"; do
    left 108 || break
    echo "## ncu $arm" >> "$LOG"
    timeout 10 ncu --graph-profiling node --cache-control none --clock-control none --kernel-name regex:attention_row \
      --metrics gpu__time_duration.sum --csv "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 \
      --rounds 2 --round-blocks 1 --streams 1 --dir "$WORK/draft19_db" --round-settings "$arm" 2>&1 \
      | grep -E "attention_row|==ERR" | tail -10 >> "$LOG"
  done
fi
echo "done at ${SECONDS}s" >> "$LOG"
