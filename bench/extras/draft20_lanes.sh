#!/usr/bin/env bash
# limit: 160
# draft20 (session 20): the int8 drafter in rounds and in the lanes. drafter_bench rounds (1.2B shape, --bits 8,
# context 128, 1 stream): the defaults with the int8 GEMMs up to 16 rows (B) against bf16 (B:i0), int8 up to 32
# rows (B:i32), the narrow int8 GEMMs with K split over CTAs (B:ks1, B:ks2), x through L1 (B:xl1, and with a split),
# int8 with the L2 weight prefetch at 64 MiB
# and off, interleaved blocks (one profiled pass each of B and B:i0 after them); lanes_bench synth 1.2B, synthetic
# acceptance 5.02, 1 stream, 256 tokens, --drafter-bits 0 vs 8 vs 8 with LS_DRAFTER_INT8_SPLIT=1 / 2 vs 8 with
# LS_DRAFTER_INT8_X_L1=1 alternated, each its
# own process; the nano pair at 1 / 4 / 8 / 16 streams (2 repeats), bits 0 vs 8 alternated three times.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
DB=$(bin drafter_bench)
LANES=$(bin lanes_bench)
LANESPARK=$(bin lanespark)
LOG=$OUT/draft20_lanes.log
R=head:s256:split:keyed:row:bc:ch:bo100
B=40:$R
left() { [ $SECONDS -lt "$1" ]; }
echo "drafter_bench: $DB" > "$LOG"
timeout 40 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --bits 8 --context 128 --rounds 24 --round-blocks 5 \
  --streams 1 --dir "$WORK/draft20_db" --json "$OUT/draft20_rounds_128.json" \
  --round-settings "$B:prof,$B:i0:prof,$B:i32,$B:ks1,$B:ks2,$B:xl1,$B:xl1:ks2,64:$R,0:$R" >> "$LOG" 2>&1
echo "rounds 128 rc=$? at ${SECONDS}s" >> "$LOG"
M=/tmp/lanespark-gpu-check/lfm2.5-1.2b
if [ ! -d "$M-dspark" ]; then
  M=$WORK/lfm2.5-1.2b
  [ -d "$M-dspark" ] || timeout 25 "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >> "$LOG" 2>&1
fi
i=0
for arm in 0 8 8s 8t 8l 0 8 8s 8t 8l 8 0; do
  left 118 || { echo "lanes $arm skipped at ${SECONDS}s" >> "$LOG"; continue; }
  i=$((i + 1))
  case $arm in
    8s) bits=8; pins="LS_DRAFTER_INT8_SPLIT=1" ;;
    8t) bits=8; pins="LS_DRAFTER_INT8_SPLIT=2" ;;
    8l) bits=8; pins="LS_DRAFTER_INT8_X_L1=1" ;;
    *) bits=$arm; pins="" ;;
  esac
  echo "## lanes $i: --drafter-bits $bits $pins" >> "$LOG"
  env $pins timeout 12 "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --drafter-bits "$bits" \
    --synthetic-acceptance 5.02 --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 1 --repeats 2 \
    --json "$OUT/draft20_lanes_${i}_bits${arm}.json" >> "$LOG" 2>&1
  echo "lanes $i rc=$? at ${SECONDS}s" >> "$LOG"
done
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
for bits in 0 8 0 8 0 8; do
  left 140 || { echo "nano bits $bits skipped at ${SECONDS}s" >> "$LOG"; continue; }
  echo "## nano --drafter-bits $bits" >> "$LOG"
  timeout 25 "$LANES" $NANO --drafter-bits "$bits" --tokens 256 --streams 1,4,8,16 --repeats 2 \
    --json "$OUT/draft20_nano_bits${bits}_${SECONDS}.json" >> "$LOG" 2>&1
  echo "nano rc=$? at ${SECONDS}s" >> "$LOG"
done
echo "done at ${SECONDS}s" >> "$LOG"
