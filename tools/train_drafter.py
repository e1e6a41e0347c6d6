"""Trains the nano DSpark drafter on responses the nano target regenerates (reference/dspark.md §5).

  python tools/train_drafter.py --target models/nano/target --work WORK/drafter --out models/nano/drafter --log-dir OUT

Stages: (1) prompts from the corpus or straight from its Python sources (code windows and chat conversations cut at
a user turn; corpus.py's held-out files excluded), (2) the target's own
continuations, half greedy and half keyed-sampled at T = 1 (WORK/regen.pt; a held-out slice is kept for
calibration), (3) training: target frozen (taps + teacher logits online), DSpark loss 0.1 CE + 0.9 L1 + 1.0 BCE
(confidence) with position weights exp(-(k-1)/4), Markov head teacher-forced, shared embedding/head frozen.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.reference.blocks import multi_block_hidden, target_embedding, target_taps  # noqa: E402
from tools.reference.dspark import DSparkDrafter  # noqa: E402
from tools.reference.dspark_config import DSparkConfig, evenly_spaced_taps  # noqa: E402
from tools.reference.generate import (chat_prompt_ids, code_prompt_ids, generate, load_tokenizer,  # noqa: E402
                                      mask_token_id)

LOSS_DECAY = 4.0


def read_jsonl(path: Path, limit: int, rng: random.Random) -> list[dict]:
    """Up to `limit` records, sampled uniformly (reservoir) in a fixed order."""
    sample = []
    with open(path) as f:
        for index, line in enumerate(f):
            if len(sample) < limit:
                sample.append(line)
            else:
                j = rng.randrange(index + 1)
                if j < limit:
                    sample[j] = line
    return [json.loads(line) for line in sample]


def corpus_prompts(corpus: Path, tokenizer, count: int, max_prompt_tokens: int, seed: int) -> list[dict]:
    """From tools/corpus.py's output: half code (a window of a file), half chat (a conversation up to a user turn)."""
    rng = random.Random(seed)
    code = [r["text"] for r in read_jsonl(corpus / "code.jsonl", count // 2, rng)]
    chats = [r["messages"] for r in read_jsonl(corpus / "chat.jsonl", count - count // 2, rng)]
    return render_prompts(tokenizer, code, chats, max_prompt_tokens, rng)


def python_prompts(tokenizer, count: int, max_prompt_tokens: int, seed: int, workers: int) -> list[dict]:
    """The same sources as the corpus without writing it: Python files (not held out, in corpus.py's hash order)
    give code windows and, through corpus.py's conversation builder, chat prompts about their documented objects."""
    import multiprocessing

    from tools import corpus

    files = [it for root in corpus.python_roots() for it in corpus.walk_files(root, lambda n: n.endswith(".py"))]
    files = sorted((it for it in files if not corpus.held_out(it[1])), key=lambda it: (corpus.h64(it[1]), it[1]))
    code, chats = [], []
    with multiprocessing.Pool(workers) as pool:
        # Drain every result rather than terminate the pool with tasks in flight (corpus.py does the same): a busy
        # pool killed this way left defunct workers and hung a 2-GPU run here for its whole 600 s budget.
        for result in pool.imap(corpus.parse_python, files, chunksize=32):
            if len(code) >= count // 2 and len(chats) >= count - count // 2:
                continue
            if result is None:
                continue
            rel, text, module, objects = result
            file_rng = random.Random(corpus.h64(rel) ^ seed)
            if len(code) < count // 2:
                code.append(text)
            if len(chats) < count - count // 2:
                chats += [c["messages"] for c in corpus.conversations(file_rng, module, objects)[:2]]
    return render_prompts(tokenizer, code, chats, max_prompt_tokens, random.Random(seed))


def render_prompts(tokenizer, code: list[str], chats: list[list[dict]], max_prompt_tokens: int, rng) -> list[dict]:
    """Code: BOS + up to 30 lines ending at a random line (cut to the last tokens). Chat: the template up to a
    random user turn, with the generation prompt (longer ones dropped)."""
    prompts = []
    for text in code:
        lines = text.split("\n")
        if len(lines) < 8:
            continue
        end = rng.randrange(4, len(lines) - 2)
        ids = code_prompt_ids(tokenizer, "\n".join(lines[max(0, end - 30):end]) + "\n")
        prompts.append({"category": "code", "ids": ids[:1] + ids[1:][-(max_prompt_tokens - 1):]})
    for messages in chats:
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if not users:
            continue
        ids = chat_prompt_ids(tokenizer, messages[:rng.choice(users) + 1])
        if len(ids) <= max_prompt_tokens:
            prompts.append({"category": "chat", "ids": ids})
    rng.shuffle(prompts)
    return prompts


def regenerate(target, tokenizer, prompts: list[dict], max_new_tokens: int, batch_size: int, seed: int) -> list[dict]:
    """Even prompts greedy, odd prompts keyed-sampled at T = 1 with seed + index."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sequences = []
    for temperature, parity in ((0.0, 0), (1.0, 1)):
        chosen = [(i, p) for i, p in enumerate(prompts) if i % 2 == parity]
        seeds = [seed + i for i, _ in chosen]
        responses = generate(target, [p["ids"] for _, p in chosen], max_new_tokens, temperature, seeds, eos,
                             batch_size=batch_size)
        for (i, p), s, response in zip(chosen, seeds, responses):
            sequences.append({"ids": p["ids"] + response, "prompt_length": len(p["ids"]), "category": p["category"],
                              "temperature": temperature, "seed": s})
    return sequences


def make_batch(sequences: list[dict], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded tokens [B, S], lengths [B], prompt lengths [B]."""
    width = max(len(s["ids"]) for s in sequences)
    tokens = torch.zeros(len(sequences), width, dtype=torch.long)
    for row, s in enumerate(sequences):
        tokens[row, :len(s["ids"])] = torch.tensor(s["ids"])
    lengths = torch.tensor([len(s["ids"]) for s in sequences])
    prompt_lengths = torch.tensor([s["prompt_length"] for s in sequences])
    return tokens.to(device), lengths.to(device), prompt_lengths.to(device)


def sample_anchors(lengths, prompt_lengths, width: int, count: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` anchors per row among response positions a with a+1 < length: positions [B, A], valid [B, A]."""
    positions = torch.arange(width, device=lengths.device)[None]
    allowed = (positions >= prompt_lengths[:, None]) & (positions + 1 < lengths[:, None])
    scores = torch.rand(allowed.shape, generator=generator, device=lengths.device).masked_fill(~allowed, -1.0)
    count = min(count, width)
    values, anchors = torch.topk(scores, count, dim=1)
    return anchors, values >= 0


def dspark_loss(drafter: DSparkDrafter, hidden, embedding, tokens, lengths, anchors, valid, teacher_logits,
                with_metrics: bool = True):
    """The DSpark loss of blocks hidden [B, A, gamma, d]; returns (loss, metrics or None)."""
    gamma = drafter.config.block_size
    device = tokens.device
    width = tokens.shape[1]
    slots = torch.arange(gamma, device=device)
    label_positions = anchors[..., None] + slots + 1                                    # [B, A, gamma]
    slot_valid = valid[..., None] & (label_positions < lengths[:, None, None])
    slot_valid = torch.cumprod(slot_valid.long(), dim=-1).bool()                         # contiguous prefix
    safe = label_positions.clamp(max=width - 1)
    batch_index = torch.arange(tokens.shape[0], device=device)[:, None, None]
    labels = tokens[batch_index, safe]                                                  # x*_{a+s+1}
    prev = tokens[batch_index, safe - 1]                                                # anchor, then x*_{a+s}
    teacher = torch.softmax(teacher_logits[batch_index, safe - 1], dim=-1)              # target's p for slot s
    e = drafter.markov_head.embed(prev)                                                 # [B, A, gamma, r] fp32
    logits = hidden.float() @ embedding.float().t() + drafter.markov_head.bias(e)       # teacher-forced Markov
    log_q = torch.log_softmax(logits, dim=-1)
    ce = -log_q.gather(-1, labels[..., None])[..., 0]
    l1 = (log_q.exp() - teacher).abs().sum(-1)
    accept = (1 - 0.5 * l1).clamp(0, 1).detach()
    z = drafter.confidence_head.logit(hidden, e)
    bce = F.binary_cross_entropy_with_logits(z, accept, reduction="none")
    weights = torch.exp(-slots.float() / LOSS_DECAY) * slot_valid.float()
    norm = weights.sum().clamp(min=1e-6)
    parts = {name: (value * weights).sum() / norm for name, value in (("ce", ce), ("l1", l1), ("bce", bce))}
    loss = 0.1 * parts["ce"] + 0.9 * parts["l1"] + 1.0 * parts["bce"]
    if not with_metrics:
        return loss, None
    with torch.no_grad():
        full = slot_valid.all(-1)
        tau = 1 + torch.cumprod(accept, dim=-1).sum(-1)
        greedy_hit = (logits.argmax(-1) == teacher.argmax(-1)).float()
        metrics = {k: float(v) for k, v in parts.items()}
        metrics["tau"] = float(tau[full].mean()) if full.any() else float("nan")
        metrics["greedy_match_by_slot"] = [round(float(greedy_hit[..., s][slot_valid[..., s]].mean()), 4)
                                           for s in range(gamma)]
    return loss, metrics


def drafter_config(target_config, tokenizer, args) -> DSparkConfig:
    hidden = target_config.hidden_size
    heads = max(1, hidden // 64)
    return DSparkConfig(
        hidden_size=hidden, num_hidden_layers=args.layers, num_attention_heads=heads,
        num_key_value_heads=args.kv_heads if heads % args.kv_heads == 0 else 1, head_dim=64, intermediate_size=args.ffn_mult * hidden,
        vocab_size=target_config.vocab_size, block_size=args.block_size, mask_token_id=mask_token_id(tokenizer),
        target_layer_ids=evenly_spaced_taps(target_config.num_hidden_layers, args.taps),
        num_target_layers=target_config.num_hidden_layers, markov_rank=args.rank, rope_theta=args.rope_theta,
        rms_norm_eps=target_config.norm_eps, max_position_embeddings=target_config.max_position_embeddings,
    )


def train(args, target, tokenizer, sequences: list[dict], log) -> DSparkDrafter:
    device = args.device
    torch.manual_seed(args.seed)
    if args.init:
        # Continue a trained drafter (its own config: layers, block size, taps) on this run's data and schedule.
        drafter = DSparkDrafter.load(args.init, device=device)
        config = drafter.config
        config.confidence_temperatures = None  # fitted again by calibrate_confidence.py for the new weights
    else:
        config = drafter_config(target.config, tokenizer, args)
        drafter = DSparkDrafter(config).to(device)
    embedding = target_embedding(target).float()
    params = sum(p.numel() for p in drafter.parameters())
    log({"event": "drafter", "params": params, "init": args.init, "config": config.to_json_dict()})
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, int(0.04 * args.steps))

    def schedule(step: int, elapsed: float) -> float:
        """Warmup 4 %, then cosine to 10 % over whichever budget (steps or seconds) runs out first."""
        progress = min(1.0, max(step / args.steps, elapsed / args.max_seconds))
        return min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    rng = random.Random(args.seed)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    order: list[int] = []
    start = time.time()
    step = 0
    for step in range(args.steps):
        if not order:
            order = list(range(len(sequences)))
            rng.shuffle(order)
        rows = [sequences[order.pop()] for _ in range(min(args.batch, len(order)))]
        tokens, lengths, prompt_lengths = make_batch(rows, device)
        with torch.no_grad():
            taps, teacher_logits = target_taps(target, tokens, config.target_layer_ids)
        anchors, valid = sample_anchors(lengths, prompt_lengths, tokens.shape[1], args.anchors, generator)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=args.bf16):
            hidden = multi_block_hidden(drafter, taps.float(), tokens, anchors, embedding, eager=False)
        logging = step % args.log_every == 0 or step == args.steps - 1
        loss, metrics = dspark_loss(drafter, hidden, embedding, tokens, lengths, anchors, valid, teacher_logits, logging)
        for group in optimizer.param_groups:
            group["lr"] = args.lr * schedule(step, time.time() - start)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        if logging:
            log({"event": "step", "step": step, "seconds": round(time.time() - start, 1), "lr": optimizer.param_groups[0]["lr"],
                 "loss": float(loss.detach()), **metrics})
        if time.time() - start > args.max_seconds:
            log({"event": "stopped_by_time", "step": step})
            break
    log({"event": "trained", "steps": step + 1, "seconds": round(time.time() - start, 1)})
    return drafter.float().cpu().eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="models/nano/target")
    parser.add_argument("--corpus", default=None, help="code.jsonl + chat.jsonl from tools/corpus.py; without it the "
                        "prompts come straight from the Python sources corpus.py reads (same held-out split)")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--work", required=True, help="scratch directory (regen.pt), not checked in")
    parser.add_argument("--out", default="models/nano/drafter")
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--prompts", type=int, default=20480)
    parser.add_argument("--max-prompt-tokens", type=int, default=320)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--gen-batch", type=int, default=2048)
    parser.add_argument("--calibration-fraction", type=float, default=0.04)
    parser.add_argument("--init", default=None, help="a trained drafter directory to continue from (its config wins "
                        "over --layers/--ffn-mult/...)")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--ffn-mult", type=int, default=3)
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--taps", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=7)
    parser.add_argument("--rope-theta", type=float, default=1e6)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--max-seconds", type=float, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--anchors", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1.5e-3)
    parser.add_argument("--no-bf16", dest="bf16", action="store_false")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log_path = Path(args.log_dir or work) / "train_drafter.jsonl"
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def log(record):
        line = json.dumps(record)
        print(line, flush=True)
        with open(log_path, "a") as f:
            f.write(line + "\n")

    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).to(args.device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    regen_path = work / "regen.pt"
    if regen_path.exists():
        data = torch.load(regen_path)
    else:
        begin = time.time()
        if args.corpus:
            prompts = corpus_prompts(Path(args.corpus), tokenizer, args.prompts, args.max_prompt_tokens, args.seed)
        else:
            prompts = python_prompts(tokenizer, args.prompts, args.max_prompt_tokens, args.seed, args.workers)
        log({"event": "prompts", "code": sum(p["category"] == "code" for p in prompts),
             "chat": sum(p["category"] == "chat" for p in prompts), "seconds": round(time.time() - begin, 1)})
        sequences = regenerate(target, tokenizer, prompts, args.max_new_tokens, args.gen_batch, args.seed)
        random.Random(args.seed).shuffle(sequences)
        held = min(len(sequences) // 4, max(8, int(args.calibration_fraction * len(sequences))))
        data = {"train": sequences[held:], "calibration": sequences[:held]}
        torch.save(data, regen_path)
        tokens = sum(len(s["ids"]) - s["prompt_length"] for s in sequences)
        log({"event": "regenerated", "sequences": len(sequences), "response_tokens": tokens,
             "seconds": round(time.time() - begin, 1)})
    drafter = train(args, target, tokenizer, data["train"], log)
    drafter.save(args.out)
    log({"event": "saved", "out": args.out})


if __name__ == "__main__":
    main()
