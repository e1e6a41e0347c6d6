#!/usr/bin/env bash
# Builds the CUDA binaries for the GPU machine HERE (Release, sm_90a only, stripped) and stages them with the
# runtime libraries the GPU machine lacks into ${1:-.gpu/bin}, small enough to carry with a device call.
# Usage: scripts/build-gpu.sh [stage-dir] [cmake targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-.gpu/bin}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(lanespark lanespark_cuda_tests)
build=${LS_GPU_BUILD_DIR:-build-gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLS_CUDA=ON \
  "-DLS_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" >/dev/null
cmake --build "$build" -j 2 --target "${targets[@]}"
mkdir -p "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] && strip -o "$stage/$t" "$f"
done
# PCRE2 is a runtime library the GPU image may lack: carry it (LD_LIBRARY_PATH=$stage/lib there).
cp -L "$(ldconfig -p | awk '/libpcre2-8.so.0 /{print $NF; exit}')" "$stage/lib/"
du -sh "$stage"
