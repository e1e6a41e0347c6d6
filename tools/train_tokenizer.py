#!/usr/bin/env python3
"""Byte-level BPE tokenizer for the nano models, LFM2-style: LFM2's special tokens at LFM2's ids, LFM2's split
regex, ignore_merges, BOS added by the post-processor, and the LFM2 chat template in tokenizer_config.json.

  python tools/train_tokenizer.py --corpus WORK/corpus --out models/nano/target --vocab-size 8192

Special tokens (ids 0-31): 0 <|pad|>, 1 <|startoftext|> (BOS), 2 <|endoftext|>, 3-5 <|fim_pre|> <|fim_mid|>
<|fim_suf|>, 6 <|im_start|>, 7 <|im_end|> (EOS), 8-13 tool list / call / response start and end,
14 <|reserved_mask|> (the DSpark drafter's mask token), 15-31 <|reserved_0|> .. <|reserved_16|>.
"""
import argparse
import json
import os
import random

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|fim_pre|>", "<|fim_mid|>", "<|fim_suf|>",
            "<|im_start|>", "<|im_end|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>",
            "<|tool_call_end|>", "<|tool_response_start|>", "<|tool_response_end|>", "<|reserved_mask|>"] + \
           [f"<|reserved_{i}|>" for i in range(17)]
BOS, EOS, PAD = "<|startoftext|>", "<|im_end|>", "<|pad|>"

# LFM2's ChatML template: BOS; a system turn when there is a system message and/or tools; tool turns wrapped.
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


def render_chat(messages, add_generation_prompt=False):
    """Python twin of CHAT_TEMPLATE for plain string contents and no tools (checked against jinja in main)."""
    out, system = [BOS], ""
    if messages and messages[0]["role"] == "system":
        system, messages = messages[0]["content"], messages[1:]
    if system:
        out.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for m in messages:
        content = m["content"]
        if m["role"] == "tool":
            content = f"<|tool_response_start|>{content}<|tool_response_end|>"
        out.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def corpus_texts(corpus, sample_bytes, seed):
    """Training text for BPE: a fixed random sample of each corpus part, chat rendered with the template."""
    rng = random.Random(seed)
    for part in ("code", "prose", "chat"):
        path = os.path.join(corpus, f"{part}.jsonl")
        total = max(os.path.getsize(path), 1)
        keep = min(1.0, sample_bytes / 3 / total)
        with open(path) as f:
            for line in f:
                if rng.random() >= keep:
                    continue
                rec = json.loads(line)
                yield render_chat(rec["messages"]) if part == "chat" else rec["text"]


def build_tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False, ignore_merges=True))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def train(corpus, vocab_size, sample_bytes, seed):
    tok = build_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus_texts(corpus, sample_bytes, seed), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:0 $B:0",
                                                       special_tokens=[(BOS, 1)])
    state = json.loads(tok.to_str())
    state["model"]["ignore_merges"] = True  # keep LFM2's flag whatever the trainer did with the model
    return Tokenizer.from_str(json.dumps(state))


def tokenizer_config():
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for i, t in enumerate(SPECIALS)}
    return {"add_bos_token": True, "add_eos_token": False, "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
            "clean_up_tokenization_spaces": False, "model_max_length": 4096,
            "tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": decoder,
            "chat_template": CHAT_TEMPLATE}


def check(out_dir):
    """The saved files load in transformers, keep the ids, add one BOS, and the template equals render_chat."""
    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(out_dir)
    for i, s in enumerate(SPECIALS):
        assert t.convert_tokens_to_ids(s) == i, (s, i)
    assert t.bos_token_id == 1 and t.eos_token_id == 7 and t.pad_token_id == 0
    ids = t("def f(x):\n    return x + 1\n")["input_ids"]
    assert ids[0] == 1 and ids[1] != 1, ids[:4]
    assert t.decode(ids[1:]) == "def f(x):\n    return x + 1\n"
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}, {"role": "tool", "content": "42"}, {"role": "user", "content": "x"}]
    for m in (msgs, msgs[1:]):
        jinja = t.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
        assert jinja == render_chat(m, add_generation_prompt=True), (jinja, render_chat(m, True))
    tools = [{"name": "add", "parameters": {}}]
    text = t.apply_chat_template(msgs[1:2], tools=tools, tokenize=False)
    assert text.startswith("<|startoftext|><|im_start|>system\nList of tools: <|tool_list_start|>[{"), text
    chat_ids = t.apply_chat_template(msgs[1:3], tokenize=True)
    chat_ids = chat_ids["input_ids"] if isinstance(chat_ids, dict) or hasattr(chat_ids, "keys") else chat_ids
    assert chat_ids[:2] == [1, 6] and chat_ids.count(1) == 1, chat_ids[:8]
    return len(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--sample-mb", type=float, default=48, help="corpus bytes the BPE trainer reads")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    tok = train(args.corpus, args.vocab_size, args.sample_mb * (1 << 20), args.seed)
    if tok.get_vocab_size() != args.vocab_size:
        raise SystemExit(f"BPE stopped at {tok.get_vocab_size()} tokens, wanted {args.vocab_size}: corpus too small?")
    os.makedirs(args.out, exist_ok=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2, ensure_ascii=False)
        f.write("\n")
    size = check(args.out)
    print(json.dumps({"vocab_size": tok.get_vocab_size(), "loaded_len": size}))


if __name__ == "__main__":
    main()
