#!/usr/bin/env bash
# limit: 120
# lanes18 batch A: the CUDA target's one-off forwards at 8 / 16 streams. Arms, each its own lanes_bench process,
# alternated: A = the default; B = LS_TAPS_EVERY_FORWARD=1 (with device taps every forward writes its taps,
# so a tap-only forward replays the quiet forward's graph); C = LS_CAPTURE_AT_FIRST=1 (a shape captured at its first
# sighting, no eager run); D = both. Order A B C D, B C D A, C D A B. Every phase line now says how many
# forwards ran eagerly / were captured. Also measures lanes18's host work cuts (no switch: the same decisions).
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
LANESPARK=${LANESPARK:-$(bin lanespark)}
arm_env() { case $1 in A) echo "";; B) echo "LS_TAPS_EVERY_FORWARD=1";; C) echo "LS_CAPTURE_AT_FIRST=1";; D) echo "LS_TAPS_EVERY_FORWARD=1 LS_CAPTURE_AT_FIRST=1";; esac; }
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
i=0
for arm in A B C D B C D A C D A B; do
  i=$((i+1))
  env $(arm_env $arm) "$LANES" $NANO --tokens 256 --streams 4,8,16 --repeats 3 \
    --json "$OUT/lanes18_a_nano256_${arm}$i.json" >"$OUT/lanes18_a_nano256_${arm}$i.log" 2>&1
done
for arm in A B C D; do
  env $(arm_env $arm) "$LANES" $NANO --tokens 64 --streams 1,4,8,16 --repeats 3 \
    --json "$OUT/lanes18_a_nano64_$arm.json" >"$OUT/lanes18_a_nano64_$arm.log" 2>&1
done
M=$WORK/lfm2.5-1.2b
[ -d "$M" ] || "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >"$OUT/lanes18_a_synth.log" 2>&1
for arm in A D; do
  env $(arm_env $arm) "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --synthetic-acceptance 5.02 \
    --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 8,16 --repeats 2 \
    --json "$OUT/lanes18_a_12b_$arm.json" >"$OUT/lanes18_a_12b_$arm.log" 2>&1
done
for f in "$OUT"/lanes18_a_*.log; do echo "## $f"; grep -E '^\s*(streams|[0-9]+ )|phases' "$f" | head -24; done
python3 - "$OUT" <<'PY' || true
import glob, json, os, re, statistics, sys
cells = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "lanes18_a_*.json"))):
    name = os.path.basename(path)
    m = re.match(r"lanes18_a_(nano256|nano64|12b)_([A-D])", name)
    if not m: continue
    try: rows = json.load(open(path))["rows"]
    except Exception: continue
    for row in rows:
        d, p = row["drafted_phases"], row["plain_phases"]
        cells.setdefault((m.group(1), row["streams"], m.group(2)), []).append(
            (row["speedup"], row["drafter_passes"], d.get("first_sightings", -1), d.get("captures", -1),
             p.get("first_sightings", -1), p.get("captures", -1), d["host_ms"], p["host_ms"], d["first_round_ms"], p["first_round_ms"]))
print("pair streams arm: speedups | passes | drafted eager/captured, plain eager/captured (median run) | host ms d/p | first round ms d/p")
for key in sorted(cells):
    v = cells[key]
    med = lambda i: statistics.median(x[i] for x in v)
    print("%s %2d %s: %s | %s | %s/%s, %s/%s | %.2f/%.2f | %.2f/%.2f" % (key[0], key[1], key[2],
          " ".join("%.3f" % x[0] for x in v), " ".join(str(x[1]) for x in v), med(2), med(3), med(4), med(5),
          med(6), med(7), med(8), med(9)))
PY
