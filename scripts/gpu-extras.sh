#!/usr/bin/env bash
# Runs the extras named in LS_EXTRA_LIST (paths relative to the repo root), each under LS_EXTRA_S seconds, on
# whatever GPU CUDA_VISIBLE_DEVICES names, from the staged binaries in .gpu/bin. Log: $OUT/extras$LS_EXTRA_TAG.log.
# Each extra sees BIN (unpacked binaries), OUT, WORK (its own scratch folder) and LANESPARK exported.
# On a 2-GPU machine, beside scripts/gpu-check.sh on the other GPU, pin the two to separate CPUs (spinning pools of
# concurrent lanes_bench runs stalled gpu-check's drafter absorbs 4-14x in session 10):
#   (CUDA_VISIBLE_DEVICES=1 LS_EXTRA_LIST=".gpu/extra/a.sh .gpu/extra/b.sh" LS_EXTRA_TAG=1 taskset -c 16-31 \
#      bash scripts/gpu-extras.sh) & CUDA_VISIBLE_DEVICES=0 LS_EXTRA_DIR=/none taskset -c 0-15 scripts/gpu-check.sh
set -u
tag=${LS_EXTRA_TAG:-0}
export OUT=${OUT:-out/extras}
mkdir -p "$OUT"
log="$OUT/extras$tag.log"
root=/tmp/lanespark-extras$tag
rm -rf "$root" && mkdir -p "$root/bin"
tar -xJf .gpu/bin/binaries.tar.xz -C "$root/bin" 2>>"$log" ||
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .gpu/bin/binaries.tar.xz "$root/bin"
export BIN="$root/bin"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LANESPARK="$BIN/lanespark"
echo "extras$tag: GPU ${CUDA_VISIBLE_DEVICES:-all}, commit $(head -1 "$BIN/COMMIT" 2>/dev/null), $(date -u +%FT%TZ)" >>"$log"
for extra in ${LS_EXTRA_LIST:-}; do
  name=$(basename "$extra" .sh)
  export WORK="$root/$name"
  mkdir -p "$WORK"
  echo "=== $name (limit ${LS_EXTRA_S:-60}s, at ${SECONDS}s)" >>"$log"
  start=$SECONDS
  timeout -k 5 "${LS_EXTRA_S:-60}" bash "$extra" >>"$log" 2>&1
  echo "--- $name: rc=$? in $((SECONDS - start)) s" >>"$log"
done
echo "extras$tag: done at ${SECONDS}s" >>"$log"
