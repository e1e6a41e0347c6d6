#!/usr/bin/env bash
# limit: 120
# lanes19 final: the restarted group's two A/Bs on top of the default (the old overhead, after batch b3). Arms, each its
# own lanes_bench process, alternated:
#   A  = the default,
#   W  = --wake-needs-landed on (no dormant stream woken while every verified window kept nothing),
#   P  = --scout-probes 4 (four streams probe together where the scout probes over a restarted context),
#   PW = both.
# Nano greedy 256 tokens at 4 / 8 / 16 streams (3 repeats) A W P PW PW P W A; 64 tokens at 4 / 8 / 16 A W P PW; the
# synth 1.2B (its drafter lands as well over restarted contexts: its group must still wake) at 8 / 16 streams A W P PW
# (2 repeats). Expected (b3, on the other overhead): P at nano 8 / 16 ~0.98-1.01x with 1 pass and 4 restarts (A
# 0.94-0.97x, 2-3 passes, 9 / 17 restarts), W ~0.96-0.98x with 2 restarts; 4 streams as A in every arm (whole
# contexts: neither rule applies); the 1.2B within ~2 % of A (the open risk for P: on the fakes 1.158 -> 1.108x).
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
"$LANES" --help 2>&1 | grep -q -- "--scout-probes" || { echo "lanes_bench predates lanes19 (no --scout-probes): merge lanes19 first"; exit 0; }
LANESPARK=${LANESPARK:-$(bin lanespark)}
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
arm_flags() { case $1 in A) echo "";; W) echo "--wake-needs-landed on";; P) echo "--scout-probes 4";;
  PW) echo "--scout-probes 4 --wake-needs-landed on";; esac; }
i=0
for arm in A W P PW PW P W A; do
  i=$((i+1))
  "$LANES" $NANO $(arm_flags $arm) --tokens 256 --streams 4,8,16 --repeats 3 \
    --json "$OUT/lanes19_final_nano256_$arm-$i.json" >"$OUT/lanes19_final_nano256_$arm-$i.log" 2>&1
done
for arm in A W P PW; do
  "$LANES" $NANO $(arm_flags $arm) --tokens 64 --streams 4,8,16 --repeats 3 \
    --json "$OUT/lanes19_final_nano64_$arm-1.json" >"$OUT/lanes19_final_nano64_$arm-1.log" 2>&1
done
M=$WORK/lfm2.5-1.2b
[ -d "$M" ] || "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >"$OUT/lanes19_final_synth.log" 2>&1
for arm in A W P PW; do
  "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --synthetic-acceptance 5.02 $(arm_flags $arm) \
    --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 8,16 --repeats 2 \
    --json "$OUT/lanes19_final_12b_$arm-1.json" >"$OUT/lanes19_final_12b_$arm-1.log" 2>&1
done
python3 - "$OUT" <<'PY' || true
import glob, json, os, re, statistics, sys
cells = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "lanes19_final_*.json"))):
    m = re.match(r"lanes19_final_(nano256|nano64|12b)_(A|W|P|PW)-", os.path.basename(path))
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
    print("%s %2d %-2s: %s | %s | %s | %s | %.2f | %.2f/%.2f | %.2f | %.2f | %.2f | %.2f/%.2f | %s" % (key[0], key[1], key[2],
          " ".join("%.3f" % x[0] for x in v), " ".join(str(x[1]) for x in v), " ".join(str(x[2]) for x in v),
          med(3), med(4), med(5), med(6), med(7), med(8), med(9), med(10), med(11), all(x[12] for x in v)))
PY
