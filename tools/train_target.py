#!/usr/bin/env python3
"""Trains the nano LFM2 target (Lfm2ForCausalLM) on the corpus in bf16 mixed precision and saves it sharded.

  python tools/train_target.py --corpus WORK/corpus --tokenizer models/nano/target --out models/nano/target \
      --log-dir OUT/target [--minutes 4.5 | --steps N]

Data: code and prose documents as BOS + text + <|endoftext|>, chat conversations rendered with the LFM2 chat
template (which starts with BOS and ends each turn with <|im_end|>\\n), shuffled with a fixed seed and packed into
rows of --seq-len tokens. 1% of each part's documents is held out for the eval loss. AdamW, linear warm-up then
cosine decay to 10%, fp32 master weights under bf16 autocast. With --minutes the step count is fixed after timing
the first steps (rounded to 50) and logged; pass it as --steps to repeat a run exactly.
Writes OUT (config.json, generation_config.json, bf16 safetensors shards < 16 MiB + index) and LOG_DIR/train.json
(curve, final losses, samples).
"""
import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer, Lfm2Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_tokenizer import render_chat  # noqa: E402

BOS, TEXT_END, IM_END, PAD = 1, 2, 7, 0
PRESETS = {
    # ~12.5M parameters (3.1M in the tied embedding): 25 MB in bf16.
    "nano": dict(hidden_size=384, num_hidden_layers=8, num_attention_heads=6, num_key_value_heads=2,
                 intermediate_size=864, block_multiple_of=64, attn_layers=(2, 5, 7)),
    # CPU dry runs only.
    "tiny": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=1, num_key_value_heads=1,
                 intermediate_size=192, block_multiple_of=32, attn_layers=(2,)),
}


def model_config(preset, vocab_size):
    p = dict(PRESETS[preset])
    attn = p.pop("attn_layers")
    layer_types = ["full_attention" if i in attn else "conv" for i in range(p["num_hidden_layers"])]
    return Lfm2Config(vocab_size=vocab_size, layer_types=layer_types, block_auto_adjust_ff_dim=True,
                      block_ffn_dim_multiplier=1.0, conv_L_cache=3, norm_eps=1e-5, max_position_embeddings=4096,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True,
                      pad_token_id=PAD, bos_token_id=BOS, eos_token_id=IM_END, **p)


