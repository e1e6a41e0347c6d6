#!/usr/bin/env bash
# limit: 120
# amx17, final batch, on the Xeon's cores 14,15 (2 threads): every AMX test (block layout, the registry gone, the
# named refusal's AMX side), the width / fused / invariance tests with AMX on, the nano forward AVX-512 against AMX
# (one process per arm, alternated), the GEMM alone, and lanes_bench 1 stream 64 / 256 tokens on the nano pair per arm.
set -u
L=$OUT/amx17_cpu_final.log
: >"$L"
say() { echo "$*" | tee -a "$L"; }
find_bin() { find "$BIN" -name "$1" -type f -perm -u+x 2>/dev/null | head -1; }
left() { echo $((112 - SECONDS)); }
run() {
  local limit=$1; shift
  if [ "$(left)" -lt 5 ]; then say "SKIPPED (time): $*"; return; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  say "### t=${SECONDS}s $*"
  timeout -k 2 "$limit" "$@" >>"$L" 2>&1
  say "### rc=$? t=${SECONDS}s"
}
say "amx17_cpu_final $(date -u +%T) commit $(head -1 "$BIN/COMMIT" 2>/dev/null) cpus $(taskset -pc $$ 2>/dev/null)"
grep -m1 -o 'amx_bf16' /proc/cpuinfo >/dev/null && say "cpu: amx_bf16 present" || say "cpu: NO amx_bf16"
CPU_BENCH=$(find_bin cpu_bench); LANES_BENCH=$(find_bin lanes_bench)
TESTS=$(find_bin lanespark_cpu_tests); [ -z "$TESTS" ] && TESTS=$(find_bin lanespark_tests)
say "bins: cpu_bench=${CPU_BENCH:-missing} lanes_bench=${LANES_BENCH:-missing} tests=${TESTS:-missing}"
NANO="--model models/nano/target"
PAIR="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json"
if [ -n "$TESTS" ]; then
  run 30 "$TESTS" --gtest_brief=1 --gtest_filter='MatmulAmx*:*AmxNanoLanes*'
  run 30 env LS_CPU_AMX=1 "$TESTS" --gtest_brief=1 \
    --gtest_filter='Lfm2Invariance.*:CpuFusedForward.*:OpsFused.*:OpsMatmul.RowsAre*:OpsSpeedKernels.RowsAre*:OpsSpeedKernels.AGroup*:OpsSpeedKernels.TheFusedHeadArgmax*'
fi
if [ -n "$CPU_BENCH" ]; then
  for arm in 0 1 0 1; do
    say "=== forward LS_CPU_AMX=$arm"
    run 12 env LS_CPU_AMX=$arm LS_CPU_OP_SPLIT=1 "$CPU_BENCH" $NANO --threads 2 --verify 1,2,4,8,16 --prefill 32 --repeats 5 --decode-tokens 16
  done
  run 12 "$CPU_BENCH" --gemm-ab 1,2,4,8,16 --gemm-schedules 0 --gemm-license 1 --threads 2 --repeats 15
fi
if [ -n "$LANES_BENCH" ]; then
  for tokens in 64 256; do
    for arm in 0 1; do
      say "=== lanes LS_CPU_AMX=$arm tokens $tokens"
      run 10 env LS_CPU_AMX=$arm "$LANES_BENCH" $PAIR --device cpu --threads 2 --streams 1 --tokens $tokens --repeats 2
    done
  done
fi
say "amx17_cpu_final done t=${SECONDS}s"
