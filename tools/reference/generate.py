"""Batched target generation (greedy, or keyed sampling as the engine draws) and prompt rendering for the nano pair."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .scan import keyed_gumbel


class KeyedSampling:
    """A transformers logits processor that turns greedy search into keyed sampling: row b's score for token i at
    absolute position q becomes logit_i / T + g(seed_b, q, i) (fp64), so argmax is the engine's keyed draw."""

    def __init__(self, seeds: torch.Tensor, pad_counts: torch.Tensor, temperature: float):
        self.seeds, self.pad_counts, self.temperature = seeds, pad_counts, temperature

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        positions = input_ids.shape[1] - self.pad_counts.to(input_ids.device)     # position of the token drawn now
        noise = keyed_gumbel(self.seeds.to(input_ids.device), positions, scores.shape[-1])
        return scores.double() / self.temperature + noise


@torch.no_grad()
def generate(target, prompts: list[list[int]], max_new_tokens: int, temperature: float, seeds: list[int],
             eos_token_id: int, pad_token_id: int = 0, batch_size: int = 256) -> list[list[int]]:
    """Responses (new tokens, cut after the first eos) for each prompt; prompts batched by length, left-padded."""
    from transformers import LogitsProcessorList

    device = next(target.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    responses: list[list[int]] = [[] for _ in prompts]
    for begin in range(0, len(order), batch_size):
        rows = order[begin:begin + batch_size]
        width = max(len(prompts[i]) for i in rows)
        pads = torch.tensor([width - len(prompts[i]) for i in rows])
        ids = torch.tensor([[pad_token_id] * int(p) + prompts[i] for i, p in zip(rows, pads)], device=device)
        mask = (torch.arange(width)[None] >= pads[:, None]).long().to(device)
        processors = LogitsProcessorList()
        if temperature > 0:
            processors.append(KeyedSampling(torch.tensor([seeds[i] for i in rows], dtype=torch.int64), pads, temperature))
        out = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                              logits_processor=processors, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
        for row, i in enumerate(rows):
            new = out[row, width:].tolist()
            if eos_token_id in new:
                new = new[:new.index(eos_token_id) + 1]
            responses[i] = new
    return responses


def load_tokenizer(target_dir: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(target_dir))


def chat_prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The chat template with the generation prompt (the template writes BOS itself)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def code_prompt_ids(tokenizer, text: str) -> list[int]:
    """BOS + the code text."""
    return tokenizer(text, add_special_tokens=True)["input_ids"]


def mask_token_id(tokenizer) -> int:
    """The reserved token the drafter uses as its mask: one named like '*mask*', else the last reserved token."""
    vocab = tokenizer.get_vocab()
    named = sorted(i for t, i in vocab.items() if "mask" in t.lower() and t.startswith("<|"))
    if named:
        return named[0]
    reserved = sorted(i for t, i in vocab.items() if t.startswith("<|reserved"))
    if not reserved:
        raise ValueError("tokenizer has no reserved token to use as the drafter's mask")
    return reserved[-1]


def eval_prompts(path: str | Path, tokenizer, max_prompt_tokens: int) -> dict[str, list[tuple[str, list[int]]]]:
    """models/nano/eval_prompts.json -> {"code": [(id, ids)], "chat": [(id, ids)]} (prompts cut to the last tokens)."""
    data = json.loads(Path(path).read_text())
    out = {}
    for category in ("code", "chat"):
        items = []
        for record in data.get(category, []):
            if category == "code":
                ids = code_prompt_ids(tokenizer, record["prompt"])
                ids = ids[:1] + ids[1:][-(max_prompt_tokens - 1):]
            else:
                ids = chat_prompt_ids(tokenizer, record["messages"])
                if len(ids) > max_prompt_tokens:
                    continue
            items.append((record.get("id", str(len(items))), ids))
        out[category] = items
    return out
