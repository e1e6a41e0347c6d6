#!/usr/bin/env bash
# gpu-check (issue 8): on the GPU machine, from the repo root, with binaries staged HERE by `scripts/gpu-check.sh
# --stage`: GPU facts, the CUDA tests, synth checkpoints (lfm2.5-1.2b + its DSpark drafter shape, lfm2-8b-a1b +
# drafter), gpu_bench on both, lanes_bench plain vs drafted with synthetic acceptance 5.02 at 1..64 streams, drafted
# == plain on the nano pair (greedy and seeded sampled) on the GPU, drafter_bench. One log and one combined JSON go
# to $OUT; a summary table is printed last. Every step has a timeout inside one overall budget (LS_BUDGET_S).
#
#   here:     scripts/gpu-check.sh --stage          # build-gpu.sh, then .gpu/bin/binaries.tar.xz (carry .gpu/bin)
#             LS_SM80=0 skips the second, portable set (compute_80 PTX only: tests + gpu_bench, in sm80/)
#   GPU:      scripts/gpu-check.sh                   # OUT=$OUT from the device tool; LS_BIN=.gpu/bin
#   extras:   .gpu/extra/NAME.sh run last, each under LS_EXTRA_S seconds (carry .gpu/extra too)
#   dry run:  LS_DEVICE=cpu LS_BIN=build-gb OUT=/tmp/gc-out scripts/gpu-check.sh   # CPU binaries, tiny shapes
set -uo pipefail
cd "$(dirname "$0")/.."

