#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and builds lanespark into ${LS_BUILD_DIR:-build}; the demo and the test suite start here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${LS_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)"
