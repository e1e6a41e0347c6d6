"""Measures the nano drafter's acceptance on the held-out prompts with the reference at gamma = block_size.

  python tools/eval_acceptance.py --target models/nano/target --drafter models/nano/drafter \
      --prompts models/nano/eval_prompts.json --report OUT/eval.json --markdown OUT/eval.md

For each prompt the target generates its continuation (greedy, and keyed-sampled at T = 1 with seed 1000 + index);
then a decode is replayed round by round (reference/simulate.py): a round keeps drafts while each equals the target's
draw (greedy: argmax; sampled: the keyed draw, drafts picked with the same key), plus the bonus token. Reported per
category and mode: mean accepted length per round (bonus included), per-position acceptance (slot k kept given
slots < k kept, over the replayed rounds), and the confidence head's ECE (cumulative survival over every anchor)
before and after the config's STS temperatures.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.reference.blocks import target_embedding  # noqa: E402
from tools.reference.dspark import DSparkDrafter  # noqa: E402
from tools.reference.generate import eval_prompts, generate, load_tokenizer  # noqa: E402
from tools.reference.simulate import (chain_rounds, cumulative_confidence, expected_calibration_error,  # noqa: E402
                                      sequence_drafts, survival_targets)

MODES = {"greedy": 0.0, "sampled_t1": 1.0}


def evaluate(target, drafter, tokenizer, prompts, temperature: float, max_new_tokens: int, embedding) -> dict:
    gamma = drafter.config.block_size
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    seeds = [1000 + i for i in range(len(prompts))]
    responses = generate(target, [ids for _, ids in prompts], max_new_tokens, temperature, seeds, eos,
                         batch_size=256)
    rounds, zs, survival, truncated, tokens = [], [], [], 0, 0
    for (_, ids), response, seed in zip(prompts, responses, seeds):
        drafts, length = sequence_drafts(target, drafter, ids + response, len(ids), embedding, temperature, seed)
        truncated += int(length < len(ids) + len(response))
        tokens += length - len(ids)
        rounds += chain_rounds(drafts, len(ids))
        zs.append(drafts.confidence_logits.cpu())
        survival.append(survival_targets(drafts).cpu())
    z, survival = torch.cat(zs), torch.cat(survival)
    kept = torch.tensor(rounds, dtype=torch.float32)
    by_position = []
    for k in range(gamma):
        reached = kept >= k
        by_position.append(round(float((kept[reached] > k).float().mean()), 4) if reached.any() else None)
    temps = drafter.config.confidence_temperatures or [1.0] * gamma
    return {
        "prompts": len(prompts), "response_tokens": tokens, "rounds": len(rounds),
        "sequences_cut_at_a_near_tie": truncated,
        "mean_accepted_length": round(float(kept.mean() + 1), 3) if len(rounds) else None,
        "acceptance_by_position": by_position,
        "ece_before_sts": round(expected_calibration_error(cumulative_confidence(z, [1.0] * gamma), survival), 4),
        "ece_after_sts": round(expected_calibration_error(cumulative_confidence(z, temps), survival), 4),
        "anchors": int(z.shape[0]),
    }


def markdown(results: dict, gamma: int) -> str:
    lines = [f"| category | mode | prompts | rounds | mean accepted length (of {gamma + 1}) | acceptance by position "
             "(slot k kept given k-1 kept) | ECE before STS | ECE after STS |", "|---|---|---|---|---|---|---|---|"]
    for category, modes in results.items():
        for mode, r in modes.items():
            positions = " ".join("-" if v is None else f"{v:.2f}" for v in r["acceptance_by_position"])
            lines.append(f"| {category} | {mode} | {r['prompts']} | {r['rounds']} | {r['mean_accepted_length']} | "
                         f"{positions} | {r['ece_before_sts']} | {r['ece_after_sts']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="models/nano/target")
    parser.add_argument("--drafter", default="models/nano/drafter")
    parser.add_argument("--prompts", default="models/nano/eval_prompts.json")
    parser.add_argument("--max-prompt-tokens", type=int, default=320)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--report", default=None)
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    tokenizer = load_tokenizer(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).to(args.device).eval()
    drafter = DSparkDrafter.load(args.drafter, device=args.device).eval()
    embedding = target_embedding(target).float()
    prompts = eval_prompts(args.prompts, tokenizer, args.max_prompt_tokens)
    results = {category: {mode: evaluate(target, drafter, tokenizer, items, temperature, args.max_new_tokens, embedding)
                          for mode, temperature in MODES.items()}
               for category, items in prompts.items()}
    print(json.dumps(results))
    table = markdown(results, drafter.config.block_size)
    print(table)
    if args.report:
        Path(args.report).write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)


if __name__ == "__main__":
    main()
