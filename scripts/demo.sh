#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, generate with the bundled nano pair, then send the same pair one
# request through the OpenAI-compatible server (`lanespark serve`, docs/api.md) and stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build=${LS_BUILD_DIR:-build}
"$build/lanespark" generate --model models/nano/target --drafter models/nano/drafter \
  --prompt "import os
def read_config(path):" --max-tokens 128 "$@"

echo
echo "== the same pair behind the OpenAI-compatible server (POST /v1/completions)"
log=$(mktemp)
"$build/lanespark" serve --model models/nano/target --drafter models/nano/drafter --port 0 2>"$log" &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
port=
for _ in $(seq 1 300); do  # up to 30 s for the load
  port=$(grep -o 'listening on http://[^:]*:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "demo: the server did not start"; cat "$log"; exit 1; }
python3 - "$port" <<'PY'
import json, sys, urllib.request
body = {"model": "target", "prompt": "def fibonacci(n):", "max_tokens": 64, "temperature": 0, "stop": ["\n\n\n"]}
request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(request, timeout=60))
print(body["prompt"] + reply["choices"][0]["text"])
print("finish_reason:", reply["choices"][0]["finish_reason"], " usage:", json.dumps(reply["usage"]))
PY
kill -TERM "$server"
wait "$server"
