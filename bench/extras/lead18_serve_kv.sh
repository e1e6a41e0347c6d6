#!/usr/bin/env bash
# limit: 60
# Session 16 (lead): `lanespark serve` on CUDA with a small KV pool (--kv-pages 64: 2048 positions), so the engine's KV
# budget decides admission: 8 concurrent 600-token requests of which three fit at a time (20 pages each) must each equal
# the same request alone (greedy and seeded), none may fail; the printed context limit and a request past it
# (context_length_exceeded) are checked. python3's stdlib client. Writes $OUT/lead18_serve_kv.log.
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANESPARK=${LANESPARK:-$(bin lanespark)}
LOG=$OUT/lead18_serve_kv.log
SERVER_LOG=$OUT/lead18_serve_kv_server.log
"$LANESPARK" serve --model models/nano/target --drafter models/nano/drafter --device "${DEVICE:-cuda}" --threads 8 \
  --port 0 --max-streams 16 --kv-pages 64 --served-model-name nano >"$SERVER_LOG" 2>&1 &
PID=$!
PORT=
for _ in $(seq 1 400); do
  PORT=$(grep -o 'listening on http://[^:]*:[0-9]*' "$SERVER_LOG" | grep -o '[0-9]*$')
  [ -n "$PORT" ] && break
  kill -0 $PID 2>/dev/null || break
  sleep 0.1
done
[ -z "$PORT" ] && { echo "the server did not start" >"$LOG"; cat "$SERVER_LOG" >>"$LOG"; exit 1; }
PORT=$PORT python3 - <<'PY' 2>&1 | tee "$LOG"
import concurrent.futures, http.client, json, os
PORT = int(os.environ["PORT"])

def post(body):
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    reply = json.loads(response.read())
    connection.close()
    return response.status, reply

PROMPTS = ["import os\ndef read_config(path):", "class Stack:\n    def __init__(self):", "def fibonacci(n):",
           "for i in range(10):", "# sort a list\nnumbers = [3, 1, 2]\n", "def parse(line):", "while True:",
           "def main():\n    args ="]
def ask(index):
    body = {"model": "nano", "prompt": PROMPTS[index], "max_tokens": 600, "temperature": 0.0}
    if index % 2: body.update(temperature=0.8, seed=index)
    status, reply = post(body)
    return status, reply["choices"][0]["text"] if status == 200 else reply

alone = [ask(i) for i in range(len(PROMPTS))]
with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
    together = list(pool.map(ask, range(len(PROMPTS))))
ok = sum(a[0] == 200 for a in together)
same = sum(a == b for a, b in zip(alone, together))
print(f"8 concurrent 600-token requests through a 64-page pool: {ok} answered 200, {same} of 8 equal to alone")
status, reply = post({"model": "nano", "prompt": "x", "max_tokens": 5000})
print(f"max_tokens 5000: HTTP {status}, code {reply.get('error', {}).get('code')}")
PY
kill -TERM $PID; wait $PID; echo "server exit: $?" >>"$LOG"
grep -E "context limited|listening" "$SERVER_LOG" >>"$LOG"
