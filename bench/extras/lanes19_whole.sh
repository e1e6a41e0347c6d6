#!/usr/bin/env bash
# limit: 90
# lanes19 question 1: would whole contexts pay on the nano pair at 8 / 16 streams on the H200? Four admission arms,
# each its own process, alternated D W L S S L W D (nano greedy, 256 tokens, --prompt-tokens 64, 8,16 streams, 3
# repeats): D = the default (whole contexts priced: whole_contexts_repay), W = --admit whole (every prompt tapped
# where the prior's round saves >= 10 % of plain), L = --admit all (every prompt tapped wherever the prior pays at
# all), S = --admit scout (the restarted scout alone). Then one --debug 1 run of L at 16 streams, 1 repeat (pricing
# traces, gzipped). The summary prints per arm and stream count: speedups, tokens a window, passes, tap rows,
# restarts, and the drafted median run's phases (first round, slow-forward excess, pass / absorb ms, host ms d/p).
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANES=$(bin lanes_bench)
NANO="--model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json --device cuda --threads 8 --prompt-tokens 64"
arm_flags() { case $1 in D) echo "";; W) echo "--admit whole";; L) echo "--admit all";; S) echo "--admit scout";; esac; }
i=0
for arm in D W L S S L W D; do
  i=$((i+1))
  "$LANES" $NANO $(arm_flags $arm) --tokens 256 --streams 8,16 --repeats 3 \
    --json "$OUT/lanes19_whole_$arm$i.json" >"$OUT/lanes19_whole_$arm$i.log" 2>&1
done
"$LANES" $NANO --admit all --tokens 256 --streams 16 --repeats 1 --debug 1 2>&1 | gzip >"$OUT/lanes19_whole_L16_debug.log.gz"
python3 - "$OUT" <<'PY' || true
import glob, json, os, re, statistics, sys
cells = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "lanes19_whole_*.json"))):
    m = re.match(r"lanes19_whole_([DWLS])\d", os.path.basename(path))
    if not m: continue
    try: rows = json.load(open(path))["rows"]
    except Exception: continue
    for row in rows:
        d, p, s = row["drafted_phases"], row["plain_phases"], row["drafted_stats"]
        cells.setdefault((row["streams"], m.group(1)), []).append(
            (row["speedup"], row["tokens_per_window"], row["accepted_length"], row["drafter_passes"], row["tap_rows"],
             s["drafter_restarts"], s["windows_with_drafts"], d["first_round_ms"], p["first_round_ms"],
             d["slow_forward_excess_ms"], d["pass_ms"], d["absorb_ms"], d["host_ms"], p["host_ms"], row["exact"]))
print("streams arm: speedups | tokens/window | accepted len | passes | tap rows | restarts | windows w/ drafts | first round d/p | slow excess | pass ms | absorb ms | host d/p | exact")
for key in sorted(cells):
    v = cells[key]
    med = lambda i: statistics.median(x[i] for x in v)
    print("%2d %s: %s | %.2f | %.2f | %s | %s | %s | %s | %.2f/%.2f | %.2f | %.2f | %.2f | %.2f/%.2f | %s" % (key[0], key[1],
          " ".join("%.3f" % x[0] for x in v), med(1), med(2), " ".join(str(x[3]) for x in v), med(4), med(5), med(6),
          med(7), med(8), med(9), med(10), med(11), med(12), med(13), all(x[14] for x in v)))
PY
