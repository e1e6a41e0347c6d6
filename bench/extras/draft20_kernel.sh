#!/usr/bin/env bash
# limit: 90
# draft20 (session 20): the CUDA drafter's int8 weights. The new tests (the device quantizer against the CPU rule, the
# int8 GEMM against an fp64 reference at 1..32 rows with every shape pinned, the refusals, the int8 drafter through
# the lanes on the nano pair, acceptance int8 vs bf16 with a planted arm), then the kernel bench: every drafter GEMM
# of the 1.2B shape alone, cuBLAS / skinny bf16 against the int8 GEMM (automatic and pinned shapes), rows 1..32.
set -u
bin() { local c; for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return 0; }; done; find "$BIN" -name "$1" -type f | head -1; }
LOG=$OUT/draft20_kernel.log
T=$(bin lanespark_cuda_tests)
DB=$(bin drafter_bench)
echo "tests: $T" > "$LOG"
timeout 45 "$T" --gtest_filter='CudaDrafterInt8.*:CudaInt8Drafter.*:Nano/CudaInt8DrafterLanes.*:CudaDrafter.RefusesIntFour*' \
  --gtest_output="json:$OUT/draft20_tests.json" >> "$LOG" 2>&1
echo "tests rc=$? at ${SECONDS}s" >> "$LOG"
timeout 40 stdbuf -oL "$DB" --device cuda --shape lfm2.5-1.2b --int8-kernels --rows 1,5,9,16,27,32 --repeats 5 \
  --json "$OUT/draft20_kernels.json" >> "$LOG" 2>&1
echo "kernels rc=$? at ${SECONDS}s" >> "$LOG"
# ncu: the int8 GEMMs inside one graphed 1-stream pass (--bits 8 rounds): time, DRAM and L2 bytes, by launch.
if command -v ncu > /dev/null && [ $SECONDS -lt 70 ]; then
  timeout 20 ncu --graph-profiling node --cache-control none --clock-control none --kernel-name regex:int8_gemm \
    --launch-skip 40 --launch-count 24 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread \
    --csv "$DB" --device cuda --shape lfm2.5-1.2b --bits 8 --context 128 --rounds 3 --round-blocks 1 --streams 1 \
    --dir "$WORK/draft20_ncu" --round-settings 40:head:s256:split:keyed:row:bc:ch:bo100 > "$OUT/draft20_ncu.csv" 2>&1
  echo "ncu rc=$? at ${SECONDS}s" >> "$LOG"
fi
