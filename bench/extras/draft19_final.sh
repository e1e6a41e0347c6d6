#!/usr/bin/env bash
# limit: 120
# draft19 (session 19) final: batch b2's decisions checked once more and the prefetch inside the attention tried.
# drafter_bench rounds at context 128 and 300, interleaved blocks in one process: main's new defaults (B: the grouped
# row attention at 4 heads a CTA, the absorb inside the pass, the one graph) against the old paths (B:rg0:ap0:g0), the
# copies in the graphs (B:cg1), the weight prefetch asked by the attention's threads (B:pa1) and no weight prefetch
# (0:...); lanes_bench synth 1.2B, 1 stream, 256 tokens, new / old (env =0 pins) / pa1 / cg1 alternated, each its own
# process; ncu times of the grouped row kernel with the side prefetch, in the attention and none, then its warp state,
# scheduler and memory sections. Steps are skipped rather than cut off when the script's clock nears the limit.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
DB=$(bin drafter_bench)
LANES=$(bin lanes_bench)
LANESPARK=$(bin lanespark)
LOG=$OUT/draft19_final.log
B=40:head:s256:split:keyed:row:bc:ch:bo100
NOPF=0:head:s256:split:keyed:row:bc:ch:bo100
OLD=$B:rg0:ap0:g0
left() { [ $SECONDS -lt "$1" ]; }
echo "drafter_bench: $DB" > "$LOG"
timeout 25 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 --rounds 24 --round-blocks 6 \
  --streams 1 --dir "$WORK/draft19_db" --json "$OUT/draft19_final_128.json" \
  --round-settings "$B,$OLD,$B:cg1,$B:pa1,$NOPF" >> "$LOG" 2>&1
echo "rounds 128 rc=$? at ${SECONDS}s" >> "$LOG"
M=/tmp/lanespark-gpu-check/lfm2.5-1.2b
if [ ! -d "$M-dspark" ]; then
  M=$WORK/lfm2.5-1.2b
  [ -d "$M-dspark" ] || timeout 25 "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >> "$LOG" 2>&1
fi
OLD_PINS="LS_DRAFTER_ROW_GROUP=0 LS_DRAFTER_ABSORB_IN_PASS=0 LS_DRAFTER_ONE_GRAPH=0"
i=0
for arm in new old pa1 cg1 old new cg1 pa1 new old pa1 cg1; do
  left 88 || { echo "lanes $arm skipped at ${SECONDS}s" >> "$LOG"; continue; }
  i=$((i + 1))
  case $arm in
    old) pins=$OLD_PINS ;;
    pa1) pins="LS_DRAFTER_PREFETCH_IN_ATTENTION=1" ;;
    cg1) pins="LS_DRAFTER_COPIES_IN_GRAPH=1" ;;
    *) pins="" ;;
  esac
  echo "## lanes $i: $arm ($pins)" >> "$LOG"
  env $pins timeout 12 "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 \
    --synthetic-acceptance 5.02 --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 1 --repeats 2 \
    --json "$OUT/draft19_final_lanes_${i}_${arm}.json" >> "$LOG" 2>&1
  echo "lanes $i rc=$? at ${SECONDS}s" >> "$LOG"
done
if left 95; then
  timeout 15 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 300 --rounds 24 --round-blocks 4 \
    --streams 1 --dir "$WORK/draft19_db" --json "$OUT/draft19_final_300.json" \
    --round-settings "$B,$OLD,$B:pa1" >> "$LOG" 2>&1
  echo "rounds 300 rc=$? at ${SECONDS}s" >> "$LOG"
fi
if command -v ncu > /dev/null; then
  for arm in "$B" "$B:pa1" "$NOPF"; do
    left 104 || break
    echo "## ncu $arm" >> "$LOG"
    timeout 8 ncu --graph-profiling node --cache-control none --clock-control none --kernel-name regex:attention_row \
      --metrics gpu__time_duration.sum --csv "$DB" --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 \
      --rounds 2 --round-blocks 1 --streams 1 --dir "$WORK/draft19_db" --round-settings "$arm" 2>&1 \
      | grep -E "attention_row|==ERR" | tail -5 >> "$LOG"
  done
  if left 108; then
    timeout 10 ncu --graph-profiling node --cache-control none --clock-control none \
      --kernel-name regex:attention_row_group --launch-skip 6 --launch-count 1 --section LaunchStats \
      --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis "$DB" \
      --device cuda --shape lfm2.5-1.2b --bits 0 --context 128 --rounds 2 --round-blocks 1 --streams 1 \
      --dir "$WORK/draft19_db" --round-settings "$B" > "$OUT/draft19_final_ncu.log" 2>&1
    echo "ncu sections rc=$? at ${SECONDS}s" >> "$LOG"
  fi
fi
echo "done at ${SECONDS}s" >> "$LOG"
