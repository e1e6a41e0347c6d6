#!/usr/bin/env bash
# limit: 120
# lanes19: the restarted group at 8 / 16 streams. Arms, each its own lanes_bench process, alternated:
#   N = the new defaults (the device absorb after a commit left out of the host overhead; no dormant stream woken while
#       every verified window kept nothing),
#   O = the old rules (--overhead with-absorbs --wake-needs-landed off),
#   P = N + --scout-probes 4 (four streams probe together over restarted contexts),
#   W = N + --wake-needs-landed on (no dormant stream woken while every verified window kept nothing).
# Nano greedy 256 tokens at 1 / 4 / 8 / 16 streams (3 repeats) N O P W W P O N; 64 tokens at 4 / 8 / 16 N O P W; the
# synth 1.2B (its drafter lands as well over restarted contexts: its group must still wake) at 8 / 16 streams N O W.
# Expected: N >= O everywhere, nano 8 / 16 streams 0.96-0.99x with 1-2 passes and <= 2 restarts when the scout's
# probe keeps nothing (O: 0.93-0.96x, 3 passes, 9 / 17 restarts); 1 / 4 streams and the 1.2B as O. W: no group
# woken after a probe that kept nothing (restarts <= 2), the 1.2B within ~2 % of N.
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
"$LANES" --help 2>&1 | grep -q -- "--scout-probes" || { echo "lanes_bench predates lanes19 (no --scout-probes): merge lanes19 first"; exit 0; }
LANESPARK=${LANESPARK:-$(bin lanespark)}
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
arm_flags() { case $1 in N) echo "";; O) echo "--overhead with-absorbs --wake-needs-landed off";; P) echo "--scout-probes 4";;
  W) echo "--wake-needs-landed on";; esac; }
i=0
for arm in N O P W W P O N; do
  i=$((i+1))
  "$LANES" $NANO $(arm_flags $arm) --tokens 256 --streams 1,4,8,16 --repeats 3 \
    --json "$OUT/lanes19_wake_nano256_$arm$i.json" >"$OUT/lanes19_wake_nano256_$arm$i.log" 2>&1
done
for arm in N O P W; do
  "$LANES" $NANO $(arm_flags $arm) --tokens 64 --streams 4,8,16 --repeats 3 \
    --json "$OUT/lanes19_wake_nano64_$arm.json" >"$OUT/lanes19_wake_nano64_$arm.log" 2>&1
done
M=$WORK/lfm2.5-1.2b
[ -d "$M" ] || "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >"$OUT/lanes19_wake_synth.log" 2>&1
for arm in N O W; do
  "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --synthetic-acceptance 5.02 $(arm_flags $arm) \
    --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 8,16 --repeats 2 \
    --json "$OUT/lanes19_wake_12b_$arm.json" >"$OUT/lanes19_wake_12b_$arm.log" 2>&1
done
python3 - "$OUT" <<'PY' || true
import glob, json, os, re, statistics, sys
cells = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "lanes19_wake_*.json"))):
    m = re.match(r"lanes19_wake_(nano256|nano64|12b)_([NOPW])", os.path.basename(path))
    if not m: continue
    try: rows = json.load(open(path))["rows"]
    except Exception: continue
    for row in rows:
        d, p, s = row["drafted_phases"], row["plain_phases"], row["drafted_stats"]
        cells.setdefault((m.group(1), row["streams"], m.group(2)), []).append(
            (row["speedup"], row["drafter_passes"], s["drafter_restarts"], row["tap_rows"], row["tokens_per_window"],
             d["first_round_ms"], p["first_round_ms"], d["slow_forward_excess_ms"], d["pass_ms"], d["absorb_ms"],
             d["host_ms"], p["host_ms"], row["exact"]))
print("pair streams arm: speedups | passes | restarts | tap rows | tok/win | first round d/p | slow excess | pass ms | absorb ms | host d/p | exact (medians of the median runs)")
for key in sorted(cells):
    v = cells[key]
    med = lambda i: statistics.median(x[i] for x in v)
    print("%s %2d %s: %s | %s | %s | %s | %.2f | %.2f/%.2f | %.2f | %.2f | %.2f | %.2f/%.2f | %s" % (key[0], key[1], key[2],
          " ".join("%.3f" % x[0] for x in v), " ".join(str(x[1]) for x in v), " ".join(str(x[2]) for x in v),
          med(3), med(4), med(5), med(6), med(7), med(8), med(9), med(10), med(11), all(x[12] for x in v)))
PY
