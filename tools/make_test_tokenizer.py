#!/usr/bin/env python3
"""Trains the small LFM2-style byte-level BPE tokenizer shipped in tests/golden/tokenizer/ from text on this machine.

Same shape as LiquidAI's LFM2 tokenizer (reference/lfm2.md §4): special tokens at LFM2's ids, the Llama-3 style split
regex (Isolated) followed by ByteLevel(use_regex=false), ignore_merges, a TemplateProcessing post-processor adding BOS
and a ByteLevel decoder; plus a tokenizer_config.json with an LFM2-style chat template.
Run: .venv/bin/python tools/make_test_tokenizer.py [--out tests/golden/tokenizer] [--vocab 6000]
"""
import argparse
import glob
import gzip
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LFM2_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL_TOKENS = ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|fim_pre|>", "<|fim_mid|>", "<|fim_suf|>",
                  "<|im_start|>", "<|im_end|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>",
                  "<|tool_call_end|>", "<|tool_response_start|>", "<|tool_response_end|>"]
SPECIAL_TOKENS += [f"<|reserved_{n}|>" for n in range(18)]

# Written for this project in the shape of LFM2's template: BOS, an optional system turn that also carries the tool
# list, every message as <|im_start|>role\n...<|im_end|>\n (tool results wrapped), then the generation prompt.
CHAT_TEMPLATE = """{{- bos_token -}}
{%- set ns = namespace(system_prompt="") -%}
{%- if messages and messages[0]["role"] == "system" -%}
    {%- set ns.system_prompt = messages[0]["content"] -%}
    {%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
    {%- set ns.system_prompt = ns.system_prompt ~ ("\\n" if ns.system_prompt else "") ~ "List of tools: <|tool_list_start|>[" -%}
    {%- for tool in tools -%}
        {%- if tool is not string -%}
            {%- set tool = tool | tojson -%}
        {%- endif -%}
        {%- set ns.system_prompt = ns.system_prompt ~ tool -%}
        {%- if not loop.last -%}
            {%- set ns.system_prompt = ns.system_prompt ~ ", " -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set ns.system_prompt = ns.system_prompt ~ "]<|tool_list_end|>" -%}
{%- endif -%}
{%- if ns.system_prompt -%}
    {{- "<|im_start|>system\\n" ~ ns.system_prompt ~ "<|im_end|>\\n" -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if message["role"] not in ["user", "assistant", "tool", "system"] -%}
        {{- raise_exception("unknown role: " ~ message["role"]) -}}
    {%- endif -%}
    {{- "<|im_start|>" ~ message["role"] ~ "\\n" -}}
    {%- set content = message["content"] -%}
    {%- if content is not string -%}
        {%- set content = content | tojson -%}
    {%- endif -%}
    {%- if message["role"] == "tool" -%}
        {%- set content = "<|tool_response_start|>" ~ content ~ "<|tool_response_end|>" -%}
    {%- endif -%}
    {{- content ~ "<|im_end|>\\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\\n" -}}
{%- endif -%}
"""


def corpus_files():
    files = sorted(glob.glob("/usr/lib/python3*/*.py"))[:400]
    files += sorted(glob.glob("/usr/share/common-licenses/*"))
    for lang in ["de", "fr", "es", "ru", "ja", "ko", "zh_CN", "zh_TW", "pl", "uk", "tr"]:
        files += sorted(glob.glob(f"/usr/share/man/{lang}/man1/*.gz"))[:60]
    files += sorted(glob.glob("/usr/share/man/man1/*.gz"))[:300]
    return [f for f in files if os.path.isfile(f)]


def read_texts():
    for path in corpus_files():
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as handle:
            yield handle.read().decode("utf-8", "replace")


def build(vocab_size):
    bpe = models.BPE(ignore_merges=True)
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LFM2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(read_texts(), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A", pair="<|startoftext|> $A <|startoftext|> $B",
        special_tokens=[("<|startoftext|>", 1)])
    return tokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/golden/tokenizer")
    parser.add_argument("--vocab", type=int, default=6000)
    args = parser.parse_args()
    tokenizer = build(args.vocab)
    for position, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == position, token
    os.makedirs(args.out, exist_ok=True)
    tokenizer.save(os.path.join(args.out, "tokenizer.json"))
    config = {
        "bos_token": "<|startoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|pad|>",
        "add_bos_token": True, "model_max_length": 32768, "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {str(tokenizer.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                                                  "rstrip": False, "single_word": False, "special": True}
                                 for t in SPECIAL_TOKENS},
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    print(f"wrote {args.out}: vocab {tokenizer.get_vocab_size()}")


if __name__ == "__main__":
    main()
