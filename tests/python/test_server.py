"""End to end: `lanespark serve` on the bundled nano pair through the official openai client.

The oracle is each request alone on a server without a drafter: the same text must come back drafted or not,
streamed or not, alone or among concurrent requests (greedy, and sampled with a seed)."""
import concurrent.futures
import http.client
import json
import os
import pathlib
import re
import socket
import subprocess
import threading
import time

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("LANESPARK_BIN", str(ROOT / "build" / "lanespark"))
TARGET = ROOT / "models" / "nano" / "target"
DRAFTER = ROOT / "models" / "nano" / "drafter"
MODEL = "nano"

# (endpoint, prompt, sampling): a mix of chat and text, greedy and seeded sampling.
CASES = [
    ("completions", "import os\ndef read_config(path):", {}),
    ("chat", "Write a Python function that reverses a list.", {}),
    ("completions", "class Stack:\n    def __init__(self):", {"temperature": 0.8, "top_p": 0.95, "seed": 7}),
    ("chat", "What is a hash map?", {"temperature": 0.7, "seed": 11}),
    ("completions", "def fibonacci(n):", {"temperature": 1.0, "top_k": 20, "seed": 3}),
    ("chat", "Explain recursion in one sentence.", {}),
    ("completions", "# sort a list of numbers\nnumbers = [3, 1, 2]\n", {"temperature": 0.9, "min_p": 0.05, "seed": 5}),
    ("completions", "for i in range(10):", {}),
]
MAX_TOKENS = 40


