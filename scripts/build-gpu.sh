#!/usr/bin/env bash
# Builds the CUDA binaries for the GPU machine HERE (Release, stripped; sm_90a only unless LS_CUDA_ARCHS says
# otherwise, e.g. LS_CUDA_ARCHS=80-ptx for the portable sm_80 path's test set) and stages them with the runtime
# libraries the GPU machine lacks into ${1:-.gpu/bin}, small enough to carry with a device call.
# Usage: [LS_CUDA_ARCHS=90a] [LS_GPU_BUILD_DIR=build-gpu] scripts/build-gpu.sh [stage-dir] [cmake targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-.gpu/bin}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(lanespark lanespark_cuda_tests)
build=${LS_GPU_BUILD_DIR:-build-gpu}
archs=${LS_CUDA_ARCHS:-90a}
seed=()
# CMake 3.25 has no C++20 flag for nvcc, so a fresh folder fails the CUDA20 dialect check: seed the flag (a folder
# configured without it is reconfigured from scratch).
if ! grep -qs cuda_std_20 "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
  seed=(-DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20)
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLS_CUDA=ON "-DLS_CUDA_ARCHS=$archs" "${seed[@]}" >/dev/null
cmake --build "$build" -j 2 --target "${targets[@]}"
mkdir -p "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] && strip -o "$stage/$t" "$f"
done
# PCRE2 is a runtime library the GPU image may lack: carry it (LD_LIBRARY_PATH=$stage/lib there).
cp -L "$(ldconfig -p | awk '/libpcre2-8.so.0 /{print $NF; exit}')" "$stage/lib/"
du -sh "$stage"
