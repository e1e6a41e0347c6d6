#!/usr/bin/env bash
# limit: 240
# lanes20 (checkpoint 1): the scout pass voting once (--scout-vote on) against the default and lanes19's PW. Arms, each
# its own lanes_bench process, alternated:
#   A  = the default,
#   PW = --scout-probes 4 --wake-needs-landed on (lanes19's candidate: b4 0.985-1.000x at nano 8 / 16 streams),
#   PV = --scout-probes 4 --scout-vote on (the four restarted windows move the pool as one; no wake before half the
#        votes landed),
#   PV2 = PV + --scout-depth 2 (each window of the scout's pass asks 2 drafts: 16 verify rows beside 8 streams, not 36),
#   G  = --scout-gate right (64 tokens only: the 4-stream gate on an always-right drafter's gain), GPV = G + PV.
# Nano greedy 256 tokens at 4 / 8 / 16 streams, 3 repeats, A PW PV PV2 x5 rotated; 64 tokens at 4 / 8 / 16 streams, 5
# repeats, A G PV GPV x4 rotated; the synth 1.2B (its drafter lands as well over restarted contexts: its group must
# still wake) at 8 / 16 streams, 2 repeats, A PW PV PV2 x2.
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
"$LANES" --help 2>&1 | grep -q -- "--scout-depth" || { echo "lanes_bench predates lanes20 (no --scout-depth): merge lanes20 first"; exit 0; }
LANESPARK=${LANESPARK:-$(bin lanespark)}
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
arm_flags() { case $1 in A) echo "";; PW) echo "--scout-probes 4 --wake-needs-landed on";;
  PV) echo "--scout-probes 4 --scout-vote on";; PV2) echo "--scout-probes 4 --scout-vote on --scout-depth 2";;
  G) echo "--scout-gate right";;
  GPV) echo "--scout-gate right --scout-probes 4 --scout-vote on";; esac; }
i=0
for order in "A PW PV PV2" "PW PV PV2 A" "PV PV2 A PW" "PV2 A PW PV" "A PW PV PV2"; do
  for arm in $order; do
    i=$((i+1))
    timeout 40 "$LANES" $NANO $(arm_flags $arm) --tokens 256 --streams 4,8,16 --repeats 3 \
      --json "$OUT/lanes20_vote_nano256_$arm-$i.json" >"$OUT/lanes20_vote_nano256_$arm-$i.log" 2>&1
  done
done
for order in "A G PV GPV" "G PV GPV A" "PV GPV A G" "GPV A G PV"; do
  for arm in $order; do
    i=$((i+1))
    timeout 30 "$LANES" $NANO $(arm_flags $arm) --tokens 64 --streams 4,8,16 --repeats 5 \
      --json "$OUT/lanes20_vote_nano64_$arm-$i.json" >"$OUT/lanes20_vote_nano64_$arm-$i.log" 2>&1
  done
done
M=$WORK/lfm2.5-1.2b
[ -d "$M" ] || timeout 60 "$LANESPARK" synth --shape lfm2.5-1.2b --out "$M" --drafter-out "$M-dspark" >"$OUT/lanes20_vote_synth.log" 2>&1
for arm in A PW PV PV2 PV2 PV PW A; do
  i=$((i+1))
  timeout 40 "$LANES" --model "$M" --drafter "$M-dspark" --device cuda --threads 8 --synthetic-acceptance 5.02 $(arm_flags $arm) \
    --tokens 256 --prompt-tokens 128 --max-rows 256 --streams 8,16 --repeats 2 \
    --json "$OUT/lanes20_vote_12b_$arm-$i.json" >"$OUT/lanes20_vote_12b_$arm-$i.log" 2>&1
done
python3 - "$OUT" <<'PY' || true
import glob, json, os, re, statistics, sys
cells = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "lanes20_vote_*.json"))):
    m = re.match(r"lanes20_vote_(nano256|nano64|12b)_([A-Z]+)-", os.path.basename(path))
    if not m: continue
    try: rows = json.load(open(path))["rows"]
    except Exception: continue
    for row in rows:
        d, p, s = row["drafted_phases"], row["plain_phases"], row["drafted_stats"]
        cells.setdefault((m.group(1), row["streams"], m.group(2)), []).append(
            (row["speedup"], row["drafter_passes"], s["drafter_restarts"], row["tap_rows"], row["tokens_per_window"],
             d["first_round_ms"], p["first_round_ms"], d["slow_forward_excess_ms"], d["pass_ms"], d["absorb_ms"],
             d["host_ms"], p["host_ms"], row["exact"]))
print("pair streams arm: speedups | median | passes | restarts | tap rows | tok/win | first round d/p | slow excess | pass ms | absorb ms | host d/p | exact (medians of the median runs)")
for key in sorted(cells):
    v = cells[key]
    med = lambda i: statistics.median(x[i] for x in v)
    print("%s %2d %-3s: %s | %.3f | %s | %s | %s | %.2f | %.2f/%.2f | %.2f | %.2f | %.2f | %.2f/%.2f | %s" % (key[0], key[1], key[2],
          " ".join("%.3f" % x[0] for x in v), med(0), " ".join(str(x[1]) for x in v), " ".join(str(x[2]) for x in v),
          med(3), med(4), med(5), med(6), med(7), med(8), med(9), med(10), med(11), all(x[12] for x in v)))
PY
