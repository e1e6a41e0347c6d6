#!/usr/bin/env bash
# limit: 80
# lead19 final: after e79224d (only one stream's absorb waits for the next pass), the nano pair at 256 tokens, 1 / 4 /
# 8 / 16 streams: the defaults (D) against the absorb inside the pass off (ap0), alternated, each its own process.
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
i=0
for arm in D ap0 D ap0 D ap0; do
  i=$((i+1))
  echo "## $arm"
  env $( [ $arm = ap0 ] && echo LS_DRAFTER_ABSORB_IN_PASS=0 ) timeout 20 "$LANES" $NANO --tokens 256 --streams 1,4,8,16 --repeats 2 \
    --json "$OUT/lead19_final_$arm$i.json" 2>&1 | grep -E "^ +[0-9]+ +[0-9]"
done
