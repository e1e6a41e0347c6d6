"""The DSpark drafter in PyTorch, LiquidAI's LFM2.5 layout (reference/dspark.md §2): context injection, block pass,
shared head, Markov head and confidence head. The scan over a block lives in scan.py.

Glossary. The anchor is the last token the target produced, at position p, not yet run through the target. The
context is the target's taps at positions 0 .. p-1. A block is [anchor, mask x (gamma-1)] at positions p .. p+gamma-1;
slot s predicts the token at p+s+1.

Numerics (the model's dtype decides where values round, as transformers' Qwen3 does):
  linear layers: inputs and weights in the model dtype, fp32 accumulation, output rounded to the model dtype;
  RMSNorm: fp32 normalisation, rounded to the model dtype, times the weight (rounded again);
  RoPE: fp32 tables and fp32 rotation of the model-dtype values, rounded once to the model dtype;
  attention: scores q.k^T * scale rounded to the model dtype, softmax in fp32 rounded to the model dtype, times V;
  head logits U = Hf . E^T, Markov bias W2 . W1[prev] and the confidence head: fp32 on the upcast values.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from .dspark_config import DSparkConfig


class RMSNorm(nn.Module):
    """transformers' Qwen3RMSNorm: w * round(x / rms(x))."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [..., head_dim/2] fp32 for pair i at angle position * theta^(-2i/head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    angles = positions.to(torch.float32)[..., None] * inv_freq
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """Rotates x [..., T, heads, head_dim] with cos/sin [..., T, head_dim/2]; interleaved pairs (2i, 2i+1) unless neox."""
    x32 = x.float()
    cos, sin = cos[..., None, :], sin[..., None, :]
    if neox:
        half = x32.shape[-1] // 2
        a, b = x32[..., :half], x32[..., half:]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = x32[..., 0::2], x32[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return out.to(x.dtype)


class DraftAttention(nn.Module):
    """Qwen3 attention whose keys are [context K/V from the taps ; the block's own K/V], no causal mask."""

    def __init__(self, config: DSparkConfig):
        super().__init__()
        c = config
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
        self.theta, self.neox = c.rope_theta, c.rope_is_neox_style

    def project_kv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K = RoPE(k_norm(k_proj x)), V = v_proj x; x [B, T, d] -> [B, T, kv_heads, head_dim] each."""
        shape = (*x.shape[:-1], self.kv_heads, self.head_dim)
        cos, sin = rope_tables(positions, self.head_dim, self.theta)
        k = apply_rope(self.k_norm(self.k_proj(x).view(shape)), cos, sin, self.neox)
        return k, self.v_proj(x).view(shape)

    def forward(self, x, positions, context_k, context_v, mask=None, eager=True):
        """x [B, Q, d] block rows at positions [B, Q]; context_k/v [B, C, kv, hd]; mask [B, Q, C+Q] bool or None."""
        shape = (*x.shape[:-1], self.heads, self.head_dim)
        cos, sin = rope_tables(positions, self.head_dim, self.theta)
        q = apply_rope(self.q_norm(self.q_proj(x).view(shape)), cos, sin, self.neox)
        block_k, block_v = self.project_kv(x, positions)
        k = torch.cat([context_k, block_k], dim=1).transpose(1, 2)  # [B, kv, C+Q, hd]
        v = torch.cat([context_v, block_v], dim=1).transpose(1, 2)
        q = q.transpose(1, 2)                                        # [B, H, Q, hd]
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # head h reads kv head h // group
        scale = 1.0 / math.sqrt(self.head_dim)
        if eager:
            scores = torch.matmul(q, k.transpose(-1, -2)) * scale
            if mask is not None:
                scores = scores.masked_fill(~mask[:, None], float("-inf"))
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs, v)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None], scale=scale)
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], self.heads * self.head_dim))


class DraftMLP(nn.Module):
    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = DraftAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = DraftMLP(config)

    def forward(self, x, positions, context_k, context_v, mask=None, eager=True):
        x = x + self.self_attn(self.input_layernorm(x), positions, context_k, context_v, mask, eager)
        return x + self.mlp(self.post_attention_layernorm(x))


class MarkovHead(nn.Module):
    """Vanilla rank-r bigram bias: B(prev, .) = W2 . W1[prev]."""

    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.markov_w1 = nn.Embedding(config.vocab_size, config.markov_rank)          # [V, r]
        self.markov_w2 = nn.Linear(config.markov_rank, config.vocab_size, bias=False)  # weight [V, r]

    def embed(self, prev: torch.Tensor) -> torch.Tensor:
        """W1[prev] as fp32 [..., r]."""
        return self.markov_w1.weight[prev].float()

    def bias(self, prev_embedding: torch.Tensor) -> torch.Tensor:
        """fp32 [..., V] from W1 rows [..., r]."""
        return prev_embedding @ self.markov_w2.weight.float().t()


class ConfidenceHead(nn.Module):
    def __init__(self, config: DSparkConfig):
        super().__init__()
        self.proj = nn.Linear(config.hidden_size + config.markov_rank, 1)

    def logit(self, final_hidden: torch.Tensor, prev_embedding: torch.Tensor) -> torch.Tensor:
        """z [...] fp32 from the post-norm hidden [..., d] and the slot's W1 row [..., r]."""
        features = torch.cat([final_hidden.float(), prev_embedding.float()], dim=-1)
        return (features @ self.proj.weight.float().t() + self.proj.bias.float())[..., 0]


class DSparkDrafter(nn.Module):
    """Weights named exactly as LiquidAI's manifest; embedding E [V, d] is the target's, passed in (shared, frozen)."""

    def __init__(self, config: DSparkConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.fc = nn.Linear(config.fc_in_features, config.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.markov_head = MarkovHead(config)
        self.confidence_head = ConfidenceHead(config)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def context(self, taps: torch.Tensor) -> torch.Tensor:
        """C = hidden_norm(fc(F)); taps F [B, T, m*d_t] (any float dtype) -> [B, T, d] in the model dtype."""
        return self.hidden_norm(self.fc(taps.to(self.dtype)))

    def context_kv(self, context: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per draft layer, the context K/V of rows C [B, T, d] at absolute positions [B, T]."""
        return [layer.self_attn.project_kv(context, positions) for layer in self.layers]

    def backbone(self, block_embeddings, positions, kv, mask=None, eager=True) -> torch.Tensor:
        """Block rows [B, Q, d] through the layers and the final norm -> Hf [B, Q, d] in the model dtype."""
        x = block_embeddings
        for layer, (k, v) in zip(self.layers, kv):
            x = layer(x, positions, k, v, mask, eager)
        return self.norm(x)

    def block_tokens(self, anchors: torch.Tensor) -> torch.Tensor:
        """[anchor, mask x (gamma-1)] per anchor: anchors [...] -> [..., gamma]."""
        gamma = self.config.block_size
        tokens = torch.full((*anchors.shape, gamma), self.config.mask_token_id, dtype=torch.long, device=anchors.device)
        tokens[..., 0] = anchors
        return tokens

    @torch.no_grad()
    def block(self, taps: torch.Tensor, anchor: int, embedding: torch.Tensor) -> torch.Tensor:
        """One request: taps [p, m*d_t] of positions 0..p-1, anchor token at p -> Hf [gamma, d] (model dtype)."""
        p, gamma = taps.shape[0], self.config.block_size
        device = embedding.device
        context_positions = torch.arange(p, device=device)[None]
        kv = self.context_kv(self.context(taps[None].to(device)), context_positions)
        tokens = self.block_tokens(torch.tensor([anchor], device=device))
        x = embedding.to(self.dtype)[tokens]                         # [1, gamma, d]
        positions = torch.arange(p, p + gamma, device=device)[None]
        return self.backbone(x, positions, kv)[0]

    def save(self, directory: str | Path) -> None:
        """config.json + model.safetensors (bf16), tensor names as LiquidAI's manifest."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.config.save(directory)
        tensors = {name: t.detach().to(torch.bfloat16).contiguous().cpu() for name, t in self.state_dict().items()}
        save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})

    @classmethod
    def load(cls, directory: str | Path, dtype: torch.dtype = torch.float32, device="cpu") -> "DSparkDrafter":
        """Strict load: every manifest tensor present with its shape, nothing else."""
        directory = Path(directory)
        model = cls(DSparkConfig.load(directory))
        state = load_file(str(directory / "model.safetensors"))
        model.load_state_dict(state, strict=True)
        return model.to(device=device, dtype=dtype)


def manifest(config: DSparkConfig) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, as reference/dspark.md §3.2."""
    d, hd, r, V = config.hidden_size, config.head_dim, config.markov_rank, config.vocab_size
    q, kv, ff = config.num_attention_heads * hd, config.num_key_value_heads * hd, config.intermediate_size
    shapes = {"fc.weight": (d, config.fc_in_features), "hidden_norm.weight": (d,)}
    for i in range(config.num_hidden_layers):
        pre = f"layers.{i}."
        shapes.update({
            pre + "input_layernorm.weight": (d,),
            pre + "self_attn.q_proj.weight": (q, d), pre + "self_attn.k_proj.weight": (kv, d),
            pre + "self_attn.v_proj.weight": (kv, d), pre + "self_attn.o_proj.weight": (d, q),
            pre + "self_attn.q_norm.weight": (hd,), pre + "self_attn.k_norm.weight": (hd,),
            pre + "post_attention_layernorm.weight": (d,),
            pre + "mlp.gate_proj.weight": (ff, d), pre + "mlp.up_proj.weight": (ff, d), pre + "mlp.down_proj.weight": (d, ff),
        })
    shapes.update({"norm.weight": (d,), "markov_head.markov_w1.weight": (V, r), "markov_head.markov_w2.weight": (V, r),
                   "confidence_head.proj.weight": (1, d + r), "confidence_head.proj.bias": (1,)})
    return shapes
