"""Parity of lanespark's tokenizer with the `tokenizers` package: every encode id for id, every decode and every
streamed decode byte for byte, on the shipped LFM2-style tokenizer and on variants that exercise other options."""
import copy
import json
import os
import random

import pytest
from tokenizers import AddedToken, Tokenizer

from text_bridge import GOLDEN_TOKENIZER, run_lines
from text_corpus import all_texts

TEXTS = all_texts()


def golden_spec():
    with open(os.path.join(GOLDEN_TOKENIZER, "tokenizer.json"), encoding="utf-8") as handle:
        return json.load(handle)


def write_variant(tmp_path, spec):
    """A tokenizer directory holding `spec` (a tokenizer.json dict) and the golden tokenizer_config.json."""
    directory = tmp_path / "tokenizer"
    directory.mkdir(exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    with open(os.path.join(GOLDEN_TOKENIZER, "tokenizer_config.json"), encoding="utf-8") as handle:
        (directory / "tokenizer_config.json").write_text(handle.read(), encoding="utf-8")
    return str(directory)


def check_parity(tokenizer_dir, texts):
    reference = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    requests = [{"hex": text.hex(), "add_special_tokens": index % 2 == 0} for index, text in enumerate(texts)]
    answers = run_lines(tokenizer_dir, "batch", requests)
    for text, request, answer in zip(texts, requests, answers):
        as_str = text.decode("utf-8", "replace")  # what a Python caller hands tokenizers for these bytes
        expected = reference.encode(as_str, add_special_tokens=request["add_special_tokens"]).ids
        assert answer.get("ids") == expected, f"encode differs for {text[:80]!r}"
        for skip, decoded_key, streamed_key in [(False, "decoded", "streamed"), (True, "decoded_skip", "streamed_skip")]:
            want = reference.decode(expected, skip_special_tokens=skip).encode("utf-8")
            assert bytes.fromhex(answer[decoded_key]) == want, f"decode(skip={skip}) differs for {text[:80]!r}"
            assert bytes.fromhex(answer[streamed_key]) == want, f"streamed decode(skip={skip}) differs for {text[:80]!r}"


def test_every_text_encodes_and_decodes_like_tokenizers_with_the_golden_tokenizer():
    check_parity(GOLDEN_TOKENIZER, TEXTS)


def test_random_id_sequences_decode_and_stream_like_tokenizers_even_when_they_split_characters():
    reference = Tokenizer.from_file(os.path.join(GOLDEN_TOKENIZER, "tokenizer.json"))
    rng = random.Random(5)
    vocab = reference.get_vocab_size()
    sequences = [[rng.randrange(vocab) for _ in range(rng.randrange(1, 40))] for _ in range(200)]
    sequences.append([vocab + 5, 3, vocab * 4])  # unknown ids vanish
    answers = run_lines(GOLDEN_TOKENIZER, "batch", [{"ids": ids} for ids in sequences])
    for ids, answer in zip(sequences, answers):
        for skip, decoded_key, streamed_key in [(False, "decoded", "streamed"), (True, "decoded_skip", "streamed_skip")]:
            want = reference.decode(ids, skip_special_tokens=skip).encode("utf-8")
            assert bytes.fromhex(answer[decoded_key]) == want, f"decode(skip={skip}) differs for {ids}"
            assert bytes.fromhex(answer[streamed_key]) == want, f"streamed decode(skip={skip}) differs for {ids}"


def test_merges_written_as_strings_encode_like_merges_written_as_pairs(tmp_path):
    spec = golden_spec()
    spec["model"]["merges"] = [f"{left} {right}" for left, right in spec["model"]["merges"]]
    check_parity(write_variant(tmp_path, spec), TEXTS[:150])


def test_without_ignore_merges_whole_words_go_through_bpe_like_tokenizers(tmp_path):
    spec = golden_spec()
    spec["model"]["ignore_merges"] = False
    check_parity(write_variant(tmp_path, spec), TEXTS)


def test_byte_level_with_gpt2_regex_and_prefix_space_matches_tokenizers(tmp_path):
    spec = golden_spec()
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    spec["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    check_parity(write_variant(tmp_path, spec), TEXTS)


@pytest.mark.parametrize("behavior", ["Removed", "MergedWithPrevious", "MergedWithNext", "Isolated"])
@pytest.mark.parametrize("invert", [False, True])
def test_split_behaviors_match_tokenizers(tmp_path, behavior, invert):
    spec = golden_spec()
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\s+|[,.]"}, "behavior": behavior, "invert": invert},
        {"type": "Split", "pattern": {"String": "e"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    check_parity(write_variant(tmp_path, spec), TEXTS[:120])


def test_added_tokens_with_strip_single_word_and_normalized_flags_match_tokenizers(tmp_path):
    reference = Tokenizer.from_file(os.path.join(GOLDEN_TOKENIZER, "tokenizer.json"))
    reference.add_tokens([AddedToken("hello world", lstrip=True, rstrip=True, normalized=False),
                          AddedToken("foo", single_word=True, normalized=False),
                          AddedToken("ing", normalized=True),
                          AddedToken("日本", lstrip=True, normalized=False)])
    reference.add_special_tokens([AddedToken("<tag>", lstrip=True, rstrip=False, special=True),
                                  AddedToken("[X]", rstrip=True, special=True, normalized=False)])
    directory = write_variant(tmp_path, json.loads(reference.to_str()))
    texts = [b"say hello world  now", b"  hello world", b"foo food foo_bar (foo) foo", b"singing ringing",
             b"x <tag>y   <tag>", b"[X]   z[X]", "日本語 日本  日本".encode(), b"hello worldhello world",
             b"\xe6\x97\xa5\xe6\x9c\xac foo"] + TEXTS[:60]
    check_parity(directory, texts)


def test_replace_prepend_and_strip_normalizers_match_tokenizers(tmp_path):
    spec = golden_spec()
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": False},
        {"type": "Replace", "pattern": {"String": "  "}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": "[0-9]"}, "content": "#"},
        {"type": "Prepend", "prepend": "_"}]}
    check_parity(write_variant(tmp_path, spec), TEXTS[:150])


def test_nfc_normalizer_matches_tokenizers_including_normalized_added_tokens(tmp_path):
    reference = Tokenizer.from_file(os.path.join(GOLDEN_TOKENIZER, "tokenizer.json"))
    spec = json.loads(reference.to_str())
    spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Prepend", "prepend": " "}]}
    spec["added_tokens"].append({"id": 6000, "content": "e\u0301t\u00e9", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": True, "special": False})
    combining = ["e\u0301t\u00e9 caf\u00e9 cafe\u0301", "A\u030a \u212b \u00c5", "\u1100\u1161\u11a8 \uac00",
                 "q\u0307\u0323 \u1e0b\u0323", "\u0b47\u0b3e \u0915\u093c", "a\u0328\u0301\u0302"]
    check_parity(write_variant(tmp_path, spec), [text.encode() for text in combining] + TEXTS)


def test_a_tokenizer_without_decoder_joins_tokens_with_spaces_like_tokenizers(tmp_path):
    spec = golden_spec()
    spec["decoder"] = None
    spec["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "Removed", "invert": False}
    ascii_texts = [text for text in TEXTS if text.isascii()][:80]
    check_parity(write_variant(tmp_path, spec), ascii_texts)


def test_split_regex_classes_agree_with_tokenizers_on_every_code_point_of_planes_0_to_3(tmp_path):
    spec = golden_spec()
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{L}|\p{N}|\s"}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    spec["model"]["ignore_merges"] = False
    everything = "".join(chr(point) for point in range(0x32400) if not 0xD800 <= point <= 0xDFFF)
    check_parity(write_variant(tmp_path, spec), [everything.encode("utf-8")])


def test_nfc_agrees_with_tokenizers_on_every_code_point_of_planes_0_and_1_between_combining_marks(tmp_path):
    spec = golden_spec()
    spec["normalizer"] = {"type": "NFC"}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    spec["model"]["ignore_merges"] = False
    text = "".join("\u0301" + chr(point) + "\u0334\u0323" for point in range(0x20000) if not 0xD800 <= point <= 0xDFFF)
    check_parity(write_variant(tmp_path, spec), [text.encode("utf-8")])
