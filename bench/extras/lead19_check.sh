#!/usr/bin/env bash
# limit: 200
# lead19: the CUDA tests after the last merge (draft19's removals) and the row-attention refactor, then the nano pair
# and the synth 1.2B at 1 stream once.
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
timeout 150 "$(bin lanespark_cuda_tests)" --gtest_brief=1 > "$OUT/cuda_tests.log" 2>&1; echo "cuda tests rc $?"
tail -5 "$OUT/cuda_tests.log"
LANES=$(bin lanes_bench)
timeout 25 "$LANES" --model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64 --tokens 256 --streams 1,4,8,16 --repeats 2 2>&1 | grep -E "^ +[0-9]+ +[0-9]"
M=$WORK/lfm2.5-1.2b
timeout 20 "$(bin lanespark)" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" > /dev/null 2>&1
timeout 25 "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --synthetic-acceptance 5.02 --tokens 256 --prompt-tokens 128 --streams 1,4 --repeats 2 2>&1 | grep -E "^ +[0-9]+ +[0-9]"
