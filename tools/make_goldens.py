#!/usr/bin/env python3
"""Golden data for the C++ LFM2 forward: tiny random LFM2 / LFM2-MoE checkpoints and transformers' outputs on them.

Usage:
  python tools/make_goldens.py --out tests/golden               # build both models, fp32 goldens on the CPU
  python tools/make_goldens.py --out tests/golden --bf16-only   # add bf16 goldens (CUDA) to the checked-in models
  python tools/make_goldens.py --out tests/golden --bf16        # both steps in one go (GPU box)

Per model directory (`lfm2_dense/`, `lfm2_moe/`): `config.json` + `model.safetensors` (fp32, save_pretrained),
`golden.json` (cases, versions, conventions) and `golden.safetensors` (F32 tensors; format in tools/README.md).
"""
import argparse
import json
import os
import platform
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Lfm2Config, Lfm2MoeConfig

SEED = 20261129
LAYER_TYPES = ["conv", "conv", "full_attention", "conv", "full_attention", "conv"]
ROPE = {"rope_type": "default", "rope_theta": 1000000.0}
VOCAB = 320
# (name, prompt length, decode length); every prompt starts with BOS = 1. Lengths 1 and 2 are shorter than the
# conv kernel (3), so the conv state starts zero-padded.
CASES = [("len1", 1, 4), ("len2", 2, 5), ("len5", 5, 6), ("len40", 40, 3)]


def dense_config():
    # FFN width: int(2*280/3) = 186 -> ceil to block_multiple_of 32 -> 192 (exercises the rounding).
    return Lfm2Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=280, block_multiple_of=32,
                      block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True, num_hidden_layers=6,
                      num_attention_heads=2, num_key_value_heads=1, conv_L_cache=3, layer_types=LAYER_TYPES,
                      rope_parameters=ROPE, max_position_embeddings=4096, norm_eps=1e-5,
                      pad_token_id=0, bos_token_id=1, eos_token_id=7, tie_word_embeddings=True)


def moe_config():
    return Lfm2MoeConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=192, moe_intermediate_size=64,
                         num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, num_dense_layers=2,
                         num_experts=8, num_experts_per_tok=3, use_expert_bias=True, norm_topk_prob=True,
                         routed_scaling_factor=1.0, conv_L_cache=3, layer_types=LAYER_TYPES, rope_parameters=ROPE,
                         max_position_embeddings=4096, norm_eps=1e-5, pad_token_id=0, bos_token_id=1,
                         eos_token_id=7, tie_word_embeddings=True)


MODELS = {"lfm2_dense": dense_config, "lfm2_moe": moe_config}


def randomize(model, gen):
    """Norm weights rand+0.5 and expert_bias randn*0.3 (defaults 1 and 0 would hide convention bugs)."""
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)
        for n, b in sorted(model.named_buffers()):
            if n.endswith("expert_bias"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.3)


def make_cases(gen):
    cases = []
    for name, t_prompt, t_decode in CASES:
        ids = torch.randint(14, VOCAB, (t_prompt - 1 + t_decode,), generator=gen).tolist()
        cases.append({"name": name, "prompt": [1] + ids[:t_prompt - 1], "decode": ids[t_prompt - 1:]})
    return cases


def gate_hooks(model):
    """Forward hooks on every MoE router (`feed_forward.gate`): its output is (logits, weights, selected_experts)
    with selected_experts [T, k] in torch.topk order (descending biased score). Returns (handles, captured list)."""
    captured, handles = [], []
    for layer in model.model.layers:
        gate = getattr(layer.feed_forward, "gate", None)
        if gate is not None and hasattr(layer.feed_forward, "experts"):
            handles.append(gate.register_forward_hook(lambda m, i, o: captured.append(o[2].detach().clone())))
    return handles, captured


@torch.no_grad()
def run_case(model, case, device):
    """Prefill logits, decode logits (cached one-token steps), hidden states and (MoE) selected experts."""
    prompt = torch.tensor([case["prompt"]], device=device)
    handles, captured = gate_hooks(model)
    last = []
    handles.append(model.model.layers[-1].register_forward_hook(
        lambda m, i, o: last.append(o[0] if isinstance(o, tuple) else o)))
    out = model(input_ids=prompt, output_hidden_states=True, use_cache=False)
    for h in handles:
        h.remove()
    # hidden[0] = embeddings, hidden[l] = output of layer l-1, except hidden[L] = embedding_norm(output of layer L-1)
    # (transformers 5.17 convention); final_prenorm = output of layer L-1 before the final norm.
    res = {"prefill_logits": out.logits[0].float().cpu(),                              # [T, V]
           "hidden": torch.stack([h[0] for h in out.hidden_states]).float().cpu(),     # [L+1, T, D]
           "final_prenorm": last[0][0].float().cpu()}                                  # [T, D]
    if captured:
        res["experts"] = torch.stack(captured, dim=1).float().cpu()                    # [T, moe_layers, k]
    step = model(input_ids=prompt, use_cache=True)
    cache, rows = step.past_key_values, []
    for tok in case["decode"]:
        step = model(input_ids=torch.tensor([[tok]], device=device), past_key_values=cache, use_cache=True)
        cache = step.past_key_values
        rows.append(step.logits[0, -1].float().cpu())
    res["decode_logits"] = torch.stack(rows)                                            # [T_decode, V]
    return res


