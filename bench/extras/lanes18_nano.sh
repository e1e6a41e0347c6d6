#!/usr/bin/env bash
# limit: 110
# lanes18 final: main's default after lanes18 (the host work of rounds that buy nothing cut, the same decisions) at the
# rows batch A compared, and the one A/B left open: C = LS_CAPTURE_AT_FIRST=1 (a shape captured at its first sighting,
# no eager run; batch A: the nano pair 4 streams +8 %, 8 streams +2 %, 16 streams -1 %, the synth 1.2B unclear). Each arm
# its own process, alternated: nano greedy 256 tokens at 4 / 8 / 16 streams (3 repeats) A C A C A C, 64 tokens A C, the
# synth 1.2B at 8 / 16 / 32 / 64 streams (3 repeats) A C. Phase lines count the forwards run eagerly / captured.
# (Batch A's form, with its four arms: git show 396db16:bench/extras/lanes18_nano.sh.)
# The final batch ran this at b84ae38; C lost (docs/lanes.md, lanes18) and LS_CAPTURE_AT_FIRST is removed since.
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
LANESPARK=${LANESPARK:-$(bin lanespark)}
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
arm_env() { case $1 in A) echo "";; C) echo "LS_CAPTURE_AT_FIRST=1";; esac; }
i=0
for arm in A C A C A C; do
  i=$((i+1))
  env $(arm_env $arm) "$LANES" $NANO --tokens 256 --streams 4,8,16 --repeats 3 \
    --json "$OUT/lanes18_final_nano256_$arm$i.json" >"$OUT/lanes18_final_nano256_$arm$i.log" 2>&1
done
for arm in A C; do
  env $(arm_env $arm) "$LANES" $NANO --tokens 64 --streams 1,4,8,16 --repeats 3 \
    --json "$OUT/lanes18_final_nano64_$arm.json" >"$OUT/lanes18_final_nano64_$arm.log" 2>&1
done
M=$WORK/lfm2.5-1.2b
[ -d "$M" ] || "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >"$OUT/lanes18_final_synth.log" 2>&1
for arm in A C; do
  env $(arm_env $arm) "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --synthetic-acceptance 5.02 \
    --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 8,16,32,64 --repeats 3 \
    --json "$OUT/lanes18_final_12b_$arm.json" >"$OUT/lanes18_final_12b_$arm.log" 2>&1
done
python3 - "$OUT" <<'PY' || true
import glob, json, os, re, statistics, sys
cells = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "lanes18_final_*.json"))):
    m = re.match(r"lanes18_final_(nano256|nano64|12b)_([AC])", os.path.basename(path))
    if not m: continue
    try: rows = json.load(open(path))["rows"]
    except Exception: continue
    for row in rows:
        d, p = row["drafted_phases"], row["plain_phases"]
        cells.setdefault((m.group(1), row["streams"], m.group(2)), []).append(
            (row["speedup"], row["drafter_passes"], d.get("first_sightings", -1), d.get("captures", -1),
             d["tap_only_forwards"], d["tap_only_forward_ms"], d["quiet_forward_ms"], p["quiet_forward_ms"],
             d["host_ms"], p["host_ms"], d["first_round_ms"], p["first_round_ms"]))
print("pair streams arm: speedups | passes | drafted eager/captured | tap-only n x ms | quiet ms d/p | host ms d/p | first round ms d/p (medians of the median runs)")
for key in sorted(cells):
    v = cells[key]
    med = lambda i: statistics.median(x[i] for x in v)
    print("%s %2d %s: %s | %s | %s/%s | %s x %.4f | %.4f/%.4f | %.2f/%.2f | %.2f/%.2f" % (key[0], key[1], key[2],
          " ".join("%.3f" % x[0] for x in v), " ".join(str(x[1]) for x in v), med(2), med(3), med(4), med(5),
          med(6), med(7), med(8), med(9), med(10), med(11)))
PY
