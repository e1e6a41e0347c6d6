#!/usr/bin/env bash
# limit: 300
# cpu20, on the Xeon's cores 14,15 (2 threads): the explore gate's CPU one-off (no new-shape forwards on a graphless
# target, the probe charged its forced draft's verify row). The AMX-only CPU tests (not run in session 19), the lanes
# gate tests, then lanes_bench on the nano pair: 1 stream at 64 and 256 tokens (3 repeats each, twice), 4/8/16 streams
# at 64 tokens, and one debug trace of the 1-stream 64-token run (its gate line, its windows).
set -u
L=$OUT/cpu20_cpu_gate.log
: >"$L"
say() { echo "$*" | tee -a "$L"; }
find_bin() { find "$BIN" -name "$1" -type f -perm -u+x 2>/dev/null | head -1; }
left() { echo $((290 - SECONDS)); }
run() {
  local limit=$1; shift
  if [ "$(left)" -lt 5 ]; then say "SKIPPED (time): $*"; return; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  say "### t=${SECONDS}s $*"
  timeout -k 2 "$limit" taskset -c 14,15 "$@" >>"$L" 2>&1
  say "### rc=$? t=${SECONDS}s"
}
say "cpu20_cpu_gate $(date -u +%T) commit $(head -1 "$BIN/COMMIT" 2>/dev/null) cpus $(taskset -pc $$ 2>/dev/null)"
grep -m1 -o 'amx_bf16' /proc/cpuinfo >/dev/null && say "cpu: amx_bf16 present" || say "cpu: NO amx_bf16"
LANES_BENCH=$(find_bin lanes_bench); CPU_TESTS=$(find_bin lanespark_cpu_tests); TESTS=$(find_bin lanespark_tests)
say "bins: lanes_bench=${LANES_BENCH:-missing} cpu_tests=${CPU_TESTS:-missing} tests=${TESTS:-missing}"
[ -n "$CPU_TESTS" ] && run 60 "$CPU_TESTS" --gtest_brief=1 --gtest_filter='*Amx*'
[ -n "$TESTS" ] && run 30 "$TESTS" --gtest_brief=1 --gtest_filter='LanesCpuGate.*:LanesExploreGate.*:LanesPricing.*'
[ -z "$LANES_BENCH" ] && exit 0
PAIR="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json"
lanes() {  # tokens streams repeats [flags]
  local tokens=$1 streams=$2 repeats=$3; shift 3
  run 30 "$LANES_BENCH" $PAIR --device cpu --threads 2 --streams $streams --tokens $tokens --repeats $repeats "$@" \
    --json "$OUT/cpu20_lanes_t${tokens}_s${streams//,/-}_$SECONDS.json"
}
say "=== gate trace, 1 stream 64 tokens (--debug 1, full log in cpu20_gate_trace.log)"
timeout -k 2 20 taskset -c 14,15 "$LANES_BENCH" $PAIR --device cpu --threads 2 --streams 1 --tokens 64 --repeats 1 \
  --debug 1 >"$OUT/cpu20_gate_trace.log" 2>&1
grep -E "explore gate|load-time tables|^ +1 |trim stream|accept stream" "$OUT/cpu20_gate_trace.log" | cut -c1-300 | head -40 | tee -a "$L"
# Arms at 1 stream (each its own process; drafted against plain inside each): D = the defaults (this commit's gate),
# W = --alone-whole on (the lone CPU stream never goes dormant), M = W + --calibration-start mean.
for round in 1 2; do
  say "=== round $round: D"; lanes 64 1 3
  say "=== round $round: W"; lanes 64 1 3 --alone-whole on
  say "=== round $round: M"; lanes 64 1 3 --alone-whole on --calibration-start mean
  say "=== round $round: D 256"; lanes 256 1 1
  say "=== round $round: M 256"; lanes 256 1 1 --alone-whole on --calibration-start mean
done
lanes 64 4,8,16 1
trace() {  # name tokens [flags]: one debug run at 1 stream, its gate, windows and restarts
  local name=$1 tokens=$2; shift 2
  say "=== trace $name, 1 stream $tokens tokens $* (full log in cpu20_trace_$name.log)"
  if [ "$(left)" -lt 20 ]; then say "SKIPPED (time)"; return; fi
  timeout -k 2 20 taskset -c 14,15 "$LANES_BENCH" $PAIR --device cpu --threads 2 --streams 1 --tokens $tokens \
    --repeats 1 --debug 1 "$@" >"$OUT/cpu20_trace_$name.log" 2>&1
  grep -E "explore gate|load-time tables|^ +1 |loss stop" "$OUT/cpu20_trace_$name.log" | cut -c1-300 | head -12 | tee -a "$L"
  say "restarts: $(grep -c 'context restarted' "$OUT/cpu20_trace_$name.log") passes: $(grep -c 'draft pass' "$OUT/cpu20_trace_$name.log")"
}
trace D256 256; trace M256 256 --alone-whole on --calibration-start mean
say "cpu20_cpu_gate done t=${SECONDS}s"
