"""Writes the DSpark drafter goldens for the C++ parity tests (tests/golden/dspark/, format in its README.md).

  python tools/make_drafter_goldens.py --out tests/golden/dspark                 # tiny random target + drafter
  python tools/make_drafter_goldens.py --out tests/golden/dspark --nano models/nano   # also the bundled nano pair
                                                                   # (into --nano-out, tests/golden/dspark_nano)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.reference.blocks import target_embedding, target_taps  # noqa: E402
from tools.reference.dspark import DSparkDrafter  # noqa: E402
from tools.reference.scan import base_logits, keyed_gumbel, markov_scan  # noqa: E402
from tools.reference.tiny import random_drafter, tiny_drafter_config, tiny_target  # noqa: E402

SAMPLED_TEMPERATURE = 1.0
SAMPLED_SEED = 1234567


def block_outputs(drafter: DSparkDrafter, taps, anchor: int, embedding, dtype) -> tuple[dict, dict]:
    """Tensors and int lists of one block at anchor position p = len(taps), with the drafter in `dtype`."""
    model = drafter.to(dtype)
    emb = embedding.to(dtype)
    with torch.no_grad():
        context = model.context(taps[None])[0]
        hidden = model.block(taps, anchor, emb)[None]
        logits = base_logits(hidden, emb)
        anchors = torch.tensor([anchor])
        greedy = markov_scan(model, hidden, logits, anchors, temperatures=[1.0] * model.config.block_size)
        calibrated = markov_scan(model, hidden, logits, anchors)
        p, gamma = taps.shape[0], model.config.block_size
        noise = keyed_gumbel(SAMPLED_SEED, torch.arange(p + 1, p + 1 + gamma), model.config.vocab_size)[None]
        sampled = markov_scan(model, hidden, logits, anchors, SAMPLED_TEMPERATURE, noise)
        prev = torch.cat([anchors, greedy.tokens[0, :-1]])
        markov = logits[0] + model.markov_head.bias(model.markov_head.embed(prev))
    tensors = {
        "context": context.float(), "final_hidden": hidden[0].float(), "base_logits": logits[0],
        "markov_logits": markov, "confidence_logits": greedy.confidence_logits[0],
        "confidences_raw": greedy.confidences[0], "confidences": calibrated.confidences[0],
    }
    ints = {"greedy_picks": greedy.tokens[0].tolist(), "sampled_picks": sampled.tokens[0].tolist()}
    drafter.to(torch.float32)
    return tensors, ints


def write_cases(out: Path, drafter: DSparkDrafter, embedding, sequences, anchors, meta: dict) -> None:
    """One case per (sequence, anchor position): golden.json + golden.safetensors in `out`."""
    tensors, cases = {}, []
    tap_ids = drafter.config.target_layer_ids
    for name, (tokens, taps_full, p) in zip([f"case{i}" for i in range(len(anchors))],
                                            [(s, t, a) for (s, t), a in zip(sequences, anchors)]):
        taps = taps_full[:p].float()
        anchor = int(tokens[p])
        tensors[f"{name}.taps"] = taps.contiguous()
        case = {"name": name, "tokens": tokens[:p + 1].tolist(), "anchor_token": anchor, "anchor_position": p}
        for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            values, ints = block_outputs(drafter, taps, anchor, embedding, dtype)
            for key, value in values.items():
                tensors[f"{name}.{label}.{key}"] = value.float().contiguous()
            case[label] = ints
        cases.append(case)
    meta = dict(meta)
    meta.update({
        "format": 1, "torch": torch.__version__, "tap_layers": tap_ids, "block_size": drafter.config.block_size,
        "sampled": {"temperature": SAMPLED_TEMPERATURE, "seed": SAMPLED_SEED, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                    "key_position": "p + s + 1 (the position of the drafted token)"},
        "confidence_temperatures": drafter.config.confidence_temperatures, "cases": cases,
    })
    out.mkdir(parents=True, exist_ok=True)
    (out / "golden.json").write_text(json.dumps(meta, indent=1) + "\n")
    save_file(tensors, str(out / "golden.safetensors"), metadata={"format": "pt"})


def tiny_goldens(out: Path) -> None:
    """Tiny random target (fp32 checkpoint) and drafter (bf16 checkpoint, as LiquidAI ships), contexts of 1, 6, 23."""
    target = tiny_target(seed=11)
    target.save_pretrained(out / "target", safe_serialization=True)
    config = tiny_drafter_config(confidence_temperatures=[0.8, 1.1, 1.3, 1.6, 2.0])
    random_drafter(config, seed=12).save(out / "drafter")
    drafter = DSparkDrafter.load(out / "drafter")   # the bf16-stored weights, upcast: what the C++ drafter reads
    embedding = target_embedding(target).float()
    generator = torch.Generator().manual_seed(13)
    sequences = []
    for length in (2, 7, 24):
        tokens = torch.cat([torch.tensor([1]), torch.randint(8, config.vocab_size - 1, (length - 1,), generator=generator)])
        taps, _ = target_taps(target, tokens[None], config.target_layer_ids)
        sequences.append((tokens, taps[0]))
    write_cases(out, drafter, embedding, sequences, [1, 6, 23],
                {"target": "target", "drafter": "drafter", "note": "tiny random models"})


def nano_goldens(out: Path, models: Path, prompts: list[list[int]]) -> None:
    """The bundled pair on a few prompts (paths relative to the repository root)."""
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    drafter = DSparkDrafter.load(models / "drafter")
    embedding = target_embedding(target).float()
    sequences, anchors = [], []
    for tokens in prompts:
        tokens = torch.tensor(tokens)
        taps, _ = target_taps(target, tokens[None], drafter.config.target_layer_ids)
        sequences.append((tokens, taps[0]))
        anchors.append(len(tokens) - 1)
    write_cases(out, drafter, embedding, sequences, anchors,
                {"target": str(models / "target"), "drafter": str(models / "drafter"), "note": "bundled nano pair"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/golden/dspark")
    parser.add_argument("--nano", help="models/nano: also write goldens of the bundled pair into --nano-out")
    parser.add_argument("--nano-out", default="tests/golden/dspark_nano")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    out = Path(args.out)
    tiny_goldens(out)
    if args.nano:
        models = Path(args.nano)
        tokenizer_path = models / "target" / "tokenizer.json"
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        texts = ["def fibonacci(n):\n    if n < 2:\n        return n\n",
                 "<|im_start|>user\nWhat does the json module do?<|im_end|>\n<|im_start|>assistant\n"]
        prompts = [tokenizer.encode(t).ids for t in texts]
        nano_goldens(Path(args.nano_out), models, prompts)
    print(f"wrote goldens under {out}")


if __name__ == "__main__":
    main()
