#!/usr/bin/env bash
# limit: 170
# cpu19, on the Xeon's cores 14,15 (2 threads): --drafter-bits auto (the default: int8 on a CPU drafter with AVX-512
# VNNI, AMX or not; bf16 elsewhere). Arms: I = auto bits (int8), P = --drafter-bits 0 with LS_CPU_DRAFTER_AMX=0 (bf16
# on the panels: the AMD host's old default), T = --drafter-bits 0 with the tiles (cpu18's Xeon default). The auto-bits
# tests, 1-stream decoding with every round drafting against plain (cpu_bench --spec-depths; int8 and bf16 in one
# process, panels and tiles), cpu_bench's pass A/B in one process, then lanes_bench on the nano pair (1/4/8/16 streams
# at 64 tokens, 1 stream at 256; I, P, T alternated) and the explore gate's numbers at 1 stream.
set -u
L=$OUT/cpu19_cpu_lanes.log
: >"$L"
say() { echo "$*" | tee -a "$L"; }
find_bin() { find "$BIN" -name "$1" -type f -perm -u+x 2>/dev/null | head -1; }
left() { echo $((165 - SECONDS)); }
run() {
  local limit=$1; shift
  if [ "$(left)" -lt 5 ]; then say "SKIPPED (time): $*"; return; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  say "### t=${SECONDS}s $*"
  timeout -k 2 "$limit" taskset -c 14,15 "$@" >>"$L" 2>&1
  say "### rc=$? t=${SECONDS}s"
}
say "cpu19_cpu_lanes $(date -u +%T) commit $(head -1 "$BIN/COMMIT" 2>/dev/null) cpus $(taskset -pc $$ 2>/dev/null)"
grep -m1 -o 'amx_bf16' /proc/cpuinfo >/dev/null && say "cpu: amx_bf16 present" || say "cpu: NO amx_bf16"
LANES_BENCH=$(find_bin lanes_bench); CPU_BENCH=$(find_bin cpu_bench)
TESTS=$(find_bin lanespark_cpu_tests); [ -z "$TESTS" ] && TESTS=$(find_bin lanespark_tests)
say "bins: lanes_bench=${LANES_BENCH:-missing} cpu_bench=${CPU_BENCH:-missing} tests=${TESTS:-missing}"
if [ -n "$CPU_BENCH" ] && ! grep -q -- "--drafter-bits-ab" "$CPU_BENCH"; then
  say "these binaries predate cpu19 (no --drafter-bits-ab): nothing to run until branch cpu19 is merged"; exit 0
fi
PAIR="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json"
[ -n "$TESTS" ] && run 25 "$TESTS" --gtest_brief=1 --gtest_filter='DraftBitsAuto.*:*AutoBitsNanoLanes*'
# 1 stream, every round drafting at depth 1 / 3 / 5 / 7 against plain on the same tokens (the engine's answer without
# the lanes' pricing), int8 and bf16 in one process: on the panels (LS_CPU_DRAFTER_AMX=0) and on the tiles.
for amx in 0 1 0 1; do
  [ -n "$CPU_BENCH" ] && run 25 env LS_CPU_DRAFTER_AMX=$amx "$CPU_BENCH" --model models/nano/target \
    --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --threads 2 --spec-depths 0,1,3,5,7 \
    --drafter-bits-ab 8,0 --spec-prompts 6 --spec-tokens 128 --spec-repeats 2 \
    --json "$OUT/cpu19_spec_amx${amx}_$SECONDS.json"
done
# The pass per arm side by side in one process (1 / 4 / 16 streams, depth 1 / 3 / 7): amx 1 x bits 0/8, amx 0 x 0/8.
[ -n "$CPU_BENCH" ] && run 25 "$CPU_BENCH" --model models/nano/target --drafter models/nano/drafter --threads 2 \
  --drafter-amx 1,0 --drafter-bits-ab 0,8 --ab-streams 1,4,16 --repeats 5 --json "$OUT/cpu19_drafter_ab.json"
if [ -n "$LANES_BENCH" ]; then
  lanes() {  # arm tokens streams [extra lanes_bench flags]
    local env_amx=0 bits=-1 arm=$1 tokens=$2 streams=$3
    shift 3
    case $arm in P) bits=0;; T) env_amx=1; bits=0;; esac
    say "=== lanes arm $arm (LS_CPU_DRAFTER_AMX=$env_amx --drafter-bits $bits $*) tokens $tokens streams $streams"
    run 22 env LS_CPU_DRAFTER_AMX=$env_amx "$LANES_BENCH" $PAIR --device cpu --threads 2 --streams $streams \
      --tokens $tokens --repeats 1 --drafter-bits $bits "$@" \
      --json "$OUT/cpu19_lanes_${arm}_t${tokens}_s${streams//,/-}_$SECONDS.json"
  }
  lanes I 64 1,4,8,16; lanes T 64 1,4,8,16; lanes P 64 1,4,8,16
  lanes I 256 1; lanes T 256 1; lanes P 256 1
  for arm in I P; do
    bits=-1; [ $arm = P ] && bits=0
    say "=== gate arm $arm tokens 64 streams 1 (--debug 1, full log in cpu19_gate_$arm.log)"
    if [ "$(left)" -lt 8 ]; then say "SKIPPED (time)"; continue; fi
    timeout -k 2 8 taskset -c 14,15 env LS_CPU_DRAFTER_AMX=0 "$LANES_BENCH" $PAIR --device cpu --threads 2 \
      --streams 1 --tokens 64 --repeats 2 --drafter-bits $bits --debug 1 >"$OUT/cpu19_gate_$arm.log" 2>&1
    grep -E "explore gate|load-time tables|^ +1 " "$OUT/cpu19_gate_$arm.log" | cut -c1-400 | tee -a "$L"
  done
fi
say "cpu19_cpu_lanes done t=${SECONDS}s"