def read_docs(corpus, part):
    with open(os.path.join(corpus, f"{part}.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            yield render_chat(rec["messages"]) if part == "chat" else rec["text"]


def tokenize_part(tok, corpus, part, batch=2048):
    """All documents of one part as id lists (BOS ... <|endoftext|> for code/prose; the template for chat)."""
    docs, buf = [], []

    def flush():
        for enc in tok.encode_batch(buf, add_special_tokens=False):
            ids = enc.ids
            docs.append(ids if part == "chat" else [BOS] + ids + [TEXT_END])
        buf.clear()
    for text in read_docs(corpus, part):
        buf.append(text)
        if len(buf) == batch:
            flush()
    flush()
    return docs


def build_data(tok, corpus, seq_len, seed):
    """-> train rows [N, seq_len] (int64), eval rows per part, token counts."""
    rng = random.Random(seed)
    train_docs, evals, counts = [], {}, {}
    for part in ("code", "prose", "chat"):
        docs = tokenize_part(tok, corpus, part)
        rng.shuffle(docs)
        n_eval = max(1, len(docs) // 100)
        eval_ids = [t for d in docs[:n_eval] for t in d]
        n_rows = max(1, len(eval_ids) // seq_len)
        evals[part] = torch.tensor((eval_ids * 2)[:n_rows * seq_len]).view(n_rows, seq_len)[:64]
        train_docs += docs[n_eval:]
        counts[part] = {"docs": len(docs), "tokens": sum(len(d) for d in docs)}
    rng.shuffle(train_docs)
    flat = torch.tensor([t for d in train_docs for t in d], dtype=torch.int64)
    n = len(flat) // seq_len
    return flat[:n * seq_len].view(n, seq_len), evals, counts


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def eval_loss(model, evals, device, batch):
    model.eval()
    out = {}
    for part, rows in evals.items():
        losses = []
        for i in range(0, len(rows), batch):
            x = rows[i:i + batch].to(device)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                losses.append(model(input_ids=x, labels=x, use_cache=False).loss.float().item())
        out[part] = sum(losses) / len(losses)
    model.train()
    return out


@torch.no_grad()
def samples(out_dir, eval_prompts, device, max_new_tokens):
    """Greedy continuations of the first held-out chat and code prompts by the saved (bf16) checkpoint."""
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.bfloat16).to(device).eval()
    with open(eval_prompts) as f:
        ev = json.load(f)
    res = []
    for kind in ("chat", "code"):
        for rec in ev[kind][:3]:
            if kind == "chat":
                text = tokenizer.apply_chat_template(rec["messages"], tokenize=False, add_generation_prompt=True)
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            else:
                ids = tokenizer(rec["prompt"])["input_ids"][-400:]
                ids = [BOS] + ids[1:] if ids[0] != BOS else ids
            x = torch.tensor([ids], device=device)
            y = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                               do_sample=False, eos_token_id=IM_END, pad_token_id=PAD)
            res.append({"kind": kind, "id": rec["id"], "prompt_tail": tokenizer.decode(ids)[-300:],
                        "completion": tokenizer.decode(y[0, len(ids):].tolist())})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--eval-prompts", default="models/nano/eval_prompts.json")
    ap.add_argument("--preset", default="nano", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: from --minutes)")
    ap.add_argument("--minutes", type=float, default=4.5, help="training time budget when --steps is 0")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sample-tokens", type=int, default=96)
    args = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    rows, evals, counts = build_data(tok, args.corpus, args.seq_len, args.seed)
    print(f"data: {rows.shape[0]} rows of {args.seq_len} tokens ({rows.numel() / 1e6:.1f}M), {counts}, "
          f"{time.time() - t0:.0f}s", flush=True)
    config = model_config(args.preset, tok.get_vocab_size())
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").to(device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(args.seed)
    order, cursor = torch.randperm(rows.shape[0], generator=gen), 0
    steps, curve, step, t_train = args.steps, [], 0, time.time()
    timing_steps = 20
    while True:
        if steps == 0 and step == timing_steps:
            if device.type == "cuda":
                torch.cuda.synchronize()
            per_step = (time.time() - t_timing) / (timing_steps - 5)
            steps = max(timing_steps + 50, int(args.minutes * 60 / per_step) // 50 * 50)
            print(f"{per_step * 1e3:.1f} ms/step -> {steps} steps", flush=True)
        if steps and step >= steps:
            break
        if step == 5:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t_timing = time.time()
        if cursor + args.batch > len(order):
            order, cursor = torch.randperm(rows.shape[0], generator=gen), 0
        x = rows[order[cursor:cursor + args.batch]].to(device, non_blocking=True)
        cursor += args.batch
        lr = lr_at(step, steps or 10**9, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(input_ids=x, labels=x, use_cache=False).loss
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or (steps and step == steps - 1):
            item = {"step": step, "loss": round(loss.item(), 4), "lr": lr, "grad_norm": round(grad_norm.item(), 3),
                    "seconds": round(time.time() - t_train, 1)}
            curve.append(item)
            print(json.dumps(item), flush=True)
        step += 1
    train_seconds = time.time() - t_train
    final_eval = eval_loss(model, evals, device, 16)
    tail = [c["loss"] for c in curve[-5:]]
    model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config.update(bos_token_id=BOS, eos_token_id=IM_END, pad_token_id=PAD)
    model.save_pretrained(args.out, max_shard_size="15MB", safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src, dst = os.path.join(args.tokenizer, name), os.path.join(args.out, name)
        if os.path.abspath(src) != os.path.abspath(dst):
            shutil.copyfile(src, dst)
    files = {f: os.path.getsize(os.path.join(args.out, f)) for f in sorted(os.listdir(args.out))}
    report = {"preset": args.preset, "config": {k: v for k, v in PRESETS[args.preset].items()},
              "parameters": n_params, "vocab_size": tok.get_vocab_size(), "steps": steps, "batch": args.batch,
              "seq_len": args.seq_len, "tokens_seen": steps * args.batch * args.seq_len,
              "train_tokens": rows.numel(), "data": counts, "train_seconds": round(train_seconds, 1),
              "final_train_loss_last5_mean": round(sum(tail) / len(tail), 4), "eval_loss": final_eval,
              "curve_start": curve[:3], "curve_end": curve[-3:], "curve": curve, "files": files,
              "torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"}
    if os.path.exists(args.eval_prompts):
        report["samples"] = samples(args.out, args.eval_prompts, device, args.sample_tokens)
    os.makedirs(args.log_dir, exist_ok=True)
    with open(os.path.join(args.log_dir, "train_target.json"), "w") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
    print(json.dumps({k: report[k] for k in ("parameters", "steps", "tokens_seen", "train_seconds",
                                             "final_train_loss_last5_mean", "eval_loss", "files")}), flush=True)
    for s in report.get("samples", []):
        print(f"--- {s['kind']} {s['id']}\n{s['prompt_tail'][-200:]}\n>>> {s['completion']}", flush=True)


if __name__ == "__main__":
    main()
