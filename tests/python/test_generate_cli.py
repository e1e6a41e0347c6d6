"""End to end: `lanespark generate` on the bundled nano pair prints the same reply with and without the drafter."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("LANESPARK_BIN", str(ROOT / "build" / "lanespark"))
TARGET = ROOT / "models" / "nano" / "target"
DRAFTER = ROOT / "models" / "nano" / "drafter"
PROMPT = "import os\ndef read_config(path):"


def generate(*extra):
    result = subprocess.run(
        [BIN, "generate", "--model", str(TARGET), "--prompt", PROMPT, "--max-tokens", "48", *extra],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout, result.stderr


@pytest.mark.parametrize("sampling", [[], ["--temperature", "0.8", "--top-p", "0.95", "--seed", "7"]],
                         ids=["greedy", "sampled"])
@pytest.mark.parametrize("bits", ["0", "8"])
def test_drafted_reply_equals_plain_reply(sampling, bits):
    plain, _ = generate(*sampling)
    # --draft-always: drafts reach the verifier whatever the timings say, so the comparison covers drafted rows.
    drafted, log = generate(*sampling, "--drafter", str(DRAFTER), "--drafter-bits", bits, "--draft-always")
    counts = re.search(r"drafting: \d+ rounds, (\d+) drafts verified, (\d+) accepted", log)
    assert counts and int(counts.group(1)) > 0, log  # drafts really reached the verifier
    if not sampling:
        assert int(counts.group(2)) > 0, log  # greedy code on the nano pair accepts most drafts
    assert drafted == plain
    assert len(plain.strip()) > 0


def test_drafter_bits_4_is_refused_by_name():
    result = subprocess.run([BIN, "generate", "--model", str(TARGET), "--prompt", "x", "--drafter", str(DRAFTER),
                             "--drafter-bits", "4"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "UnsupportedDraftBits" in result.stderr