class Server:
    """One `lanespark serve` process on a free port; stopped with SIGTERM, which must end it cleanly."""

    def __init__(self, *extra):
        self.process = subprocess.Popen(
            [BIN, "serve", "--model", str(TARGET), "--port", "0", "--served-model-name", MODEL, "--threads", "2",
             "--max-streams", "8", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 120
        self.port = None
        while self.port is None:
            line = self.process.stderr.readline()
            if not line or time.time() > deadline:
                raise RuntimeError("server did not start:\n" + "".join(self.log) + line)
            self.log.append(line)
            found = re.search(r"listening on http://[^:]+:(\d+)", line)
            if found:
                self.port = int(found.group(1))
        self.drain = threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True)
        self.drain.start()
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none", max_retries=0,
                                    timeout=60)

    def raw(self, method, path, body=None):
        """(status, parsed JSON) of one request sent without the openai client."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        return response.status, json.loads(payload)

    def stop(self):
        self.process.terminate()
        code = self.process.wait(timeout=30)
        assert code == 0, "".join(self.log)


@pytest.fixture(scope="module")
def plain():
    server = Server("--api-key", "none")  # the openai clients of these tests send api_key "none"
    yield server
    server.stop()


@pytest.fixture(scope="module")
def drafted():
    # --draft-always: drafts reach the verifier whatever the timings say, so exactness covers drafted rows.
    server = Server("--drafter", str(DRAFTER), "--draft-always")
    yield server
    server.stop()


def ask(server, case, stream=False, **extra):
    """(text, finish_reason, completion_tokens) of one request."""
    endpoint, prompt, sampling = case
    body = dict(sampling)
    body.update(extra)
    # Extensions travel in extra_body (the openai client has no arguments for them).
    extensions = {key: body.pop(key) for key in ("top_k", "min_p", "draft", "max_draft") if key in body}
    if "temperature" not in body:
        body["temperature"] = 0.0
    kwargs = dict(model=MODEL, max_tokens=MAX_TOKENS, stream=stream, extra_body=extensions or None, **body)
    if endpoint == "chat":
        call = lambda: server.client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kwargs)
        piece = lambda choice: choice.delta.content or "" if stream else choice.message.content
    else:
        call = lambda: server.client.completions.create(prompt=prompt, **kwargs)
        piece = lambda choice: choice.text
    if not stream:
        reply = call()
        return piece(reply.choices[0]), reply.choices[0].finish_reason, reply.usage.completion_tokens
    text, finish = "", None
    for chunk in call():
        for choice in chunk.choices:
            text += piece(choice)
            finish = choice.finish_reason or finish
    return text, finish, None


@pytest.fixture(scope="module")
def alone(plain):
    """Each case alone, without a drafter: the oracle."""
    return [ask(plain, case) for case in CASES]


def test_models_and_health(drafted):
    assert [model.id for model in drafted.client.models.list().data] == [MODEL]
    assert drafted.client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        drafted.client.models.retrieve("gpt-4")
    status, body = drafted.raw("GET", "/health")
    assert status == 200 and body["status"] == "ok"
    status, body = drafted.raw("DELETE", "/v1/models")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"


def test_an_api_key_is_required_when_set(plain, drafted):
    status, body = plain.raw("GET", "/v1/models")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert plain.raw("GET", "/health")[0] == 200  # health checks need no key
    wrong = openai.OpenAI(base_url=f"http://127.0.0.1:{plain.port}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert drafted.raw("GET", "/v1/models")[0] == 200  # no --api-key: no check


def test_replies_are_real_text_with_usage(alone):
    for text, finish, tokens in alone:
        assert finish in ("stop", "length")
        assert 0 < tokens <= MAX_TOKENS
        assert text.strip()


@pytest.mark.parametrize("draft", [True, False], ids=["drafts", "no-drafts"])
def test_eight_concurrent_requests_equal_each_alone(drafted, alone, draft):
    with concurrent.futures.ThreadPoolExecutor(len(CASES)) as pool:
        before = drafted.raw("GET", "/health")[1]
        replies = list(pool.map(lambda case: ask(drafted, case, draft=draft), CASES))
        after = drafted.raw("GET", "/health")[1]
    assert replies == alone
    # Drafted rows really reached the verifier (and some were kept), or none did with draft: false.
    if draft:
        assert after["drafts_accepted"] > before["drafts_accepted"], (before, after)
    else:
        assert after["drafts_verified"] == before["drafts_verified"], (before, after)


def test_requests_beyond_max_streams_wait_their_turn_and_get_the_same_text(drafted, alone):
    # Both servers run --max-streams 8: 16 at once means 8 wait in the queue.
    with concurrent.futures.ThreadPoolExecutor(2 * len(CASES)) as pool:
        replies = list(pool.map(lambda case: ask(drafted, case), CASES + CASES))
    assert replies == alone + alone


def test_streamed_text_equals_the_whole_reply(drafted, alone):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        streamed = list(pool.map(lambda case: ask(drafted, case, stream=True), CASES[:4]))
    assert [(text, finish) for text, finish, _ in streamed] == [(text, finish) for text, finish, _ in alone[:4]]


def test_a_stop_string_ends_the_reply_before_it(drafted, alone):
    text = alone[0][0]
    stop = text[len(text) // 2:len(text) // 2 + 3]
    assert stop and stop in text
    expected = text[:text.index(stop)]
    for stream in (False, True):
        reply, finish, _ = ask(drafted, CASES[0], stream=stream, stop=[stop, "never appears"])
        assert (reply, finish) == (expected, "stop")


def test_a_multi_turn_chat_with_a_system_message_renders_through_the_template(drafted):
    messages = [{"role": "system", "content": "You write Python."},
                {"role": "user", "content": "Reverse a list."},
                {"role": "assistant", "content": "items[::-1]"},
                {"role": "user", "content": [{"type": "text", "text": "And a string?"}]}]
    reply = drafted.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    # The system message and every turn reach the prompt (a one-turn chat is much shorter).
    single = drafted.client.chat.completions.create(model=MODEL, messages=messages[-1:], max_tokens=8, temperature=0)
    assert reply.usage.prompt_tokens > single.usage.prompt_tokens + 10
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_usage_chunk_when_asked(drafted):
    chunks = list(drafted.client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 5
    assert chunks[0].choices[0].delta.role == "assistant"


BAD_REQUESTS = [
    ("/v1/chat/completions", b"{not json", 400, None),
    ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": "hi"}, 400, "messages"),
    ("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "n"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1},
     400, "max_tokens"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": "x"},
     400, "temperature"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logprobs": True},
     400, "logprobs"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                              "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    ("/v1/completions", {"model": MODEL, "prompt": "word " * 5000}, 400, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 5000}, 400, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": [1, 99999999]}, 400, "prompt"),
    ("/v1/nothing", {}, 404, None),
]


def test_every_bad_request_gets_the_error_shape_and_the_server_keeps_answering(drafted, alone):
    for path, body, status, param in BAD_REQUESTS:
        got, reply = drafted.raw("POST", path, body)
        assert got == status, (path, body, reply)
        assert set(reply["error"]) == {"message", "type", "param", "code"}, reply
        assert reply["error"]["param"] == param, reply
    with pytest.raises(openai.BadRequestError):
        drafted.client.chat.completions.create(model=MODEL, messages=[], max_tokens=5)
    with pytest.raises(openai.NotFoundError):
        drafted.client.completions.create(model="other", prompt="x", max_tokens=5)
    assert ask(drafted, CASES[0]) == alone[0]


def test_a_client_that_drops_a_stream_cancels_it(plain, drafted, alone):
    request = dict(model=MODEL, prompt="def main():", max_tokens=2000, temperature=0)
    # Left running, the stream would generate all 2000 tokens (the whole reply runs to max_tokens).
    assert plain.client.completions.create(**request).usage.completion_tokens == 2000
    before = drafted.raw("GET", "/health")[1]
    stream = drafted.client.completions.create(stream=True, **request)
    for count, _ in enumerate(stream):
        if count == 2:
            break
    stream.close()
    deadline = time.time() + 20
    while drafted.raw("GET", "/health")[1]["open_requests"] != 0:
        assert time.time() < deadline, "the dropped stream is still generating"
        time.sleep(0.02)
    after = drafted.raw("GET", "/health")[1]
    assert after["tokens_generated"] - before["tokens_generated"] < 1000, (before, after)
    assert ask(drafted, CASES[5]) == alone[5]


def exchange(server, data):
    """The raw bytes the server answers to `data` on a fresh connection (read until it closes)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(data)
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    return reply