def check_hidden_convention(model, case, device):
    """True when hidden_states[-1] is embedding_norm(last layer's output), as transformers 5.17 returns it."""
    grabbed = []
    h = model.model.layers[-1].register_forward_hook(lambda m, i, o: grabbed.append(o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        out = model(input_ids=torch.tensor([case["prompt"]], device=device), output_hidden_states=True)
        normed = model.model.embedding_norm(grabbed[0])
    h.remove()
    return bool(torch.equal(out.hidden_states[-1], normed))


def write_meta(meta, path):
    """golden.json with one line per case (ids stay readable)."""
    text = json.dumps({k: v for k, v in meta.items() if k != "cases"}, indent=1)
    cases = ",\n".join("  " + json.dumps(c) for c in meta["cases"])
    with open(path, "w") as f:
        f.write(text[:-2] + ',\n "cases": [\n' + cases + "\n ]\n}\n")


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version()}


def build_model(name, out_dir):
    gen = torch.Generator().manual_seed(SEED + (0 if name == "lfm2_dense" else 1))
    kwargs = {"attn_implementation": "eager"}
    model = AutoModelForCausalLM.from_config(MODELS[name](), dtype=torch.float32, **kwargs)
    randomize(model, gen)
    model.eval()
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    return make_cases(gen)


def load_model(out_dir, device, dtype):
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager")
    fp32_bias = {n: b.detach().clone() for n, b in model.named_buffers() if n.endswith("expert_bias")}
    model = model.to(device=device, dtype=dtype)
    # Real LFM2-MoE checkpoints keep expert_bias in fp32 (bf16 score + fp32 bias -> fp32 routing score), so keep it.
    for n, b in model.named_buffers():
        if n in fp32_bias:
            b.data = fp32_bias[n].to(device)
    return model.eval()


def golden_pass(out_dir, mode, meta, bf16_device="cuda"):
    device = "cpu" if mode == "fp32" else bf16_device
    dtype = torch.float32 if mode == "fp32" else torch.bfloat16
    model = load_model(out_dir, device, dtype)
    tensors_path = os.path.join(out_dir, "golden.safetensors")
    tensors = load_file(tensors_path) if os.path.exists(tensors_path) else {}
    tensors = {k: v for k, v in tensors.items() if f".{mode}." not in k}
    for case in meta["cases"]:
        for key, value in run_case(model, case, device).items():
            tensors[f"{case['name']}.{mode}.{key}"] = value.contiguous()
    save_file(dict(sorted(tensors.items())), tensors_path)
    info = {"device": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
            "dtype": str(dtype).replace("torch.", ""), "attn_implementation": model.config._attn_implementation,
            "hidden_last_is_final_normed": check_hidden_convention(model, meta["cases"][0], device),
            "versions": versions()}
    if hasattr(model.config, "num_experts"):
        info["experts_implementation"] = model.config._experts_implementation
        info["expert_bias_dtype"] = str(next(b for n, b in model.named_buffers()
                                             if n.endswith("expert_bias")).dtype).replace("torch.", "")
    meta[mode] = info
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="golden root (tests/golden)")
    ap.add_argument("--bf16", action="store_true", help="also write bf16 goldens (needs CUDA)")
    ap.add_argument("--bf16-only", action="store_true", help="only add bf16 goldens to existing model dirs")
    ap.add_argument("--models", default="lfm2_dense,lfm2_moe")
    ap.add_argument("--bf16-device", default="cuda", help="cpu only for dry runs; the checked-in bf16 goldens are CUDA")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    for name in args.models.split(","):
        out_dir = os.path.join(args.out, name)
        meta_path = os.path.join(out_dir, "golden.json")
        if args.bf16_only:
            with open(meta_path) as f:
                meta = json.load(f)
        else:
            cases = build_model(name, out_dir)
            if os.path.exists(os.path.join(out_dir, "golden.safetensors")):
                os.remove(os.path.join(out_dir, "golden.safetensors"))
            meta = {"model": name, "seed": SEED, "format": "tools/README.md, section Goldens", "cases": cases}
            meta = golden_pass(out_dir, "fp32", meta)
        if args.bf16 or args.bf16_only:
            if args.bf16_device == "cuda" and not torch.cuda.is_available():
                sys.exit("bf16 goldens need CUDA (run on the GPU box)")
            meta = golden_pass(out_dir, "bf16", meta, args.bf16_device)
        write_meta(meta, meta_path)
        print(f"{name}: {len(meta['cases'])} cases, modes {[m for m in ('fp32', 'bf16') if m in meta]}")


if __name__ == "__main__":
    main()
