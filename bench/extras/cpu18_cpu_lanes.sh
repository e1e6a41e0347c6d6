#!/usr/bin/env bash
# limit: 140
# cpu18, on the Xeon's cores 14,15 (2 threads): the drafter's matrices on AMX beside a target on the AVX-512 panels
# (LS_CPU_DRAFTER_AMX=1, the default where the CPU has AMX; 0 = the panels). The layout / drafted == plain tests,
# cpu_bench's pass A/B in one process, then lanes_bench on the nano pair per arm, arms alternated: 1/4/8/16 streams at
# 64 tokens (1, 0, 1, 0), 1 stream at 256 tokens (1, 0, 1, 0), and the explore gate's numbers at 1 stream per arm.
set -u
L=$OUT/cpu18_cpu_lanes.log
: >"$L"
say() { echo "$*" | tee -a "$L"; }
find_bin() { find "$BIN" -name "$1" -type f -perm -u+x 2>/dev/null | head -1; }
left() { echo $((135 - SECONDS)); }
run() {
  local limit=$1; shift
  if [ "$(left)" -lt 5 ]; then say "SKIPPED (time): $*"; return; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  say "### t=${SECONDS}s $*"
  timeout -k 2 "$limit" taskset -c 14,15 "$@" >>"$L" 2>&1
  say "### rc=$? t=${SECONDS}s"
}
say "cpu18_cpu_lanes $(date -u +%T) commit $(head -1 "$BIN/COMMIT" 2>/dev/null) cpus $(taskset -pc $$ 2>/dev/null)"
grep -m1 -o 'amx_bf16' /proc/cpuinfo >/dev/null && say "cpu: amx_bf16 present" || say "cpu: NO amx_bf16"
LANES_BENCH=$(find_bin lanes_bench); CPU_BENCH=$(find_bin cpu_bench)
TESTS=$(find_bin lanespark_cpu_tests); [ -z "$TESTS" ] && TESTS=$(find_bin lanespark_tests)
say "bins: lanes_bench=${LANES_BENCH:-missing} cpu_bench=${CPU_BENCH:-missing} tests=${TESTS:-missing}"
PAIR="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json"
[ -n "$TESTS" ] && run 25 "$TESTS" --gtest_brief=1 --gtest_filter='DrafterAmx.*:*AmxNanoLanes*DrafterAmx'
# The pass per mask side by side in one process (1 / 4 / 16 streams, depth 1 / 3 / 7).
[ -n "$CPU_BENCH" ] && run 20 "$CPU_BENCH" --model models/nano/target --drafter models/nano/drafter --threads 2 \
  --drafter-amx 1,0 --ab-streams 1,4,16 --repeats 10 --json "$OUT/cpu18_drafter_amx_ab.json"
if [ -n "$LANES_BENCH" ]; then
  lanes() {  # arm tokens streams
    say "=== lanes LS_CPU_DRAFTER_AMX=$1 tokens $2 streams $3"
    run 20 env LS_CPU_DRAFTER_AMX=$1 "$LANES_BENCH" $PAIR --device cpu --threads 2 --streams $3 --tokens $2 --repeats 1 \
      --json "$OUT/cpu18_lanes_amx$1_t$2_s${3//,/-}_$SECONDS.json"
  }
  lanes 1 64 1,4,8,16; lanes 0 64 1,4,8,16; lanes 1 64 1,4,8,16; lanes 0 64 1,4,8,16
  lanes 1 256 1; lanes 0 256 1; lanes 1 256 1; lanes 0 256 1
  # Why 1 stream buys or not: the explore gate's one-off against the prior's and an always-right drafter's gain.
  for arm in 1 0; do
    say "=== gate LS_CPU_DRAFTER_AMX=$arm tokens 64 streams 1 (--debug 1, full log in cpu18_gate_$arm.log)"
    if [ "$(left)" -lt 8 ]; then say "SKIPPED (time)"; continue; fi
    timeout -k 2 8 taskset -c 14,15 env LS_CPU_DRAFTER_AMX=$arm "$LANES_BENCH" $PAIR --device cpu --threads 2 \
      --streams 1 --tokens 64 --repeats 2 --debug 1 >"$OUT/cpu18_gate_$arm.log" 2>&1
    grep -E "explore gate|load-time tables|^ +1 " "$OUT/cpu18_gate_$arm.log" | cut -c1-400 | tee -a "$L"
  done
fi
say "cpu18_cpu_lanes done t=${SECONDS}s"
