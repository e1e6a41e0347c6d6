"""Many blocks of one sequence in one pass (training and offline evaluation), and the target's taps from transformers.

Each anchor a of a sequence makes the block [x_a, mask x (gamma-1)] at positions a .. a+gamma-1. One attention call
covers all blocks: keys = [context rows 0..S-1 ; every block's rows]; a block row sees context rows strictly before
its anchor and all rows of its own block (bidirectional), nothing else. Worked example, S = 4, anchors [1, 3],
gamma = 2: block 0 = rows (x_1, M) at positions (1, 2) sees context {0}; block 1 = rows (x_3, M) at (3, 4) sees {0,1,2}.
This equals running draft_block() once per anchor with taps[:a] (tested in tests/python/test_dspark_reference.py).
"""
from __future__ import annotations

import torch

from .dspark import DSparkDrafter


def multi_block_hidden(drafter: DSparkDrafter, taps, tokens, anchor_positions, embedding, eager=False):
    """taps [B, S, m*d_t], tokens [B, S], anchor_positions [B, A] -> Hf [B, A, gamma, d] (model dtype)."""
    batch, seq = tokens.shape
    anchors_per_row = anchor_positions.shape[1]
    gamma = drafter.config.block_size
    device = tokens.device
    context = drafter.context(taps)                                            # [B, S, d]
    context_positions = torch.arange(seq, device=device).expand(batch, seq)
    kv = drafter.context_kv(context, context_positions)
    anchor_tokens = torch.gather(tokens, 1, anchor_positions)                 # [B, A]
    block = drafter.block_tokens(anchor_tokens)                               # [B, A, gamma]
    x = embedding.to(drafter.dtype)[block].reshape(batch, anchors_per_row * gamma, -1)
    slots = torch.arange(gamma, device=device)
    positions = (anchor_positions[..., None] + slots).reshape(batch, anchors_per_row * gamma)
    sees_context = torch.arange(seq, device=device) < anchor_positions[..., None]           # [B, A, S]
    sees_context = sees_context[:, :, None, :].expand(batch, anchors_per_row, gamma, seq)
    block_ids = torch.arange(anchors_per_row, device=device).repeat_interleave(gamma)
    same_block = (block_ids[:, None] == block_ids[None, :]).expand(batch, -1, -1)           # [B, A*g, A*g]
    mask = torch.cat([sees_context.reshape(batch, anchors_per_row * gamma, seq), same_block], dim=-1)
    hidden = drafter.backbone(x, positions, kv, mask, eager)
    return hidden.reshape(batch, anchors_per_row, gamma, -1)


@torch.no_grad()
def target_taps(target, input_ids, tap_ids, attention_mask=None):
    """Runs a transformers Lfm2ForCausalLM once: taps [B, S, m*d_t] (outputs of layers tap_ids, before the final
    norm: hidden_states[l+1]) and fp32 logits [B, S, V]."""
    out = target(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    taps = torch.cat([out.hidden_states[layer + 1] for layer in tap_ids], dim=-1)
    return taps, out.logits.float()


def target_embedding(target) -> torch.Tensor:
    """The target's tied embedding E [V, d] (frozen, shared with the drafter)."""
    return target.get_input_embeddings().weight.detach()
