"""Tiny random LFM2 targets and DSpark drafters with fixed seeds, for the CPU tests and the C++ drafter goldens."""
from __future__ import annotations

import torch

from .dspark import DSparkDrafter
from .dspark_config import DSparkConfig


def tiny_target(seed: int = 0, vocab: int = 320, hidden: int = 64, layers: int = 4):
    """An fp32 Lfm2ForCausalLM, conv and attention layers alternating, norms randomised around 1."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    torch.manual_seed(seed)
    config = Lfm2Config(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=2 * hidden, block_auto_adjust_ff_dim=False, max_position_embeddings=4096,
        layer_types=["conv" if i % 2 == 0 else "full_attention" for i in range(layers)],
        initializer_range=0.2, tie_word_embeddings=True, bos_token_id=1, eos_token_id=7, pad_token_id=0,
    )
    model = Lfm2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.rand_like(p) + 0.5)
    return model


def tiny_drafter_config(vocab: int = 320, hidden: int = 64, target_layers: int = 4, **overrides) -> DSparkConfig:
    """A drafter whose query width (4 heads x 32) differs from its hidden size and with GQA 2:1, to catch shape slips."""
    fields = dict(
        hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        intermediate_size=96, vocab_size=vocab, block_size=5, mask_token_id=vocab - 1,
        target_layer_ids=[0, target_layers - 2], num_target_layers=target_layers, markov_rank=16, rope_theta=5e5,
    )
    fields.update(overrides)
    return DSparkConfig(**fields)


def random_drafter(config: DSparkConfig, seed: int = 0) -> DSparkDrafter:
    """fp32 drafter with every weight random (norm gains in [0.5, 1.5), Markov rows ~ N(0, 0.5^2), output
    projections scaled up)."""
    torch.manual_seed(seed)
    drafter = DSparkDrafter(config).eval()
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.rand_like(p) + 0.5)
            elif name.startswith("markov_head"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif name == "confidence_head.proj.bias":
                p.copy_(torch.randn_like(p))
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(4.0)  # let the layers outweigh the block's own token embeddings, so picks vary by slot
    return drafter
