#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, and generate with the bundled nano model (and its drafter once present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build=${LS_BUILD_DIR:-build}
model=models/nano/target
if [ ! -f "$model/config.json" ]; then
  # Until the bundled model lands: a small random checkpoint of the real LFM2-350M shape.
  model="$build/synth-lfm2-350m-2l"
  [ -f "$model/config.json" ] || "$build/lanespark" synth --shape lfm2-350m --layers 2 --seed 1 --out "$model"
  exec "$build/lanespark" generate --model "$model" --prompt-ids 1,6,1504,7 --max-tokens 32 "$@"
fi
exec "$build/lanespark" generate --model "$model" --drafter models/nano/drafter \
  --prompt "import os
def read_config(path):" --max-tokens 128 "$@"