# --stage [DIR]: build here (cpu_bench and the CPU kernel tests too, for the Xeon cores), then pack the stripped
# binaries (about 17 MB, too big to carry beside the 55 MB tree) as DIR/binaries.tar.xz (a few MB); the run unpacks
# it into $LS_WORK. A second set, lanespark_cuda_tests and gpu_bench built for compute_80 PTX only
# (LS_CUDA_ARCHS=80-ptx, folder ${build}-sm80), goes in sm80/: on the H200 the driver
# JIT-compiles it, so every kernel takes its portable sm_80 path (issue 8).
if [ "${1:-}" = "--stage" ]; then
  set -e
  stage=${2:-.gpu/bin}
  unpacked=.gpu/gpu-check-build
  export PATH=/usr/local/cuda/bin:$PATH
  build=${LS_GPU_BUILD_DIR:-build-gpu}
  rm -rf "$unpacked"
  LS_CUDA_ARCHS=90a LS_GPU_BUILD_DIR=$build scripts/build-gpu.sh "$unpacked" lanespark lanespark_cuda_tests gpu_bench \
    lanes_bench drafter_bench cuda_gemm_bench cpu_bench lanespark_cpu_tests
  if [ "${LS_SM80:-1}" != 0 ]; then  # a failure here leaves the sm80 steps "missing", not the Hopper set unstaged
    if LS_CUDA_ARCHS=80-ptx LS_GPU_BUILD_DIR=$build-sm80 scripts/build-gpu.sh "$unpacked/sm80" lanespark_cuda_tests \
      gpu_bench; then
      rm -rf "$unpacked/sm80/lib"  # the run's LD_LIBRARY_PATH has $BIN/lib
    else
      echo "gpu-check --stage: the sm80 (80-ptx) set did not build; its steps will be skipped" >&2
      rm -rf "$unpacked/sm80"
    fi
  fi
  { git rev-parse HEAD; git status --porcelain --untracked-files=no | grep -q . && echo "(with uncommitted changes)"; } \
    >"$unpacked/COMMIT" || true
  mkdir -p "$stage"
  rm -f "$stage"/*
  tar -c -C "$unpacked" . | xz -9e -T2 > "$stage/binaries.tar.xz"  # -9e: the binaries share code; half the size of -J
  du -sh "$unpacked" "$stage"
  exit 0
fi

DEVICE=${LS_DEVICE:-cuda}
BIN=${LS_BIN:-.gpu/bin}
OUT=${OUT:-out/gpu-check}
WORK=${LS_WORK:-/tmp/lanespark-gpu-check}
BUDGET=${LS_BUDGET_S:-510}   # whole script, seconds (a device command may run 600)
RESERVE=15                   # kept for the summary
ACCEPT=${LS_ACCEPT:-5.02}    # LiquidAI's published mean accepted length for the 1.2B drafter (bonus included)
mkdir -p "$OUT" "$WORK/json"
LOG="$OUT/gpu_check.log"
STEPS="$WORK/steps.tsv"
: >"$LOG"
: >"$STEPS"
if [ -f "$BIN/binaries.tar.xz" ]; then  # packed by --stage
  rm -rf "$WORK/bin" && mkdir -p "$WORK/bin"
  tar -xJf "$BIN/binaries.tar.xz" -C "$WORK/bin" 2>>"$LOG" ||
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$BIN/binaries.tar.xz" "$WORK/bin"
  BIN="$WORK/bin"
fi
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# A staged or built binary: $BIN/name, $BIN/bench/name or $BIN/tests/name.
bin() {
  local candidate
  for candidate in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  echo "missing-$1"
}

say() { echo "$*" | tee -a "$LOG"; }

# step NAME LIMIT_S JSON_OR_- command...: runs under `timeout` inside the budget; records status, seconds, JSON.
step() {
  local name=$1 limit=$2 json=$3
  shift 3
  local left=$((BUDGET - SECONDS - RESERVE))
  if ((left < 20)); then
    say "=== $name: skipped (budget spent)"
    printf '%s\tskipped\t0\t%s\n' "$name" "$json" >>"$STEPS"
    return 1
  fi
  ((limit > left)) && limit=$left
  if [[ "$1" == missing-* ]]; then
    say "=== $name: skipped (no ${1#missing-} in $BIN)"
    printf '%s\tmissing\t0\t%s\n' "$name" "$json" >>"$STEPS"
    return 1
  fi
  say "=== $name (limit ${limit}s, at ${SECONDS}s): $*"
  local start=$SECONDS rc
  timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  local status=ok
  ((rc == 124 || rc == 137)) && status=timeout
  ((rc != 0 && rc != 124 && rc != 137)) && status="rc=$rc"
  say "--- $name: $status in $((SECONDS - start)) s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" "$json" >>"$STEPS"
  [ "$status" = ok ]
}

# The source path the test binary was built with must exist for tests that read models/ and tests/golden/.
BUILT_SOURCE=${LS_BUILT_SOURCE:-/work/main}
if [ ! -e "$BUILT_SOURCE" ] && [ -w "$(dirname "$(dirname "$BUILT_SOURCE")")" ]; then
  mkdir -p "$(dirname "$BUILT_SOURCE")" && ln -s "$PWD" "$BUILT_SOURCE"
fi

# The binaries' commit (written by --stage), else the checkout's.
COMMIT=$(head -1 "$BIN/COMMIT" 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
say "gpu-check: device $DEVICE, binaries $BIN, commit $COMMIT, $(date -u +%FT%TZ)"
if [ "$DEVICE" = cuda ]; then
  GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  nvidia-smi >>"$LOG" 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
    --format=csv >>"$LOG" 2>&1
else
  GPU="none (LS_DEVICE=cpu dry run)"
fi
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
MACHINE="$GPU; $CPU x $(nproc)"
say "machine: $MACHINE"

# Shapes: the real ones on the GPU; tiny ones (same code paths, hidden 2048) for the CPU dry run.
if [ "$DEVICE" = cuda ]; then
  # LS_SYNTH_ARGS (e.g. "--layers 2 --vocab 1024") shrinks the shapes for a smoke test of the command lines.
  read -r -a SMALL_SYNTH <<<"${LS_SYNTH_ARGS:-}" ; SMALL_DRAFTER=() ; THREADS=8 ; ROWS=256  # 256: issue 8's bound
  STREAMS=${LS_STREAMS:-1,4,8,16,32,64} ; TOKENS=${LS_TOKENS:-256} ; REPEATS=${LS_REPEATS:-3} ; PROMPT=128
  MOE_STREAMS=${LS_MOE_STREAMS:-1,4,8,16,32,64} ; MOE_TOKENS=128 ; NANO_TOKENS=64 ; CHECK_STREAMS=1,4,16 ; CHECK_TOKENS=128
  NANO_STREAMS=1,4,8,16 ; NANO_REPEATS=5 ; CHECK_REPEATS=3
else
  SMALL_SYNTH=(--layers 3 --vocab 4096) ; SMALL_DRAFTER=(--drafter-layers 1) ; THREADS=2 ; ROWS=0
  STREAMS=${LS_STREAMS:-1,4} ; TOKENS=${LS_TOKENS:-12} ; REPEATS=${LS_REPEATS:-1} ; PROMPT=16
  MOE_STREAMS=${LS_MOE_STREAMS:-1} ; MOE_TOKENS=$TOKENS ; NANO_TOKENS=16 ; CHECK_STREAMS=1,4 ; CHECK_TOKENS=8
  NANO_STREAMS=$CHECK_STREAMS ; NANO_REPEATS=1 ; CHECK_REPEATS=1
fi
LANESPARK=$(bin lanespark)
J="$WORK/json"
# The portable sm_80 set (--stage packs it in sm80/): compute_80 PTX that the driver JIT-compiles for this GPU (once;
# the JIT cache keeps the kernels for the later steps).
sm80_bin() { if [ -x "$BIN/sm80/$1" ]; then echo "$BIN/sm80/$1"; else echo "missing-sm80/$1"; fi; }
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$WORK/jit-cache} CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
rm -f "$J"/*.json

# 1. The CUDA test binary (the CPU dry run has none: the synthetic-acceptance and real-target lanes tests stand in).
if [ "$DEVICE" = cuda ]; then
  step cuda_tests 150 "$J/cuda_tests.json" "$(bin lanespark_cuda_tests)" --gtest_output="json:$J/cuda_tests.json"
else
  step cpu_tests 150 "$J/cuda_tests.json" "$(bin lanespark_tests)" --gtest_output="json:$J/cuda_tests.json" \
    --gtest_filter='SyntheticAcceptance*:AcceptanceProfile*'
fi
# 1b. The portable sm_80 path (issue 8): the whole CUDA suite again from the compute_80-PTX binary, where no sm_90
# feature may run (CudaFeatures.* checks that), so batch invariance, parity and drafted == plain hold on it too.
if [ "$DEVICE" = cuda ]; then
  step sm80_cuda_tests 200 "$J/sm80_cuda_tests.json" "$(sm80_bin lanespark_cuda_tests)" \
    --gtest_output="json:$J/sm80_cuda_tests.json"
fi

# 2. lfm2.5-1.2b: synth target + drafter, gpu_bench, lanes_bench with synthetic acceptance.
M12="$WORK/lfm2.5-1.2b"
step synth_1.2b 90 - "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M12" --drafter-out "$M12-dspark" \
  "${SMALL_SYNTH[@]}" "${SMALL_DRAFTER[@]}"
if [ "$DEVICE" = cuda ]; then
  step gpu_bench_1.2b 90 "$J/gpu_bench_1.2b.json" "$(bin gpu_bench)" --model "$M12" --json "$J/gpu_bench_1.2b.json"
  # The sm_80 path's rows: decode (1 stream, 16 streams, verify 1 and 16 rows) and prefill 2048 on the same model.
  step sm80_gpu_bench_1.2b 90 "$J/sm80_gpu_bench_1.2b.json" "$(sm80_bin gpu_bench)" --model "$M12" --verify 1,16 \
    --json "$J/sm80_gpu_bench_1.2b.json"
else
  step cpu_bench_1.2b 90 "$J/gpu_bench_1.2b.json" "$(bin cpu_bench)" --model "$M12" --threads 2 --repeats 1 \
    --decode-tokens 4 --prefill 32 --verify 1,4 --json "$J/gpu_bench_1.2b.json"
fi
LANES=$(bin lanes_bench)
step lanes_1.2b 200 "$J/lanes_1.2b.json" "$LANES" --model "$M12" --drafter "$M12-dspark" --device "$DEVICE" \
  --threads "$THREADS" --streams "$STREAMS" --tokens "$TOKENS" --repeats "$REPEATS" --prompt-tokens "$PROMPT" \
  --synthetic-acceptance "$ACCEPT" --max-rows "$ROWS" --machine "$MACHINE" --commit "$COMMIT" \
  --json "$J/lanes_1.2b.json"

# 3. Exactness on the device: drafted == plain on the nano pair (its own drafter), greedy and seeded sampled.
NANO=(--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json
  --device "$DEVICE" --threads "$THREADS" --streams "$NANO_STREAMS" --tokens "$NANO_TOKENS" --prompt-tokens 64 --repeats "$NANO_REPEATS"
  --machine "$MACHINE" --commit "$COMMIT")
step nano_greedy 60 "$J/nano_greedy.json" "$LANES" "${NANO[@]}" --json "$J/nano_greedy.json"
step nano_sampled 60 "$J/nano_sampled.json" "$LANES" "${NANO[@]}" --sampled 1 --json "$J/nano_sampled.json"
# Longer replies (4x): the probes and first-sighting graph captures a 64-token reply pays count for less.
step nano_greedy_long 60 "$J/nano_greedy_long.json" "$LANES" "${NANO[@]}" --tokens $((NANO_TOKENS * 4)) --repeats 3 \
  --json "$J/nano_greedy_long.json"
step synth_1.2b_sampled 60 "$J/lanes_1.2b_sampled.json" "$LANES" --model "$M12" --drafter "$M12-dspark" \
  --device "$DEVICE" --threads "$THREADS" --streams "$CHECK_STREAMS" --tokens "$CHECK_TOKENS" --repeats "$CHECK_REPEATS" \
  --prompt-tokens 32 --sampled 1 \
  --synthetic-acceptance "$ACCEPT" --machine "$MACHINE" --commit "$COMMIT" --json "$J/lanes_1.2b_sampled.json"

# 4. lfm2-8b-a1b (MoE): synth + drafter, gpu_bench, lanes_bench at fewer stream counts.
M8="$WORK/lfm2-8b-a1b"
rm -rf "$M12" "$M12-dspark"  # disk: the 8B checkpoint is 16 GB
if step synth_8b 150 - "$LANESPARK" synth --shape lfm2-8b-a1b --out "$M8" --drafter-out "$M8-dspark" \
  "${SMALL_SYNTH[@]}" "${SMALL_DRAFTER[@]}"; then
  if [ "$DEVICE" = cuda ]; then
    step gpu_bench_8b 90 "$J/gpu_bench_8b.json" "$(bin gpu_bench)" --model "$M8" --json "$J/gpu_bench_8b.json"
  else
    step cpu_bench_8b 90 "$J/gpu_bench_8b.json" "$(bin cpu_bench)" --model "$M8" --threads 2 --repeats 1 \
      --decode-tokens 4 --prefill 32 --verify 1,4 --json "$J/gpu_bench_8b.json"
  fi
  step lanes_8b 150 "$J/lanes_8b.json" "$LANES" --model "$M8" --drafter "$M8-dspark" --device "$DEVICE" \
    --threads "$THREADS" --streams "$MOE_STREAMS" --tokens "$MOE_TOKENS" --repeats "$REPEATS" --prompt-tokens "$PROMPT" \
    --synthetic-acceptance "$ACCEPT" --max-rows "$ROWS" --machine "$MACHINE" --commit "$COMMIT" \
    --json "$J/lanes_8b.json"
fi
rm -rf "$M8" "$M8-dspark"

# 5. The drafter alone on the device (cuda-drafter's bench), last: it writes its own drafter.
if [ "$DEVICE" = cuda ]; then
  step drafter_bench 60 "$J/drafter_bench.json" "$(bin drafter_bench)" --device cuda --shape lfm2.5-1.2b --bits 0 \
    --dir "$WORK/drafter_bench" --json "$J/drafter_bench.json"
fi

# 6. Extra steps: every LS_EXTRA_DIR/*.sh (default .gpu/extra, not checked in: carry it) runs with BIN, OUT, WORK
# and LANESPARK exported, under its own limit (LS_EXTRA_S, default 60 s each), for one-off timings of work in progress.
EXTRA_DIR=${LS_EXTRA_DIR:-.gpu/extra}
if [ -d "$EXTRA_DIR" ]; then
  export BIN OUT WORK LANESPARK
  for extra in "$EXTRA_DIR"/*.sh; do
    [ -f "$extra" ] && step "extra_$(basename "$extra" .sh)" "${LS_EXTRA_S:-60}" - bash "$extra"
  done
fi

# 7. One combined JSON and the summary table (printed last).
export GC_STEPS="$STEPS" GC_OUT="$OUT" GC_COMMIT="$COMMIT" GC_MACHINE="$MACHINE" GC_DEVICE="$DEVICE" GC_ACCEPT="$ACCEPT"
python3 - <<'PY' 2>&1 | tee -a "$LOG"
import json, os
steps, results = [], {}
for line in open(os.environ["GC_STEPS"]):
    name, status, seconds, path = line.rstrip("\n").split("\t")
    entry = {"name": name, "status": status, "seconds": int(seconds)}
    if path != "-" and os.path.exists(path):
        try:
            results[name] = json.load(open(path))
        except ValueError as error:
            entry["json_error"] = str(error)
    steps.append(entry)
combined = {"commit": os.environ["GC_COMMIT"], "machine": os.environ["GC_MACHINE"], "device": os.environ["GC_DEVICE"],
            "synthetic_acceptance_mean": float(os.environ["GC_ACCEPT"]), "steps": steps, "results": results}
json.dump(combined, open(os.path.join(os.environ["GC_OUT"], "gpu_check.json"), "w"), indent=1)

print("\n== gpu-check summary: commit %s\n== %s" % (combined["commit"], combined["machine"]))
print("\n| step | status | s |\n|---|---|---|")
for entry in steps:
    print("| %s | %s | %d |" % (entry["name"], entry["status"], entry["seconds"]))
for name in ("cuda_tests", "sm80_cuda_tests", "cpu_tests"):
    tests = results.get(name)
    if tests:
        cases = [case for suite in tests.get("testsuites", []) for case in suite.get("testsuite", [])]
        failed = [case["name"] for case in cases if case.get("failures")]
        skipped = sum(1 for case in cases if case.get("result") == "SKIPPED")
        print("\n%s: %s tests, %s failures, %d skipped %s" % (name, tests.get("tests"), tests.get("failures"), skipped,
              ("FAILED: " + ", ".join(failed[:12])) if failed else ""))
for name, tables in results.items():
    if not name.startswith(("gpu_bench", "cpu_bench", "sm80_gpu_bench")):
        continue
    flat = {key: value for key, value in tables.items() if isinstance(value, (int, float, str)) and len(str(value)) < 60}
    print("\n%s: %s" % (name, ", ".join("%s=%s" % item for item in list(flat.items())[:16])))
    if tables.get("decode_ms") and tables.get("floor_ms"):
        print("  decode %.1f tok/s = %.0f %% of the memory floor (bar 80 %%)" % (1e3 / tables["decode_ms"],
              100.0 * tables["floor_ms"] / tables["decode_ms"]))
    if tables.get("prefill_ms") and tables.get("cublas_prefill_ms"):
        print("  prefill %s tokens %.1f ms = %.0f %% of cuBLAS on the same GEMMs (bar 50 %%)" % (
              tables.get("prefill_tokens"), tables["prefill_ms"], 100.0 * tables["cublas_prefill_ms"] / tables["prefill_ms"]))
    if tables.get("verify_ms"):
        print("  verify ms by rows: " + ", ".join("%s: %.3f" % item for item in tables["verify_ms"].items()))
hopper, portable = results.get("gpu_bench_1.2b") or {}, results.get("sm80_gpu_bench_1.2b") or {}
for key, what in (("decode_ms", "decode 1 stream"), ("prefill_ms", "prefill")):
    if hopper.get(key) and portable.get(key):
        print("sm_80 path (compute_80 PTX) vs sm_90a, 1.2b %s: %.3f ms vs %.3f ms (%.2fx)" % (what, portable[key],
              hopper[key], portable[key] / hopper[key]))
for name, bench in results.items():
    if bench.get("bench") != "lanes":
        continue
    accept = bench.get("synthetic_acceptance") or {}
    print("\n%s: %s, drafter on %s, %s tokens/stream, %s%s" % (name, os.path.basename(bench["model"]),
          bench.get("drafter_device"), bench["tokens_per_stream"], "sampled" if bench.get("sampled") else "greedy",
          ", synthetic acceptance %.2f" % accept["mean"] if accept else ""))
    print("| streams | plain tok/s | drafted tok/s | speedup | accepted | drafted rows | verified rows | passes | exact |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in bench["rows"]:
        print("| %d | %.1f | %.1f | %.2fx | %.2f | %d | %d | %d | %s |" % (row["streams"],
              row["plain_decode_tokens_per_s"], row["drafted_decode_tokens_per_s"], row["speedup"],
              row["accepted_length"], row["drafted_rows"], row["verified_rows"], row["drafter_passes"],
              "yes" if row["exact"] else "NO"))
    rows = bench["rows"]
    inexact = [row["streams"] for row in rows if not row["exact"]]
    print("exact: %s" % ("every reply drafted == plain" if not inexact else "MISMATCH at %s streams" % inexact))
    if accept and rows:
        one = [row["speedup"] for row in rows if row["streams"] == 1]
        worst = min(rows, key=lambda row: row["speedup"])
        if one:
            print("bar 1 stream >= 3x: %.2fx (%s)" % (one[0], "met" if one[0] >= 3 else "NOT met"))
        print("bar never below plain: lowest %.2fx at %d streams (%s)" % (worst["speedup"], worst["streams"],
              "met" if worst["speedup"] >= 1 else "NOT met"))
print("\nwrote %s/gpu_check.json and gpu_check.log" % os.environ["GC_OUT"])
PY
say "gpu-check done in ${SECONDS} s"
