#!/usr/bin/env bash
# The lanes' own host instructions a round, plain and drafted (lanes_host_bench under callgrind; lanes18).
# usage: bench/lanes_host_callgrind.sh STREAMS [FIRST:[LAST] rounds, default 32:] [lanes_host_bench path]
set -eu
STREAMS=${1:-16}
ROUNDS=${2:-32:}
BENCH=${3:-build/bench/lanes_host_bench}
for arm in plain drafted; do
  out=$(valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="/tmp/lanes_host.$arm.$STREAMS" \
    "$BENCH" --streams "$STREAMS" --arm "$arm" --repeats 1 --rounds "$ROUNDS" 2>&1)
  rounds=$(echo "$out" | awk -v a="$arm" '$1 == a { print $2 }')
  instructions=$(echo "$out" | awk '/Collected/ { print $4 }')
  echo "$arm: $STREAMS streams, $rounds rounds, $instructions instructions, $((instructions / rounds)) a round" \
       "(callgrind_annotate --inclusive=yes /tmp/lanes_host.$arm.$STREAMS)"
done
