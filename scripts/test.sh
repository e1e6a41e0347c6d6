#!/usr/bin/env bash
# The whole test suite on a fresh machine: setup, build, then every C++ and Python test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build=${LS_BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
