#!/usr/bin/env bash
# limit: 100
# serve17: `lanespark serve` on the device (the engine thread drives the CUDA target from a thread other than the
# one that loaded it). The nano pair over HTTP with python3's stdlib client. Server 1 (--draft-always, so drafts
# reach the verifier): 8 cases alone with draft:false (the oracle), then 8 concurrent with drafts on and off, compared
# text for text. Server 2 (default pricing): drafts on vs off over HTTP (arms alternated, best of 2) at 1/4/8/16
# streams, 256 tokens each, on the eval code prompts (cut to 256 characters), greedy and seeded sampled; then the
# streamed time to first text, median of 5. Writes $OUT/serve17_cuda.log and $OUT/serve17_cuda_{exact,speed}.json.
set -u
bin() { for c in "$BIN/$1" "$BIN/bench/$1" "$BIN/tests/$1"; do [ -x "$c" ] && { echo "$c"; return; }; done; find "$BIN" -name "$1" -type f | head -1; }
LANESPARK=${LANESPARK:-$(bin lanespark)}
DEVICE=${DEVICE:-cuda}
LOG=$OUT/serve17_cuda.log
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start_server() {  # name flags...: starts a server, sets PID and PORT
  local name=$1; shift
  SERVER_LOG=$OUT/serve17_cuda_server_$name.log
  "$LANESPARK" serve --model models/nano/target --drafter models/nano/drafter --device "$DEVICE" --threads 8 \
    --port 0 --max-streams 16 --served-model-name nano "$@" >"$SERVER_LOG" 2>&1 &
  PID=$!
  PORT=
  for _ in $(seq 1 400); do
    PORT=$(grep -o 'listening on http://[^:]*:[0-9]*' "$SERVER_LOG" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && return 0
    kill -0 $PID 2>/dev/null || break
    sleep 0.1
  done
  echo "serve17: the $name server did not start" | tee -a "$LOG"; cat "$SERVER_LOG" >>"$LOG"; kill $PID; exit 1
}
stop_server() {
  kill -TERM $PID
  for _ in $(seq 1 100); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
  wait $PID; echo "server exit code: $? (0 = clean SIGTERM shutdown)" | tee -a "$LOG"
}
: >"$LOG"
for MODE in exact speed; do
if [ $MODE = exact ]; then start_server exact --draft-always; else start_server speed; fi
MODE=$MODE PORT=$PORT OUT=$OUT python3 - <<'PY' 2>&1 | tee -a "$LOG"
import concurrent.futures, http.client, json, os, time
PORT = int(os.environ["PORT"])
MODE = os.environ["MODE"]

def post(path, body):
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    reply = json.loads(response.read())
    connection.close()
    assert response.status == 200, reply
    return reply

def health():
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
    connection.request("GET", "/health")
    reply = json.loads(connection.getresponse().read())
    connection.close()
    return reply

CASES = [("completions", "import os\ndef read_config(path):", {}),
         ("chat", "Write a Python function that reverses a list.", {}),
         ("completions", "class Stack:\n    def __init__(self):", {"temperature": 0.8, "top_p": 0.95, "seed": 7}),
         ("chat", "What is a hash map?", {"temperature": 0.7, "seed": 11}),
         ("completions", "def fibonacci(n):", {"temperature": 1.0, "top_k": 20, "seed": 3}),
         ("chat", "Explain recursion in one sentence.", {}),
         ("completions", "# sort a list of numbers\nnumbers = [3, 1, 2]\n", {"temperature": 0.9, "min_p": 0.05, "seed": 5}),
         ("completions", "for i in range(10):", {})]

def ask(case, draft, max_tokens=48):
    endpoint, prompt, sampling = case
    body = {"model": "nano", "max_tokens": max_tokens, "temperature": 0.0, "draft": draft, **sampling}
    if endpoint == "chat":
        reply = post("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": prompt}]))
        return reply["choices"][0]["message"]["content"], reply["usage"]["completion_tokens"]
    reply = post("/v1/completions", dict(body, prompt=prompt))
    return reply["choices"][0]["text"], reply["usage"]["completion_tokens"]

def together(cases, draft, max_tokens=48):
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        return list(pool.map(lambda case: ask(case, draft, max_tokens), cases))

result = {}
for draft in ((True, False) if MODE == "exact" else ()):
    alone = result.setdefault("alone", [ask(case, False) for case in CASES])
    before = health()
    replies = together(CASES, draft)
    after = health()
    same = sum(a == b for a, b in zip(replies, alone))
    key = "concurrent_drafts" if draft else "concurrent_plain"
    result[key] = {"equal": same, "of": len(CASES), "drafts_verified": after["drafts_verified"] - before["drafts_verified"],
                   "drafts_accepted": after["drafts_accepted"] - before["drafts_accepted"]}
    print(f"8 concurrent, draft={draft}: {same}/{len(CASES)} equal to alone; drafts verified "
          f"{result[key]['drafts_verified']}, accepted {result[key]['drafts_accepted']}")

EVAL = [item["prompt"][:256] for item in json.load(open("models/nano/eval_prompts.json"))["code"]]

def eval_case(index, sampled):
    sampling = {"temperature": 0.8, "top_p": 0.95, "seed": 100 + index} if sampled else {}
    return ("completions", EVAL[index % len(EVAL)], sampling)

timings = {}
for sampled in ((False, True) if MODE == "speed" else ()):
    mode = "sampled" if sampled else "greedy"
    print(f"| {mode} streams | plain tok/s | drafts tok/s | drafts / plain | drafts verified | accepted |")
    print("|---|---|---|---|---|---|")
    for streams in ((1, 4, 8, 16) if not sampled else (1, 8)):
        cases = [eval_case(index, sampled) for index in range(streams)]
        before = health()
        for arm in ("plain", "drafts", "drafts", "plain"):
            start = time.time()
            replies = together(cases, arm == "drafts", 256)
            seconds = time.time() - start
            timings.setdefault(f"{mode}_{streams}_{arm}", []).append(sum(count for _, count in replies) / seconds)
        after = health()
        plain, drafts = max(timings[f"{mode}_{streams}_plain"]), max(timings[f"{mode}_{streams}_drafts"])
        print(f"| {streams} | {plain:.0f} | {drafts:.0f} | {drafts / plain:.2f}x | "
              f"{after['drafts_verified'] - before['drafts_verified']} | "
              f"{after['drafts_accepted'] - before['drafts_accepted']} |")

def first_text_ms(draft):
    """Milliseconds from sending a streamed request to its first chunk with text."""
    body = {"model": "nano", "prompt": EVAL[0], "max_tokens": 32, "temperature": 0.0, "draft": draft, "stream": True}
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    start = time.time()
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    first = None
    while first is None:
        line = response.readline()
        if not line:
            break
        if line.startswith(b"data: {") and json.loads(line[6:])["choices"][0]["text"]:
            first = (time.time() - start) * 1000
    response.read()
    connection.close()
    return first

for draft in ((False, True) if MODE == "speed" else ()):
    samples = sorted(first_text_ms(draft) for _ in range(5))
    timings[f"first_text_ms_{'drafts' if draft else 'plain'}"] = samples
    print(f"streamed, draft={draft}: first text after {samples[2]:.2f} ms (median of 5; {samples[0]:.2f}-{samples[-1]:.2f})")
result["tok_per_s"] = timings
result["health"] = health()
print(MODE, "server health:", json.dumps(result["health"]))
json.dump(result, open(os.path.join(os.environ["OUT"], f"serve17_cuda_{MODE}.json"), "w"), indent=1)
PY
stop_server
tail -2 "$SERVER_LOG" >>"$LOG"
done