@pytest.mark.parametrize("data", [
    b"NOT HTTP AT ALL\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nContent-Length: lots\r\n\r\n",
], ids=["request-line", "chunked-body", "content-length"])
def test_malformed_http_gets_a_400_in_the_error_shape(drafted, data):
    reply = exchange(drafted, data)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), reply
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    assert drafted.raw("GET", "/health")[0] == 200


def test_a_body_over_the_limit_gets_a_413_before_it_is_read(drafted):
    reply = exchange(drafted, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), reply
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    assert drafted.raw("GET", "/health")[0] == 200


def test_one_connection_carries_several_requests(drafted):
    body = json.dumps({"model": MODEL, "prompt": "x = ", "max_tokens": 3, "temperature": 0}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    closing = request.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
    reply = exchange(drafted, request + request + closing)  # pipelined; the last asks to close
    assert reply.count(b"HTTP/1.1 200 OK") == 3, reply
    assert reply.count(b"Connection: close") == 1


def refusal(*args):
    """(exit code, stderr) of a `lanespark serve` that must stop before serving."""
    result = subprocess.run([BIN, "serve", "--model", str(TARGET), *args], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stderr


@pytest.mark.parametrize("args, name", [
    (["--port", "70000"], "InvalidArgument"),
    (["--threads", "0"], "InvalidArgument"),
    (["--device", "tpu"], "InvalidArgument"),
    (["--drafter", str(DRAFTER), "--drafter-bits", "4"], "UnsupportedDraftBits"),
    (["--kv-pages", "64"], "InvalidArgument"),  # the CPU cache has no fixed pool to size
    (["--kv-pages", "-1"], "InvalidArgument"),
], ids=["port", "threads", "device", "drafter-bits", "kv-pages-on-cpu", "kv-pages-negative"])
def test_bad_flags_are_refused_by_name(args, name):
    code, log = refusal(*args)
    assert code != 0 and name in log, log


def test_a_model_without_a_tokenizer_is_refused_before_its_weights_load(tmp_path):
    (tmp_path / "config.json").write_text((TARGET / "config.json").read_text())
    result = subprocess.run([BIN, "serve", "--model", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "NotFound" in result.stderr and "tokenizer.json" in result.stderr


def test_a_taken_port_is_refused_by_name_before_the_model_loads():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, log = refusal("--port", str(taken.getsockname()[1]), "--drafter", str(DRAFTER))
    assert code == 1 and "IoError" in log and "cannot listen" in log, log
    assert "drafter:" not in log, log  # load_models prints it once the drafter is loaded
