"""Runs `lanespark tokenize --batch/--chat` on JSON lines and returns its answers (the C++ side of the parity tests)."""
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN_TOKENIZER = os.path.join(ROOT, "tests", "golden", "tokenizer")


def lanespark_bin():
    return os.environ.get("LANESPARK_BIN", os.path.join(ROOT, "build", "lanespark"))


def run_lines(tokenizer_dir, mode, requests):
    """Sends each request dict as one JSON line to `lanespark tokenize --<mode>` and returns the answer dicts."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as handle:
        for request in requests:
            handle.write(json.dumps(request, ensure_ascii=False) + "\n")
        path = handle.name
    try:
        result = subprocess.run([lanespark_bin(), "tokenize", "--tokenizer", tokenizer_dir, f"--{mode}", path],
                                capture_output=True, timeout=300)
    finally:
        os.unlink(path)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    answers = [json.loads(line) for line in result.stdout.decode("utf-8").splitlines()]
    assert len(answers) == len(requests)
    return answers
