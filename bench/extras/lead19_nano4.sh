#!/usr/bin/env bash
# limit: 100
# lead19: nano 256 tokens at 1 / 4 streams lost its 4-stream whole-context win in b4 (0.91x, 1.04 tokens a window):
# which of draft19's new defaults (absorb in pass, grouped row attention, one graph) changes the drafts?
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
arm_env() { case $1 in D) echo "";; ap0) echo "LS_DRAFTER_ABSORB_IN_PASS=0";; rg0) echo "LS_DRAFTER_ROW_GROUP=0";; g0) echo "LS_DRAFTER_ONE_GRAPH=0";; old) echo "LS_DRAFTER_ABSORB_IN_PASS=0 LS_DRAFTER_ROW_GROUP=0 LS_DRAFTER_ONE_GRAPH=0";; esac; }
for arm in D old ap0 rg0 g0 D old; do
  echo "## $arm"
  env $(arm_env $arm) timeout 25 "$LANES" $NANO --tokens 256 --streams 1,4 --repeats 2 --json "$OUT/lead19_$arm.json" 2>&1 | grep -E "^ +[0-9]+ +[0-9]"
done
